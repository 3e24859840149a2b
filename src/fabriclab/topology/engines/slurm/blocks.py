"""Blocks of topology/block: one per accelerator domain, and the BlockSizes line
(topograph's ``blockInfo``, ``toBlockInfos`` and ``getBlockSizes``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ...graph import DomainMap
from .errors import SlurmTopologyError


@dataclass
class Block:
    """A block: its id (``block001``), the domain it was made from (``name``, written as a
    ``# id=name`` comment), its nodes, and its place in the blocks' breadth-first order."""

    id: str
    name: str = ""
    nodes: list[str] = field(default_factory=list)
    position: int = 0


def domain_blocks(domains: DomainMap) -> list[Block]:
    """One block per domain, domains and their hosts sorted by name."""
    return [
        Block(f"block{i + 1:03d}", name, sorted(domains[name]))
        for i, name in enumerate(sorted(domains))
    ]


def block_sizes(blocks: list[Block], requested: list[int]) -> list[int]:
    """The requested sizes, else [D, 2D, …, 2^k·D]: D the smallest block, k = ⌊log2 N⌋."""
    if requested:
        return list(requested)
    if not blocks:
        raise SlurmTopologyError("cannot determine blockSizes: topology contains no blocks")
    smallest = min(len(block.nodes) for block in blocks)
    return [smallest * 2**i for i in range(int(math.log2(len(blocks))) + 1)]
