"""topology/block in fabriclab's own reading (engines/slurm/block_order.py): blocks in
fabric-proximity order, so that Slurm's aggregates of consecutive blocks stay under the
fewest switches, and named after their NVLink domains; ``--compat topograph`` keeps
topograph's order and ids.  In-process."""

from __future__ import annotations

import re

import pytest
from block_aggregates import aggregates, needless_crossings, pods_of
from conftest import SPECS
from topology_graphs import node, switch

from fabriclab.formats import ibnetdiscover, nvidia_smi
from fabriclab.model.build import build
from fabriclab.model.cluster import find_port
from fabriclab.spec.load import load_spec
from fabriclab.topology import inputs as topology_inputs
from fabriclab.topology.engines import EngineOptions, run
from fabriclab.topology.engines.slurm.block_order import (
    domain_labels,
    host_stem,
    natural_key,
    proximity_order,
    unique_names,
)
from fabriclab.topology.engines.slurm.blocks import Block
from fabriclab.topology.providers import local_graph

PODS = str(SPECS / "nvl-pods.yaml")
_BLOCK = re.compile(r"^BlockName=(\S+) Nodes=(\S+)$")


def block_conf(spec, *, compat=False, names=False, inputs=None, **opts) -> str:
    if inputs is None:
        inputs = topology_inputs.from_cluster(build(load_spec(spec)))
    graph = local_graph(inputs, None, compat=compat, names=names)
    return run("slurm-block", graph, EngineOptions(gpus=inputs.gpus, **opts))


def parse(text: str) -> tuple[list[tuple[str, list[str]]], list[int], dict[str, str]]:
    """(block name, nodes) in order, BlockSizes, and the ``# name=domain`` comments."""
    blocks, sizes, comments = [], [], {}
    for line in text.splitlines():
        if line.startswith("# "):
            name, _, domain = line[2:].partition("=")
            comments[name] = domain
        elif line.startswith("BlockSizes="):
            sizes = [int(size) for size in line.split("=", 1)[1].split(",")]
        else:
            m = _BLOCK.match(line)
            assert m, line
            blocks.append((m.group(1), topology_inputs.hostlist.expand(m.group(2))))
    return blocks, sizes, comments


def test_gb200_su_blocks_are_its_racks_in_order_named_after_their_domains():
    cluster = build(load_spec("gb200-su"))
    blocks, sizes, comments = parse(block_conf("gb200-su"))
    assert [name for name, _ in blocks] == [f"nvl72-r{r:02d}" for r in range(1, 9)]
    assert [nodes for _, nodes in blocks] == [
        [f"gb-r{r:02d}-t{t:02d}" for t in range(1, 19)] for r in range(1, 9)
    ]
    assert sizes == [18, 36, 72, 144]
    # the comment says which NVLink partition (ClusterUUID.CliqueId) the block is
    assert comments == {d.name: f"{d.cluster_uuid}.{d.clique}" for d in cluster.domains}


def test_switch_names_do_not_change_the_blocks():
    assert block_conf("gb200-su", names=True) == block_conf("gb200-su")


def test_compat_keeps_topograph_order_and_ids():
    """topograph lists blocks in the breadth-first order of their first node (the
    leaves' order in its tree) and calls them block001 …"""
    inputs = topology_inputs.from_cluster(build(load_spec("gb200-su")))
    graph = local_graph(inputs, None, compat=True, names=False)
    tree = run("slurm-tree", graph, EngineOptions())
    leaves = [
        topology_inputs.hostlist.expand(line.split("Nodes=")[1])
        for line in tree.splitlines()
        if "Nodes=" in line
    ]
    blocks, _, comments = parse(block_conf("gb200-su", compat=True))
    assert all(re.fullmatch(r"block00[1-8]", name) for name, _ in blocks)
    assert [nodes for _, nodes in blocks] == leaves
    assert set(comments) == {name for name, _ in blocks}


def test_aggregates_never_cross_a_pod_when_they_need_not():
    """Three tiers, NVLink domains in three pods (3, 4 and 2 domains), named so that name
    order interleaves the pods: every aggregate Slurm forms stays in one pod wherever
    the pod's domain count allows it."""
    pods = pods_of(PODS)
    blocks, sizes, _ = parse(block_conf(PODS))
    nodes = [block for _, block in blocks]
    assert sizes == [4, 8, 16, 32]
    assert not needless_crossings(aggregates(nodes, sizes), nodes, pods)
    # each pod's blocks are together
    order = [pods[block[0]] for block in nodes]
    assert len([i for i in range(1, len(order)) if order[i] != order[i - 1]]) == 2
    # the check can fail: in name order aggregates cross pods
    by_name = [block for _, block in sorted(blocks, key=lambda b: b[0])]
    assert needless_crossings(aggregates(by_name, sizes), by_name, pods)


