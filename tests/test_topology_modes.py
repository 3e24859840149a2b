"""fabriclab's topology: the same as topograph where topograph is right, better where
it is not (each difference below), and clear about bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import SPECS
from fabriclab.formats import ibnetdiscover, nvidia_smi
from fabriclab.model.build import build
from fabriclab.model.cluster import find_port
from fabriclab.spec.load import load_spec, parse_spec_text
from fabriclab.topology import inputs as topology_inputs
from fabriclab.topology.engines import EngineOptions, run
from fabriclab.topology.engines.slurm import SlurmTopologyError
from fabriclab.topology.providers import local_graph
from fabriclab.topology.providers.infiniband import ProviderError

UUID = "7f3c2a10-5b4e-4d6a-9c1e-2b8f0e6d4a91"


def fl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fabriclab.cli", *args], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "200"}, timeout=120)


def topo(spec, engine="slurm-tree", *, compat=False, names=False, nodes=None):
    inputs = topology_inputs.from_cluster(build(spec if not isinstance(spec, str) else load_spec(spec)))
    graph = local_graph(inputs, nodes, compat=compat, names=names)
    return run(engine, graph, EngineOptions(gpus=inputs.gpus)), inputs.report


# (block topologies only where there are multi-node NVLink domains: see
# test_no_block_for_gpus_outside_nvlink_domains)
SAME = [(s, "slurm-tree") for s in ("lab", "gb200-su", "h100-su", str(SPECS / "three-tier-hdr.yaml"))] + \
       [("lab", "slurm-block"), ("gb200-su", "slurm-block"), ("lab", "k8s-labels"), ("gb200-su", "k8s-labels")]


@pytest.mark.parametrize("spec,engine", SAME)
def test_same_as_topograph_where_topograph_is_right(spec, engine):
    """Default mode reads the fabric model, compat mode reads the rendered ibnetdiscover
    text through topograph's own rules: on every well-formed fabric they agree."""
    ours, report = topo(spec, engine)
    theirs, _ = topo(spec, engine, compat=True)
    assert ours == theirs
    assert not report.left_out


def test_same_as_topograph_three_tiers_at_scale():
    spec = load_spec("gb200-su", trays=3000)
    assert topo(spec)[0] == topo(spec, compat=True)[0]


def test_lab_labels_as_in_the_seed():
    text, _ = topo("lab", "k8s-labels")
    labels = json.loads(text)
    assert labels["sched-worker2"] == {"accelerator.topograph.run/domain": f"{UUID}.1",
                                       "fabric.topograph.run/tier-0": "S-2c5eab036832a42e",
                                       "fabric.topograph.run/tier-1": "S-2c5eab0306555424"}


def test_difference_skewed_rails_still_give_a_tree():
    spec = str(SPECS / "skewed-rails.yaml")
    with pytest.raises(SlurmTopologyError, match="reachable more than once; topology must be a tree"):
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
    assert any("MT4129 ConnectX7   Mellanox Technologies" in m and "MF0;leaf-b:MQM8700/U1 port 5" in m
               and m.startswith("CA 0xe09d7303") for m in msgs), msgs
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
    assert text == "SwitchName=LAB-IBSPINE-01 Switches=LAB-IBLEAF-01\nSwitchName=LAB-IBLEAF-01 Nodes=sched-worker[1-2]\n"


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
    assert nvidia_smi.render_query(c.tray("sched-worker2"), nvidia_smi.TOPOGRAPH_QUERY.split()) == f"{UUID}, 7\n" * 4
    assert nvidia_smi.render_query(c.tray("sched-worker1"), nvidia_smi.TOPOGRAPH_QUERY.split()) == f"{UUID}, 1\n" * 4
    block, _ = topo(spec, "slurm-block")
    assert block == (f"# block001={UUID}.1\nBlockName=block001 Nodes=sched-worker1\n"
                     f"# block002={UUID}.7\nBlockName=block002 Nodes=sched-worker2\nBlockSizes=1,2\n")
    labels = json.loads(topo(spec, "k8s-labels")[0])
    assert labels["sched-worker2"]["accelerator.topograph.run/domain"] == f"{UUID}.7"
    assert labels["sched-worker1"]["accelerator.topograph.run/domain"] == f"{UUID}.1"


def test_difference_split_tray_reported_per_gpu():
    spec = parse_spec_text(LAB_PARTITIONED % "sched-worker2:0-1", "t")
    with pytest.raises(ProviderError, match=r'node "sched-worker2": ambiguous NVL partition IDs: '
                                            rf"{UUID}\.1, {UUID}\.7"):
        topo(spec, "slurm-block", compat=True)
    block, report = topo(spec, "slurm-block")
    assert block == f"# block001={UUID}.1\nBlockName=block001 Nodes=sched-worker1\nBlockSizes=1\n"
    (problem,) = [p for p in report.problems if p.where == "sched-worker2"]
    assert problem.what == (f"GPUs disagree on the NVLink partition (GPU 0 {UUID}.7; GPU 1 {UUID}.7; "
                            f"GPU 2 {UUID}.1; GPU 3 {UUID}.1); left out of the domains")
    assert report.left_out


def test_no_block_for_gpus_outside_nvlink_domains():
    """DGX H100 GPUs report the all-zero cluster UUID: topograph makes one block of
    every node ("00000000-….0"); fabriclab knows there is no multi-node NVLink domain."""
    theirs, _ = topo("h100-su", "slurm-block", compat=True)
    assert theirs.startswith("# block001=00000000-0000-0000-0000-000000000000.0\n")
    with pytest.raises(Exception, match="block topology contains no accelerator domains"):
        topo("h100-su", "slurm-block")


