"""topology.yaml: the per-partition topologies (engines/slurm/topology_units.py) and
their text (topology_yaml.py), in-process."""

from __future__ import annotations

import pytest
import yaml
from topology_graphs import two_leaves

from fabriclab.topology.cluset import MAX_EXPANDED
from fabriclab.topology.engines.slurm import (
    BLOCK,
    FLAT,
    TREE,
    SlurmConfig,
    SlurmTopologyError,
    TopologySpec,
)
from fabriclab.topology.engines.slurm.network import NetworkTopology
from fabriclab.topology.engines.slurm.topology_units import TopologyUnit, topology_units
from fabriclab.topology.engines.slurm.topology_yaml import topology_yaml


def units(topologies: dict[str, TopologySpec]) -> list[TopologyUnit]:
    return topology_units(NetworkTopology(two_leaves(), SlurmConfig("", topologies=topologies)))


def test_tree_unit_keeps_the_way_to_its_nodes_only():
    (unit,) = units({"a": TopologySpec(TREE, ["n[1-2]"])})
    assert unit.switches == [("spine", "leaf1", ""), ("leaf1", "", "n[1-2]")]


def test_block_unit_cuts_blocks_down_to_its_nodes():
    (unit,) = units({"b": TopologySpec(BLOCK, ["n2,n3"])})
    assert unit.blocks == [("block1", "n2"), ("block2", "n3")]
    assert unit.block_sizes == [1, 2]


def test_units_without_nodes_in_the_graph_are_flat():
    tree, block, flat = units(
        {
            "a": TopologySpec(TREE, ["x1"]),
            "b": TopologySpec(BLOCK, ["x1"]),
            "c": TopologySpec(FLAT, cluster_default=True),
        }
    )
    assert (tree.flat, block.flat, flat.flat, flat.cluster_default) == (True, True, True, True)


def test_node_lists_are_bounded_together():
    half = f"n[1-{MAX_EXPANDED // 2 + 1}]"
    with pytest.raises(
        SlurmTopologyError, match=r'topology "b": nodes expansion failed: .* more than'
    ):
        units({"a": TopologySpec(TREE, [half]), "b": TopologySpec(TREE, [half])})


def test_topology_yaml_is_yaml_v3s_layout():
    text = topology_yaml(
        units(
            {
                "a": TopologySpec(TREE, ["n[1-2]"]),
                "b": TopologySpec(BLOCK, ["n3"]),
                "c": TopologySpec(FLAT, cluster_default=True),
            }
        )
    )
    assert text == (
        "- topology: a\n  cluster_default: false\n  tree:\n    switches:\n"
        "        - switch: spine\n          children: leaf1\n"
        "        - switch: leaf1\n          nodes: n[1-2]\n"
        "- topology: b\n  cluster_default: false\n  block:\n    block_sizes:\n        - 1\n"
        "    blocks:\n        - block: block1\n          nodes: n3\n"
        "- topology: c\n  cluster_default: true\n  flat: true\n"
    )
    assert yaml.safe_load(text)[0]["tree"]["switches"][1] == {"switch": "leaf1", "nodes": "n[1-2]"}


def test_topology_yaml_skeleton_and_empty():
    unit = TopologyUnit("t", switches=[("s", "", "n1")], blocks=[], block_sizes=[])
    assert topology_yaml([unit], skeleton=True) == (
        "- topology: t\n  cluster_default: false\n  tree:\n"
        "    switches:\n        - switch: s\n  block:\n"
        "    block_sizes: []\n    blocks: []\n"
    )
    assert topology_yaml([]) == "[]\n"
