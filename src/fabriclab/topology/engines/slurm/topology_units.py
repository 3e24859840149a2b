"""The per-partition topologies of topology.yaml (topograph's ``TopologyUnit``s,
pkg/translate/yaml.go): for each named topology, the part of the tree that reaches its
nodes, or its nodes' blocks (complemented), or flat."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from ...cluset import MAX_EXPANDED, compact, expand_list
from ...errors import OptionError
from .block_names import block_names
from .block_tree import complement
from .blocks import Block, block_sizes
from .config import BLOCK, TREE, TopologySpec
from .errors import SlurmTopologyError
from .network import NetworkTopology


@dataclass
class TopologyUnit:
    """One entry of topology.yaml: flat, a tree (``switches``), or blocks."""

    name: str
    cluster_default: bool = False
    flat: bool = False
    switches: list[tuple[str, str, str]] | None = None  # (switch, children, nodes)
    block_sizes: list[int] | None = None
    blocks: list[tuple[str, str]] | None = None  # (block, nodes)


def topology_units(network: NetworkTopology) -> list[TopologyUnit]:
    """Every named topology of the config, sorted by name; an error names its topology."""
    out = []
    budget = _NameBudget()  # for all the topologies' node lists together
    topologies = network.config.topologies
    for name in sorted(topologies):
        spec = topologies[name]
        try:
            if spec.plugin == TREE:
                out.append(_tree_unit(network, name, spec, budget))
            elif spec.plugin == BLOCK:
                out.append(_block_unit(network, name, spec, budget))
            else:
                out.append(TopologyUnit(name, spec.cluster_default, flat=True))
        except SlurmTopologyError as e:
            raise SlurmTopologyError(f'topology "{name}": {e}') from None
    return out


class _NameBudget:
    """How many more names all the topologies' node lists may expand to: one list makes
    at most MAX_EXPANDED (counted before expanding), and once the lists together have
    made more than MAX_EXPANDED the next is refused, so a request makes at most twice
    MAX_EXPANDED names."""

    def __init__(self) -> None:
        self.left = MAX_EXPANDED

    def expand(self, spec: TopologySpec) -> list[str]:
        """The topology's node lists expanded."""
        nodes: list[str] = []
        for entry in spec.nodes:
            try:
                names = expand_list(entry)
            except OptionError as e:
                raise SlurmTopologyError(f"nodes expansion failed: {e}") from None
            self.left -= len(names)
            if self.left < 0:
                raise SlurmTopologyError(
                    f"nodes expansion failed: the topologies' node lists "
                    f"expand to more than {MAX_EXPANDED} names"
                )
            nodes.extend(names)
        return nodes


def _block_unit(
    network: NetworkTopology, name: str, spec: TopologySpec, budget: _NameBudget
) -> TopologyUnit:
    """``getBlockTopologyUnit``: the blocks of the topology's nodes (each block cut down to
    them), complemented, renamed ``block1``, ``block2`` … or by blockName; flat when none
    of its nodes is in a block."""
    by_position: dict[int, Block] = {}
    for node in budget.expand(spec):
        info = network.node_info.get(node)
        if info is None or info.block_position is None:
            continue
        position = info.block_position
        block = by_position.get(position)
        if block is None:
            domain = network.blocks[position].name if position < len(network.blocks) else ""
            by_position[position] = Block("", domain, [node], position)
        else:
            block.nodes.append(node)
    unit = TopologyUnit(name, spec.cluster_default)
    if not by_position:
        unit.flat = True
        return unit
    blocks = [by_position[position] for position in sorted(by_position)]
    blocks, sizes = complement(blocks, spec.block_sizes, network.domains)
    for i, block in enumerate(blocks):
        block.id = f"block{i + 1}"
    names = block_names(blocks, spec.block_name)
    unit.blocks = [
        (block_name, ",".join(compact(block.nodes)) if block.nodes else "")
        for block, block_name in zip(blocks, names, strict=False)
    ]
    unit.block_sizes = block_sizes(blocks, sizes)
    return unit


def _tree_unit(
    network: NetworkTopology, name: str, spec: TopologySpec, budget: _NameBudget
) -> TopologyUnit:
    """``getTreeTopologyUnit``: the switches on the way to the topology's nodes, breadth
    first, each with its switch children on that way and its selected nodes; flat when
    none of its nodes is in the tree."""
    unit = TopologyUnit(name, spec.cluster_default)
    names = budget.expand(spec)
    selected = set(names)
    instance_ids = []
    for node in names:
        info = network.node_info.get(node)
        if info is None:
            selected.discard(node)
        else:
            instance_ids.append(info.instance_id)
    sub_tree = _partition_tree(network, instance_ids)
    if not sub_tree:
        unit.flat = True
        return unit
    unit.switches = []
    visited: set[str] = set()
    queue = deque([""])
    while queue:
        switch_id = queue.popleft()
        if switch_id in visited:
            continue
        visited.add(switch_id)
        connects = sub_tree.get(switch_id)
        if connects is None:
            continue
        if switch_id:
            vertex = network.vertices[switch_id]
            children, leaves = [], []
            wanted = set(connects)
            for child in vertex.vertices.values():
                if not child.vertices:
                    if child.name in selected:
                        leaves.append(child.name)
                elif child.id in wanted:
                    children.append(child.id)
            if children or leaves:
                unit.switches.append(
                    (
                        vertex.id,
                        ",".join(compact(children)) if children else "",
                        ",".join(compact(leaves)) if leaves else "",
                    )
                )
        queue.extend(connects)
    return unit


def _partition_tree(network: NetworkTopology, leaves: list[str]) -> dict[str, list[str]]:
    """``getPartitionTree``: the tree cut down to the vertices with a wanted leaf below
    them (vertex id -> its children that have one)."""
    wanted = set(leaves)
    required: set[str] = set()

    def keep(vertex_id: str) -> bool:
        kept = vertex_id in wanted
        for child in network.tree.get(vertex_id, []):
            if keep(child):
                kept = True
        if kept:
            required.add(vertex_id)
        return kept

    keep("")
    sub_tree: dict[str, list[str]] = {}
    for parent, children in network.tree.items():
        if parent in required:
            for child in children:
                if child in required:
                    sub_tree.setdefault(parent, []).append(child)
    return sub_tree
