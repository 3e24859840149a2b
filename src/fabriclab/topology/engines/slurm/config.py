"""The Slurm engine's options (plugin, block sizes, block names, named topologies) and
their check against a graph, with topograph's messages (pkg/translate)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...graph import Graph
from .block_names import BlockName
from .errors import SlurmTopologyError

TREE, BLOCK, FLAT = "topology/tree", "topology/block", "topology/flat"


@dataclass
class TopologySpec:
    """One named topology of topology.yaml (a partition's topology)."""

    plugin: str
    nodes: list[str] = field(default_factory=list)  # compact host lists
    block_sizes: list[int] = field(default_factory=list)
    block_name: BlockName | None = None
    cluster_default: bool = False


@dataclass
class SlurmConfig:
    """What to write: one topology.conf (``plugin``, with block sizes and names for
    topology/block), or topology.yaml when ``topologies`` are given."""

    plugin: str = TREE
    block_sizes: list[int] = field(default_factory=list)
    block_name: BlockName | None = None
    topologies: dict[str, TopologySpec] = field(default_factory=dict)

    def validate(self, graph: Graph | None) -> None:
        """SlurmTopologyError unless the options make sense and the graph has what
        they need (a tree for topology/tree, domains for topology/block)."""
        if self.block_name is not None and self.plugin != BLOCK:
            raise SlurmTopologyError(f'blockName is only supported with plugin "{BLOCK}"')
        if self.topologies:
            if self.plugin and self.plugin != TREE:
                raise SlurmTopologyError("plugin and topologies parameters are mutually exclusive")
            for name, spec in self.topologies.items():
                _validate_named(name, spec, graph)
            return
        if self.plugin == TREE:
            if graph is None or graph.tiers is None:
                raise SlurmTopologyError("missing tree topology")
        elif self.plugin == BLOCK:
            if graph is None or graph.domains is None:
                raise SlurmTopologyError("missing block topology")
            if not graph.domains:
                raise SlurmTopologyError("block topology contains no accelerator domains")
        else:
            raise SlurmTopologyError(f'unsupported topology plugin "{self.plugin}"')


def _validate_named(name: str, spec: TopologySpec, graph: Graph | None) -> None:
    if spec.block_name is not None and spec.plugin != BLOCK:
        raise SlurmTopologyError(
            f'topology "{name}": blockName is only supported with plugin "{BLOCK}"'
        )
    if spec.plugin == TREE:
        if graph is None or graph.tiers is None:
            raise SlurmTopologyError(f'missing tree topology for topology "{name}"')
    elif spec.plugin == BLOCK:
        if graph is None or graph.domains is None:
            raise SlurmTopologyError(f'missing block topology for topology "{name}"')
    elif spec.plugin != FLAT:
        raise SlurmTopologyError(
            f'unsupported topology plugin "{spec.plugin}" for topology "{name}"'
        )
    if not spec.nodes and spec.plugin != FLAT:
        raise SlurmTopologyError(f'topology "{name}" specifies no nodes')