def _graph_blocks(groups: dict[str, dict[str, int]]) -> tuple:
    """A tree root > pod > leaf, one block of one node per unit of count, named
    ``<leaf>-<i>``."""
    pods, blocks = [], []
    for pod, leaves in groups.items():
        leaf_vertices = []
        for leaf, count in leaves.items():
            hosts = [f"{leaf}-{i}" for i in range(1, count + 1)]
            leaf_vertices.append(switch(leaf, *(node(f"i-{h}", h) for h in hosts)))
            blocks += [Block(f"b-{h}", f"d-{h}", [h]) for h in hosts]
        pods.append(switch(pod, *leaf_vertices))
    return switch("", switch("core", *pods)), blocks


def test_groups_with_the_larger_power_of_two_factor_come_first():
    """Pods of 6 and 4 blocks: 4 first keeps every run of 4 inside a pod (4 | 4 | 2),
    6 first would cut the second run across the pods."""
    root, blocks = _graph_blocks({"pa": {"la": 6}, "pb": {"lb": 4}})
    names = {block.id: block.nodes[0] for block in blocks}
    ordered = proximity_order(root, blocks, names)
    assert [block.nodes[0][:2] for block in ordered] == ["lb"] * 4 + ["la"] * 6


def test_blocks_of_a_leaf_then_of_a_pod_stay_together():
    root, blocks = _graph_blocks(
        {"p2": {"l21": 1, "l22": 1}, "p1": {"l11": 2, "l12": 1}, "p3": {"l31": 1}}
    )
    # a block over two leaves of p1 hangs at p1, beside its leaves' blocks
    blocks.append(Block("b-span", "d-span", ["l11-1x", "l12-1x"]))
    root.vertices["core"].vertices["p1"].vertices["l11"].vertices["x1"] = node("x1", "l11-1x")
    root.vertices["core"].vertices["p1"].vertices["l12"].vertices["x2"] = node("x2", "l12-1x")
    names = {block.id: block.nodes[0] for block in blocks}
    ordered = [block.nodes[0] for block in proximity_order(root, blocks, names)]
    assert ordered == ["l11-1", "l11-2", "l11-1x", "l12-1", "l21-1", "l22-1", "l31-1"]


def test_a_block_outside_the_tree_goes_last_among_equals():
    root, blocks = _graph_blocks({"p": {"l": 1}})
    blocks.append(Block("b-out", "d-out", ["elsewhere"]))
    names = {"b-l-1": "r2", "b-out": "r10"}
    assert [block.id for block in proximity_order(root, blocks, names)] == ["b-l-1", "b-out"]


def test_natural_order_compares_numbers_as_numbers():
    assert sorted(["r10", "r2", "r1"], key=natural_key) == ["r1", "r2", "r10"]


@pytest.mark.parametrize(
    "nodes,stem",
    [
        (["gb-r03-t01", "gb-r03-t18"], "gb-r03"),
        (["sched-worker1", "sched-worker2"], "sched-worker"),
        (["node01", "node04"], "node"),
        (["solo"], "solo"),
        (["a1", "b1"], ""),
        ([], ""),
    ],
)
def test_host_stem(nodes, stem):
    assert host_stem(nodes) == stem


def test_domain_labels_fall_back_to_the_domain_where_stems_coincide():
    blocks = [
        Block("b1", "u1.1", ["node01", "node04"]),
        Block("b2", "u2.1", ["node33", "node36"]),
        Block("b3", "u3.1", ["gb-r01-t01", "gb-r01-t02"]),
        Block("b4", "u4.1", ["x1", "x2"]),
    ]
    assert domain_labels(blocks, {"u4.1": "rack-x"}) == {
        "u1.1": "u1.1",
        "u2.1": "u2.1",
        "u3.1": "gb-r01",
        "u4.1": "rack-x",
    }


def test_unique_names_number_a_split_domain_and_fill_in_ids():
    assert unique_names(["a", "b", "a", "", "a.1"], ["i1", "i2", "i3", "i4", "i5"]) == [
        "a.2",
        "b",
        "a.3",
        "i4",
        "a.1",
    ]


def test_given_block_sizes_split_each_domain_in_place():
    blocks, sizes, _ = parse(block_conf("gb200-su", block_sizes=[9, 18]))
    assert sizes == [9, 18]
    assert [name for name, _ in blocks[:4]] == [
        "nvl72-r01.1",
        "nvl72-r01.2",
        "nvl72-r02.1",
        "nvl72-r02.2",
    ]
    assert blocks[1][1] == [f"gb-r01-t{t:02d}" for t in range(10, 19)]


def test_dumps_without_a_spec_name_blocks_after_their_hosts(tmp_path):
    cluster = build(load_spec("gb200-su"))
    start, _ = find_port(cluster, None)
    ib, smi = tmp_path / "ib.txt", tmp_path / "smi.txt"
    ib.write_text(ibnetdiscover.render(cluster.fabric, start))
    smi.write_text(nvidia_smi.render_pdsh(cluster.trays))
    inputs = topology_inputs.from_files([str(ib)], str(smi))
    blocks, _, _ = parse(block_conf(None, inputs=inputs))
    assert [name for name, _ in blocks] == [f"gb-r{r:02d}" for r in range(1, 9)]
    spec_blocks, _, _ = parse(block_conf("gb200-su"))
    assert [nodes for _, nodes in blocks] == [nodes for _, nodes in spec_blocks]
