"""fabriclab's reading of a fabric (the default mode) beside topograph's (``--compat
topograph``): the same where topograph is right, better where it is not (each difference
below)."""

from __future__ import annotations

import json
import textwrap

import pytest
from conftest import SPECS

from fabriclab.formats import nvidia_smi
from fabriclab.model.build import build
from fabriclab.spec.load import load_spec, parse_spec_text
from fabriclab.topology import inputs as topology_inputs
from fabriclab.topology.engines import EngineOptions, run
from fabriclab.topology.engines.slurm import SlurmTopologyError
from fabriclab.topology.providers import local_graph
from fabriclab.topology.providers.infiniband import ProviderError

UUID = "7f3c2a10-5b4e-4d6a-9c1e-2b8f0e6d4a91"


def topo(spec, engine="slurm-tree", *, compat=False, names=False, nodes=None):
    inputs = topology_inputs.from_cluster(
        build(spec if not isinstance(spec, str) else load_spec(spec))
    )
    graph = local_graph(inputs, nodes, compat=compat, names=names)
    return run(engine, graph, EngineOptions(gpus=inputs.gpus)), inputs.report


# (block topologies only where there are multi-node NVLink domains: see
# test_no_block_for_gpus_outside_nvlink_domains)
SAME = [
    (s, "slurm-tree") for s in ("lab", "gb200-su", "h100-su", str(SPECS / "three-tier-hdr.yaml"))
] + [
    ("lab", "k8s-labels"),
    ("gb200-su", "k8s-labels"),
]


@pytest.mark.parametrize("spec,engine", SAME)
def test_same_as_topograph_where_topograph_is_right(spec, engine):
    """Default mode reads the fabric model, compat mode reads the rendered ibnetdiscover
    text through topograph's own rules: on every well-formed fabric they agree."""
    ours, report = topo(spec, engine)
    theirs, _ = topo(spec, engine, compat=True)
    assert ours == theirs
    assert not report.left_out


@pytest.mark.parametrize("spec", ["lab", "gb200-su"])
def test_same_blocks_as_topograph_in_proximity_order(spec):
    """topology/block: the same blocks and BlockSizes as topograph; only the order (fabric
    proximity, test_topology_block_order) and the names (the NVLink domains') differ."""

    def blocks(text):
        lines = [line for line in text.splitlines() if not line.startswith("#")]
        return {line.split("Nodes=")[1] for line in lines[:-1]}, lines[-1]

    ours, report = topo(spec, "slurm-block")
    theirs, _ = topo(spec, "slurm-block", compat=True)
    assert blocks(ours) == blocks(theirs)
    assert ours != theirs
    assert not report.left_out


def test_same_as_topograph_three_tiers_at_scale():
    spec = load_spec("gb200-su", trays=3000)
    assert topo(spec)[0] == topo(spec, compat=True)[0]


def test_lab_labels_as_in_the_seed():
    text, _ = topo("lab", "k8s-labels")
    labels = json.loads(text)
    assert labels["sched-worker2"] == {
        "accelerator.topograph.run/domain": f"{UUID}.1",
        "fabric.topograph.run/tier-0": "S-2c5eab036832a42e",
        "fabric.topograph.run/tier-1": "S-2c5eab0306555424",
    }


def test_difference_skewed_rails_still_give_a_tree():
    spec = str(SPECS / "skewed-rails.yaml")
    with pytest.raises(
        SlurmTopologyError, match="reachable more than once; topology must be a tree"
    ):
        topo(spec, compat=True)
    text, report = topo(spec, names=True)
    lines = text.splitlines()
    assert lines[0].startswith("SwitchName=spine Switches=")
    groups = lines[0].split("Switches=")[1].split(",")
    assert len(groups) == 4 and len(set(groups)) == 4  # one switch group per node
    placed = sorted(line.split("Nodes=")[1] for line in lines[1:])
    assert placed == ["h1", "h2", "h3", "h4"]  # each node under exactly one group: a tree
    assert all(g.split("-")[0] in ("r0", "r1") for g in groups)
    assert not report.left_out


def test_difference_factory_described_hca_is_reported():
    spec = str(SPECS / "quirks.yaml")
    _, report = topo(spec)
    msgs = [str(p) for p in report.problems]
    assert any(
        "MT4129 ConnectX7   Mellanox Technologies" in m
        and "MF0;leaf-b:MQM8700/U1 port 5" in m
        and m.startswith("CA 0xe09d7303")
        for m in msgs
    ), msgs
    assert report.left_out
    # topograph drops it without a word and fails on q1..q3 (on two leaves, unlike q4)
    with pytest.raises(Exception, match="topology must be a tree"):
        topo(spec, compat=True)


