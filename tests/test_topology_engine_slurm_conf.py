"""topology.conf text (engines/slurm/topology_conf.py), in-process: tree and block, with
and without node lists."""

from __future__ import annotations

from topology_graphs import node, racks, switch, two_leaves

from fabriclab.topology.engines.slurm import BLOCK, TREE, BlockName, SlurmConfig
from fabriclab.topology.engines.slurm.network import NetworkTopology
from fabriclab.topology.engines.slurm.topology_conf import block_conf, tree_conf
from fabriclab.topology.graph import DomainMap, Graph


def test_tree_conf_breadth_first_with_compact_lists():
    network = NetworkTopology(two_leaves(), SlurmConfig(TREE))
    assert tree_conf(network, skeleton=False) == (
        "SwitchName=spine Switches=leaf[1-2]\n"
        "SwitchName=leaf1 Nodes=n[1-2]\n"
        "SwitchName=leaf2 Nodes=n3\n"
    )
    assert tree_conf(network, skeleton=True) == "SwitchName=spine Switches=leaf[1-2]\n"


def test_tree_conf_names_a_named_switch_and_comments_its_id():
    graph = Graph(switch("", switch("S-1", node("i1", "n1"), name="leaf-a")))
    assert tree_conf(NetworkTopology(graph, SlurmConfig(TREE)), False) == (
        "# leaf-a=S-1\nSwitchName=leaf-a Nodes=n1\n"
    )


def test_block_conf_one_block_per_domain_and_inferred_sizes():
    network = NetworkTopology(two_leaves(), SlurmConfig(BLOCK))
    assert block_conf(network, skeleton=False) == (
        "# block001=nvl-a\nBlockName=block001 Nodes=n[1-2]\n"
        "# block002=nvl-b\nBlockName=block002 Nodes=n3\n"
        "BlockSizes=1,2\n"
    )
    assert block_conf(network, skeleton=True) == (
        "# block001=nvl-a\nBlockName=block001\n"
        "# block002=nvl-b\nBlockName=block002\nBlockSizes=1,2\n"
    )


def test_block_conf_renamed_by_block_name():
    domains = DomainMap()
    for host in ("r1-a", "r1-b", "r2-a"):
        domains.add_host(f"nvl-{host[:2]}", host, host)
    network = NetworkTopology(
        Graph(None, domains), SlurmConfig(BLOCK, [], BlockName("^r([0-9])", "rack${1}"))
    )
    assert block_conf(network, False) == (
        "# rack1=nvl-r1\nBlockName=rack1 Nodes=r1-a,r1-b\n"
        "# rack2=nvl-r2\nBlockName=rack2 Nodes=r2-a\nBlockSizes=1,2\n"
    )


def test_block_conf_complemented_into_racks():
    network = NetworkTopology(Graph(None, racks(6, 4)), SlurmConfig(BLOCK))
    assert block_conf(network, False) == (
        "# block001=rack0\nBlockName=block001 Nodes=n[1-4]\n"
        "# block002=rack1\nBlockName=block002 Nodes=n[5-6]\n"
        "BlockSizes=4,8\n"
    )
