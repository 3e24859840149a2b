"""The Slurm engine's options checked against a graph (engines/slurm/config.py) and the
graph indexed for the writers (engines/slurm/network.py), in-process."""

from __future__ import annotations

import pytest
from topology_graphs import node, switch, two_leaves

from fabriclab.topology.engines.slurm import (
    BLOCK,
    FLAT,
    TREE,
    BlockName,
    SlurmConfig,
    SlurmTopologyError,
    TopologySpec,
)
from fabriclab.topology.engines.slurm.network import NetworkTopology
from fabriclab.topology.graph import DomainMap, Graph


@pytest.mark.parametrize(
    "config,graph,message",
    [
        (SlurmConfig(TREE), Graph(None, None), "missing tree topology"),
        (SlurmConfig(BLOCK), Graph(two_leaves().tiers, None), "missing block topology"),
        (
            SlurmConfig(BLOCK),
            Graph(two_leaves().tiers, DomainMap()),
            "block topology contains no accelerator domains",
        ),
        (
            SlurmConfig("topology/torus"),
            two_leaves(),
            'unsupported topology plugin "topology/torus"',
        ),
        (
            SlurmConfig(TREE, block_name=BlockName("x", "y")),
            two_leaves(),
            "blockName is only supported with plugin",
        ),
        (
            SlurmConfig(BLOCK, topologies={"t": TopologySpec(FLAT)}),
            two_leaves(),
            "plugin and topologies parameters are mutually exclusive",
        ),
        (
            SlurmConfig("", topologies={"t": TopologySpec(TREE)}),
            two_leaves(),
            'topology "t" specifies no nodes',
        ),
        (
            SlurmConfig("", topologies={"t": TopologySpec(BLOCK, ["n1"])}),
            two_leaves(domains=False),
            'missing block topology for topology "t"',
        ),
    ],
)
def test_validate_refuses_with_topographs_message(config, graph, message):
    with pytest.raises(SlurmTopologyError, match=message):
        config.validate(graph)


def test_validate_accepts_flat_topologies_without_nodes():
    SlurmConfig("", topologies={"t": TopologySpec(FLAT)}).validate(Graph(None, None))


def test_network_indexes_the_tree_breadth_first_with_sorted_children():
    network = NetworkTopology(two_leaves(), SlurmConfig(TREE))
    assert network.tree[""] == ["spine"]
    assert network.tree["spine"] == ["leaf1", "leaf2"]
    assert network.node_info["n3"].instance_id == "i3"


def test_network_orders_blocks_by_their_first_node_in_the_tree():
    network = NetworkTopology(two_leaves(), SlurmConfig(BLOCK))
    assert [(block.id, block.name, block.position) for block in network.blocks] == [
        ("block001", "nvl-a", 0),
        ("block002", "nvl-b", 1),
    ]
    assert network.node_info["n3"].block_position == 1


@pytest.mark.parametrize(
    "tree,message",
    [
        (
            switch("", switch("a", node("i1", "n1")), switch("b", node("i1", "n1"))),
            'vertex "i1" is reachable more than once',
        ),
        (switch("", switch("a", switch("a"))), 'vertex "a" contains a self-edge'),
    ],
)
def test_network_refuses_a_graph_that_is_not_a_tree(tree, message):
    with pytest.raises(SlurmTopologyError, match=message):
        NetworkTopology(Graph(tree), SlurmConfig(TREE))
