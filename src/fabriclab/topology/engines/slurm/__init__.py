"""The Slurm engine: topology.conf for topology/tree and topology/block, and the
per-partition topology.yaml, from a topology graph.

The rules follow NVIDIA topograph's translate package, so that the same graph gives
the same bytes: breadth-first switch order with sorted children, ``# <name>=<id>``
comments for named vertices, topograph's host-list compaction, blocks ordered by the
first appearance of their nodes in the tree, ``BlockSizes`` inferred as [D, 2D, …,
2^k·D], and base-block "complementing" (padding and splitting domains into the block
tree Slurm expects) when block sizes are given or sub-domains exist.

fabriclab's own reading (``Graph.blocks_by_proximity``) lists blocks in fabric-proximity
order instead, named after their NVLink domains.

One job per module: ``config`` (options and their check), ``network`` (the graph
indexed), ``blocks`` and ``block_names`` (blocks and their names), ``block_order``
(proximity order and domain names), ``block_tree`` (the complement), ``topology_conf`` (topology.conf), ``topology_units`` and ``topology_yaml``
(topology.yaml).
"""

from __future__ import annotations

from ...graph import Graph
from .block_names import BlockName
from .config import BLOCK, FLAT, TREE, SlurmConfig, TopologySpec
from .errors import SlurmTopologyError
from .network import NetworkTopology
from .topology_conf import block_conf, tree_conf
from .topology_units import topology_units
from .topology_yaml import topology_yaml

__all__ = [
    "BLOCK",
    "FLAT",
    "TREE",
    "BlockName",
    "SlurmConfig",
    "SlurmTopologyError",
    "TopologySpec",
    "generate",
]


def generate(graph: Graph, config: SlurmConfig, skeleton: bool = False) -> str:
    """The Slurm file ``config`` asks for: topology.yaml when it names topologies, else
    topology.conf for its plugin; ``skeleton`` leaves out the node lists."""
    network = NetworkTopology(graph, config)
    if config.topologies:
        return topology_yaml(topology_units(network), skeleton)
    if config.plugin == BLOCK:
        return block_conf(network, skeleton)
    return tree_conf(network, skeleton)
