"""topology.conf text: topology/tree (``SwitchName=`` lines, breadth first) and
topology/block (``BlockName=`` lines and ``BlockSizes=``), as topograph writes them
(pkg/translate/tree.go and block.go)."""

from __future__ import annotations

from collections import deque

from ...cluset import compact
from ...graph import Vertex
from .block_names import block_names
from .block_order import domain_labels, natural_key, proximity_order, unique_names
from .block_tree import complement
from .blocks import Block, block_sizes
from .errors import SlurmTopologyError
from .network import NetworkTopology


def tree_conf(network: NetworkTopology, skeleton: bool) -> str:
    """topology/tree: each switch breadth first, ``# name=id`` where it has a name; its
    switch children on one line and (unless ``skeleton``) its nodes on another."""
    out: list[str] = []
    visited: set[str] = set()
    queue = deque([""])
    while queue:
        vertex_id = queue.popleft()
        if vertex_id in visited:
            continue
        visited.add(vertex_id)
        vertex = network.vertices.get(vertex_id)
        if vertex is None:
            raise SlurmTopologyError(f'missing vertex with ID "{vertex_id}"', 502)
        _write_switch(out, vertex, skeleton)
        queue.extend(network.tree[vertex_id])
    return "".join(out)


def _write_switch(out: list[str], vertex: Vertex, skeleton: bool) -> None:
    """topograph's ``writeVertex`` (nothing for the hidden root)."""
    if not vertex.id:
        return
    switches, nodes = [], []
    for child in vertex.vertices.values():
        if not child.vertices:
            nodes.append(child.name)
        else:
            switches.append(child.name or child.id)
    if vertex.name:
        comment, name = f"# {vertex.name}={vertex.id}\n", vertex.name
    else:
        comment, name = "", vertex.id
    if switches:
        out.append(f"{comment}SwitchName={name} Switches={','.join(compact(switches))}\n")
    if not skeleton and nodes:
        out.append(f"{comment}SwitchName={name} Nodes={','.join(compact(nodes))}\n")


def block_conf(network: NetworkTopology, skeleton: bool) -> str:
    """topology/block: the blocks (complemented where block sizes or sub-domains call for
    it), renamed by blockName, ``# id=domain`` where made from a domain, then BlockSizes.
    Where the graph asks for it, the blocks are in fabric-proximity order and named
    after their domains (block_order)."""
    config = network.config
    if network.graph.blocks_by_proximity:
        blocks, sizes = _proximity_blocks(network)
    else:
        blocks, sizes = complement(network.blocks, config.block_sizes, network.domains)
    names = block_names(blocks, config.block_name)
    named = [
        Block(name, block.name, block.nodes, block.position)
        for block, name in zip(blocks, names, strict=False)
    ]
    sizes = block_sizes(named, sizes)
    out = []
    for block in named:
        comment = f"# {block.id}={block.name}\n" if block.name and block.name != block.id else ""
        if skeleton or not block.nodes:
            out.append(f"{comment}BlockName={block.id}\n")
        else:
            out.append(f"{comment}BlockName={block.id} Nodes={','.join(compact(block.nodes))}\n")
    out.append(f"BlockSizes={','.join(str(size) for size in sizes)}\n")
    return "".join(out)


def _proximity_blocks(network: NetworkTopology) -> tuple[list[Block], list[int]]:
    """The blocks in fabric-proximity order (complemented in that order), each with the
    readable name of its domain as its id (``.1``, ``.2`` … where a domain makes several
    blocks)."""
    labels = domain_labels(network.blocks, network.graph.domain_names)
    readable = {block.id: labels[block.name] or block.id for block in network.blocks}
    if network.graph.tiers is not None:
        ordered = proximity_order(network.graph.tiers, network.blocks, readable)
    else:
        ordered = sorted(network.blocks, key=lambda block: natural_key(readable[block.id]))
    blocks, sizes = complement(ordered, network.config.block_sizes, network.domains, True)
    names = unique_names(
        [labels.get(block.name, block.name) for block in blocks], [block.id for block in blocks]
    )
    return [
        Block(name, block.name, block.nodes, block.position)
        for block, name in zip(blocks, names, strict=True)
    ], sizes
