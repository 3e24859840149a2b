"""Blocks in fabric-proximity order, named after their NVLink domains (fabriclab's own
reading; topograph lists blocks in the breadth-first order of their first node and calls
them ``block001`` …).

Slurm's topology/block forms its larger blocks (BlockSizes 2D, 4D …) from consecutive
blocks in topology.conf order, aligned: blocks 1-2, 3-4, then 1-4 … (``AggregatedBlock``
in ``scontrol show topology``).  So the order decides which switches a job of an
aggregate's size spans.  Here each block hangs at the lowest switch of the tree above all
of its nodes; the blocks under one switch are listed together (those under one leaf
group, then those under one spine group — a pod —, and so on up), so that every aligned
run of 2^k blocks stays under one switch wherever the counts allow it.  Among the
groups under one switch, those whose block counts have the larger power-of-two factor
come first: a group of 4 before one of 6 keeps both 4-runs inside a group (4+4+2), where
6 first would cut the second run across them.  Ties go by name, numbers compared as
numbers, so equal racks read in order (``nvl72-r01`` … ``nvl72-r08``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ...graph import Vertex
from .blocks import Block

_DIGITS = re.compile(r"(\d+)")
_SEPARATORS = "-_."


def natural_key(name: str) -> tuple:
    """``name`` split into text and numbers, so that ``r2`` sorts before ``r10``."""
    return tuple(
        (0, int(part), part) if part.isdigit() else (1, 0, part)
        for part in _DIGITS.split(name)
        if part
    )


def readable_name(block: Block, domain_names: dict[str, str]) -> str:
    """What a reader knows the block's domain by: the spec's name for it, else the stem
    its nodes' names share (see ``host_stem``), else the domain itself
    (``<ClusterUUID>.<CliqueId>``), else ""."""
    if block.name in domain_names:
        return domain_names[block.name]
    return host_stem(block.nodes) or block.name


def domain_labels(blocks: list[Block], domain_names: dict[str, str]) -> dict[str, str]:
    """Each block's domain -> its ``readable_name``; where stems of different domains'
    hosts coincide (``node`` for node[01-04] and node[33-36]), those domains are called
    by themselves (``<ClusterUUID>.<CliqueId>``) instead."""
    labels = {block.name: readable_name(block, domain_names) for block in blocks}
    owners: dict[str, int] = {}
    for label in labels.values():
        owners[label] = owners.get(label, 0) + 1
    return {
        domain: domain if owners[label] > 1 and domain not in domain_names else label
        for domain, label in labels.items()
    }


def host_stem(nodes: list[str]) -> str:
    """The stem of a group of host names: a lone host's name; else their common prefix
    without trailing digits and separators, and without a last one-letter part
    (``gb-r03`` for ``gb-r03-t01`` … ``gb-r03-t18``, ``sched-worker`` for
    ``sched-worker[1-2]``); "" when they share nothing."""
    if len(nodes) <= 1:
        return nodes[0] if nodes else ""
    first, last = min(nodes), max(nodes)
    size = 0
    while size < min(len(first), len(last)) and first[size] == last[size]:
        size += 1
    stem = first[:size].rstrip("0123456789").rstrip(_SEPARATORS)
    cut = max(stem.rfind(sep) for sep in _SEPARATORS)
    if cut > 0 and len(stem) - cut == 2:  # "-t" of "-t01": a tray number's letter
        stem = stem[:cut]
    return stem


def unique_names(names: list[str], fallback: list[str]) -> list[str]:
    """Each block's name, made unique: an empty name becomes its ``fallback`` (the
    block's id); a name several blocks share becomes ``<name>.1``, ``<name>.2`` … in
    order (a domain cut into several base blocks)."""
    names = [name or fallback[i] for i, name in enumerate(names)]
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    seen: dict[str, int] = {}
    out = []
    taken = {name for name in names if counts[name] == 1}
    for name in names:
        if counts[name] == 1:
            out.append(name)
            continue
        k = seen.get(name, 0)
        while True:
            k += 1
            candidate = f"{name}.{k}"
            if candidate not in taken:
                break
        seen[name] = k
        taken.add(candidate)
        out.append(candidate)
    return out


@dataclass
class _Switch:
    """A switch of the tree with the blocks that hang right at it and its subtrees."""

    blocks: list[Block] = field(default_factory=list)
    below: dict[str, _Switch] = field(default_factory=dict)


def proximity_order(root: Vertex, blocks: list[Block], names: dict[str, str]) -> list[Block]:
    """``blocks`` in fabric-proximity order over the tree under ``root`` (see the module
    docstring); ``names`` gives each block's id its readable name, for the ties.  A block
    with no node in the tree hangs at the root."""
    path_of: dict[str, list[str]] = {}

    def walk(vertex: Vertex, path: list[str]) -> None:
        for key in sorted(vertex.vertices):
            child = vertex.vertices[key]
            if child.vertices:
                walk(child, [*path, child.id])
            else:
                path_of[child.name] = path

    walk(root, [])
    top = _Switch()
    for block in blocks:
        paths = [path_of[node] for node in block.nodes if node in path_of]
        common = paths[0] if paths else []
        for path in paths[1:]:
            size = 0
            while size < min(len(common), len(path)) and common[size] == path[size]:
                size += 1
            common = common[:size]
        at = top
        for switch_id in common:
            at = at.below.setdefault(switch_id, _Switch())
        at.blocks.append(block)
    return _ordered(top, names)


def _ordered(switch: _Switch, names: dict[str, str]) -> list[Block]:
    groups = [[block] for block in switch.blocks]
    groups += [run for run in (_ordered(sub, names) for sub in switch.below.values()) if run]

    def key(group: list[Block]):
        count = len(group)
        return (-(count & -count), -count, min(natural_key(names[block.id]) for block in group))

    return [block for group in sorted(groups, key=key) for block in group]