def test_difference_no_phantom_tier():
    nodes = [f"gb-r01-t{i:02d}" for i in range(1, 19)]
    theirs, _ = topo("gb200-su", compat=True, nodes=nodes)
    ours, _ = topo("gb200-su", nodes=nodes)
    # topograph: rack 2's leaf (no requested node) climbs above the spines
    assert len(theirs.splitlines()) == 3 and theirs.splitlines()[0].startswith("SwitchName=S-")
    assert theirs.splitlines()[0].split()[1] != ours.splitlines()[0].split()[1]
    ours_lines = ours.splitlines()
    assert len(ours_lines) == 2
    assert ours_lines[1].endswith("Nodes=gb-r01-t[01-18]")
    assert ours_lines[0].split("Switches=")[1] == ours_lines[1].split()[0].split("=")[1]


def test_difference_names():
    text, _ = topo("lab", names=True)
    assert (
        text
        == "SwitchName=LAB-IBSPINE-01 Switches=LAB-IBLEAF-01\nSwitchName=LAB-IBLEAF-01 Nodes=sched-worker[1-2]\n"
    )


LAB_PARTITIONED = textwrap.dedent(f"""
    name: lab-p
    trays:
      - hosts: sched-worker[1-2]
    nvlink:
      domains:
        - name: nvl8
          trays: sched-worker[1-2]
          cluster_uuid: {UUID}
          clique: 1
          partitions: [{{id: 7, gpus: "%s"}}]
    fabric:
      fat_tree:
        tiers: 2
        rail_optimized: false
        hosts_per_leaf: 2
        leaf_uplinks: 4
        spines: 1
        names:
          leaf: "LAB-IBLEAF-{{n:02d}}"
          spine: "LAB-IBSPINE-{{n:02d}}"
    lids: {{switch_base: 1, ca_base: 100}}
""")


def test_partition_changes_clique_block_and_label():
    """The seed lab's move of tray 2 into partition 7."""
    spec = parse_spec_text(LAB_PARTITIONED % "sched-worker2", "t")
    c = build(spec)
    assert (
        nvidia_smi.render_query(c.tray("sched-worker2"), nvidia_smi.TOPOGRAPH_QUERY.split())
        == f"{UUID}, 7\n" * 4
    )
    assert (
        nvidia_smi.render_query(c.tray("sched-worker1"), nvidia_smi.TOPOGRAPH_QUERY.split())
        == f"{UUID}, 1\n" * 4
    )
    block, _ = topo(spec, "slurm-block")
    assert block == (
        f"# nvl8={UUID}.1\nBlockName=nvl8 Nodes=sched-worker1\n"
        f"# nvl8-p7={UUID}.7\nBlockName=nvl8-p7 Nodes=sched-worker2\nBlockSizes=1,2\n"
    )
    labels = json.loads(topo(spec, "k8s-labels")[0])
    assert labels["sched-worker2"]["accelerator.topograph.run/domain"] == f"{UUID}.7"
    assert labels["sched-worker1"]["accelerator.topograph.run/domain"] == f"{UUID}.1"


def test_difference_split_tray_reported_per_gpu():
    spec = parse_spec_text(LAB_PARTITIONED % "sched-worker2:0-1", "t")
    with pytest.raises(
        ProviderError,
        match=r'node "sched-worker2": ambiguous NVL partition IDs: '
        rf"{UUID}\.1, {UUID}\.7",
    ):
        topo(spec, "slurm-block", compat=True)
    block, report = topo(spec, "slurm-block")
    assert block == f"# nvl8={UUID}.1\nBlockName=nvl8 Nodes=sched-worker1\nBlockSizes=1\n"
    (problem,) = [p for p in report.problems if p.where == "sched-worker2"]
    assert problem.what == (
        f"GPUs disagree on the NVLink partition (GPU 0 {UUID}.7; GPU 1 {UUID}.7; "
        f"GPU 2 {UUID}.1; GPU 3 {UUID}.1); left out of the domains"
    )
    assert report.left_out


def test_no_block_for_gpus_outside_nvlink_domains():
    """DGX H100 GPUs report the all-zero cluster UUID: topograph makes one block of
    every node ("00000000-….0"); fabriclab knows there is no multi-node NVLink domain."""
    theirs, _ = topo("h100-su", "slurm-block", compat=True)
    assert theirs.startswith("# block001=00000000-0000-0000-0000-000000000000.0\n")
    with pytest.raises(Exception, match="block topology contains no accelerator domains"):
        topo("h100-su", "slurm-block")