def test_nvidia_smi_views():
    r = fl("render", "lab", "nvidia-smi", "--from", "sched-worker1", "--",
           "--query-gpu=fabric.clusterUuid,fabric.cliqueId", "--format=csv,noheader")
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"{UUID}, 1\n" * 4
    q = fl("render", "lab", "nvidia-smi", "--from", "sched-worker2", "--", "-q").stdout
    assert q.count("    Fabric\n") == 4 and f"        ClusterUUID                       : {UUID}\n" in q
    assert "        CliqueId                          : 1\n" in q
    h = fl("render", "h100-su", "nvidia-smi", "--", "--query-gpu=index,fabric.cliqueId", "--format=csv").stdout
    assert h.splitlines()[0] == "index, fabric.cliqueId" and h.splitlines()[8] == "7, 0"
    bad = fl("render", "lab", "nvidia-smi", "--", "--query-gpu=power.draw", "--format=csv")
    assert bad.returncode == 2 and "field 'power.draw' is not modelled" in bad.stderr


# --- real-cluster inputs and bad input ----------------------------------------------------


@pytest.fixture()
def lab_files(tmp_path):
    c = build(load_spec("lab"))
    start, _ = find_port(c, None)
    ib = tmp_path / "ibnetdiscover.txt"
    ib.write_text(ibnetdiscover.render(c.fabric, start))
    smi = tmp_path / "smi.txt"
    smi.write_text(nvidia_smi.render_pdsh(c.trays))
    return ib, smi


def test_from_files_equals_from_spec(lab_files):
    ib, smi = lab_files
    for engine in ("slurm-tree", "slurm-block", "k8s-labels"):
        r = fl("topology", "--ibnetdiscover", str(ib), "--nvidia-smi", str(smi), "-e", engine)
        assert r.returncode == 0, r.stderr
        assert r.stdout == fl("topology", "lab", "-e", engine).stdout


def test_truncated_dump_is_reported_and_used(lab_files, tmp_path):
    ib, smi = lab_files
    text = ib.read_text()
    cut = tmp_path / "cut.txt"
    cut.write_text(text[: text.index("Ca\t1")] + "[1](e09d7303b4f1ab")
    r = fl("topology", "--ibnetdiscover", str(cut), "--nvidia-smi", str(smi))
    assert r.returncode == 1  # produced, with something left out
    assert f"warning: {cut}:" in r.stderr and "Traceback" not in r.stderr
    assert "Nodes=sched-worker[1-2]" in r.stdout


def test_nvidia_smi_na_and_missing_host(lab_files, tmp_path):
    ib, smi = lab_files
    lines = smi.read_text().splitlines()
    bad = tmp_path / "smi-bad.txt"
    bad.write_text("\n".join([l.replace(f"{UUID}, 1", "N/A, N/A") if l.startswith("sched-worker2") else l
                              for l in lines if not l.startswith("sched-worker1")] + ["garbage"]) + "\n")
    r = fl("topology", "--ibnetdiscover", str(ib), "--nvidia-smi", str(bad), "-e", "slurm-block",
           "--nodes", "sched-worker[1-2]")
    assert r.returncode == 2 and "block topology contains no accelerator domains" in r.stderr
    assert f"warning: {bad}:1: sched-worker2 GPU 0: ClusterUUID N/A, CliqueId N/A" in r.stderr
    assert f"warning: sched-worker1: no nvidia-smi answer in {bad}" in r.stderr
    assert f"warning: {bad}:5: not a 'host: <uuid>, <clique>' line: 'garbage'" in r.stderr
    t = fl("topology", "--ibnetdiscover", str(ib), "--nvidia-smi", str(bad), "-e", "slurm-tree")
    assert t.returncode == 1 and "Nodes=sched-worker[1-2]" in t.stdout


def test_unknown_nodes_go_under_no_topology(lab_files):
    ib, smi = lab_files
    r = fl("topology", "--ibnetdiscover", str(ib), "--nvidia-smi", str(smi), "--nodes", "sched-worker[1-3]")
    assert r.returncode == 1
    assert "warning: sched-worker3: not in the fabric" in r.stderr
    assert "SwitchName=no-topology Nodes=sched-worker3" in r.stdout.splitlines()


@pytest.mark.parametrize("args,msg", [
    (["topology"], "give a SPEC, or --ibnetdiscover FILE"),
    (["topology", "lab", "--compat", "slurm"], "the one compatibility mode is 'topograph'"),
    (["topology", "lab", "-e", "slurm-block", "--block-sizes", "3,5"], "power-of-two multiple"),
    (["topology", "lab", "-e", "slurm-block", "--block-name", "(unclosed=x"], "invalid blockName.nodeNameRegexp"),
    (["topology", "lab", "--nodes", "x[1-"], "error: --nodes:"),
    (["topology", "lab", "-e", "slurm-yaml"], "slurm-yaml needs --topologies"),
    (["topology", "--ibnetdiscover", "/nonexistent"], "error: /nonexistent: cannot read"),
])
def test_topology_usage_errors(args, msg):
    r = fl(*args)
    assert r.returncode == 2 and msg in r.stderr and "Traceback" not in r.stderr


def test_slurm_yaml_from_partitions_file(tmp_path):
    t = tmp_path / "topologies.yaml"
    t.write_text("gpu:\n  plugin: topology/block\n  nodes: ['gb-r0[1-2]-t[01-18]']\n"
                 "all:\n  plugin: topology/tree\n  nodes: ['gb-r0[1-8]-t[01-18]']\n  cluster_default: true\n")
    r = fl("topology", "gb200-su", "-e", "slurm-yaml", "--topologies", str(t))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("- topology: all\n  cluster_default: true\n  tree:\n    switches:\n")
    assert "- topology: gpu\n  cluster_default: false\n  block:\n    block_sizes:\n        - 18\n        - 36\n" in r.stdout
