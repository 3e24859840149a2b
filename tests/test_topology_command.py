"""``fabriclab topology`` on what a real cluster shows: ibnetdiscover dumps and nvidia-smi
answers (read like a spec's, reported where they fall short), the scheduler's --nodes,
and one-line errors for bad options."""

from __future__ import annotations

import os
from functools import partial

import helpers
import pytest

from fabriclab.formats import ibnetdiscover, nvidia_smi
from fabriclab.model.build import build
from fabriclab.model.cluster import find_port
from fabriclab.spec.load import load_spec

UUID = "7f3c2a10-5b4e-4d6a-9c1e-2b8f0e6d4a91"


fl = partial(helpers.fl, env={**os.environ, "COLUMNS": "200"})  # its tables whole


def test_nvidia_smi_views():
    r = fl(
        "render",
        "lab",
        "nvidia-smi",
        "--from",
        "sched-worker1",
        "--",
        "--query-gpu=fabric.clusterUuid,fabric.cliqueId",
        "--format=csv,noheader",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"{UUID}, 1\n" * 4
    q = fl("render", "lab", "nvidia-smi", "--from", "sched-worker2", "--", "-q").stdout
    assert (
        q.count("    Fabric\n") == 4
        and f"        ClusterUUID                       : {UUID}\n" in q
    )
    assert "        CliqueId                          : 1\n" in q
    h = fl(
        "render", "h100-su", "nvidia-smi", "--", "--query-gpu=index,fabric.cliqueId", "--format=csv"
    ).stdout
    assert h.splitlines()[0] == "index, fabric.cliqueId" and h.splitlines()[8] == "7, 0"
    bad = fl("render", "lab", "nvidia-smi", "--", "--query-gpu=power.draw", "--format=csv")
    assert bad.returncode == 2 and "field 'power.draw' is not modelled" in bad.stderr


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
        from_spec = fl("topology", "lab", "-e", engine).stdout
        if engine == "slurm-block":  # dumps do not know the spec's domain name: host stem
            from_spec = from_spec.replace("nvl8", "sched-worker")
        assert r.stdout == from_spec


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
    bad.write_text(
        "\n".join(
            [
                ln.replace(f"{UUID}, 1", "N/A, N/A") if ln.startswith("sched-worker2") else ln
                for ln in lines
                if not ln.startswith("sched-worker1")
            ]
            + ["garbage"]
        )
        + "\n"
    )
    r = fl(
        "topology",
        "--ibnetdiscover",
        str(ib),
        "--nvidia-smi",
        str(bad),
        "-e",
        "slurm-block",
        "--nodes",
        "sched-worker[1-2]",
    )
    assert r.returncode == 2 and "block topology contains no accelerator domains" in r.stderr
    assert f"warning: {bad}:1: sched-worker2 GPU 0: ClusterUUID N/A, CliqueId N/A" in r.stderr
    assert f"warning: sched-worker1: no nvidia-smi answer in {bad}" in r.stderr
    assert f"warning: {bad}:5: not a 'host: <uuid>, <clique>' line: 'garbage'" in r.stderr
    t = fl("topology", "--ibnetdiscover", str(ib), "--nvidia-smi", str(bad), "-e", "slurm-tree")
    assert t.returncode == 1 and "Nodes=sched-worker[1-2]" in t.stdout


def test_unknown_nodes_go_under_no_topology(lab_files):
    ib, smi = lab_files
    r = fl(
        "topology",
        "--ibnetdiscover",
        str(ib),
        "--nvidia-smi",
        str(smi),
        "--nodes",
        "sched-worker[1-3]",
    )
    assert r.returncode == 1
    assert "warning: sched-worker3: not in the fabric" in r.stderr
    assert "SwitchName=no-topology Nodes=sched-worker3" in r.stdout.splitlines()


@pytest.mark.parametrize(
    "args,msg",
    [
        (["topology"], "give a SPEC, or --ibnetdiscover FILE"),
        (["topology", "lab", "--compat", "slurm"], "the one compatibility mode is 'topograph'"),
        (["topology", "lab", "-e", "slurm-block", "--block-sizes", "3,5"], "power-of-two multiple"),
        (
            ["topology", "lab", "-e", "slurm-block", "--block-name", "(unclosed=x"],
            "invalid blockName.nodeNameRegexp",
        ),
        (["topology", "lab", "--nodes", "x[1-"], "error: --nodes:"),
        (["topology", "lab", "-e", "slurm-yaml"], "slurm-yaml needs --topologies"),
        (["topology", "--ibnetdiscover", "/nonexistent"], "error: /nonexistent: cannot read"),
    ],
)
def test_topology_usage_errors(args, msg):
    r = fl(*args)
    assert r.returncode == 2 and msg in r.stderr and "Traceback" not in r.stderr


def test_slurm_yaml_from_partitions_file(tmp_path):
    t = tmp_path / "topologies.yaml"
    t.write_text(
        "gpu:\n  plugin: topology/block\n  nodes: ['gb-r0[1-2]-t[01-18]']\n"
        "all:\n  plugin: topology/tree\n  nodes: ['gb-r0[1-8]-t[01-18]']\n  cluster_default: true\n"
    )
    r = fl("topology", "gb200-su", "-e", "slurm-yaml", "--topologies", str(t))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("- topology: all\n  cluster_default: true\n  tree:\n    switches:\n")
    assert (
        "- topology: gpu\n  cluster_default: false\n  block:\n    block_sizes:\n        - 18\n        - 36\n"
        in r.stdout
    )
