"""A running fabric's topology is its spec's: 'fabriclab topology --name N' prints, byte
for byte, what 'fabriclab topology SPEC' prints of the spec the fabric serves, for every
engine (the same block names, after the spec's NVLink domains, in the same order), on
the lab, gb200-su and a three-tier fabric scaled with --trays; and a tray whose every
link is down is named in a warning (exit 1), never dropped silently."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fabric_server import fabric_up
from helpers import fl

ENGINES = ["slurm-tree", "slurm-block", "slurm-yaml", "k8s-labels"]
CUT_OFF = (
    "every InfiniBand link of the tray is down: the fabric's scan does not reach it; "
    "left out of the topology"
)

CASES = {
    # spec, --trays, the hostlist slurm-yaml's topologies cover, --sm
    "lab": ("lab", None, "sched-worker[1-2]", False),
    "gb200-su": ("gb200-su", None, "gb-r0[1-8]-t[01-18]", True),
    "three-tier-scaled": (
        str(Path(__file__).parent / "specs" / "pods-scaled.yaml"),
        22,
        "rk0[1-6]-n[1-4]",
        False,
    ),
}


def _topologies(path, nodes: str) -> str:
    path.write_text(
        f"gpu:\n  plugin: topology/block\n  nodes: ['{nodes}']\n"
        f"all:\n  plugin: topology/tree\n  nodes: ['{nodes}']\n  cluster_default: true\n"
    )
    return str(path)


@pytest.mark.parametrize("case", CASES)
def test_a_running_fabric_names_its_blocks_as_its_spec_does(case, request, tmp_path):
    spec, trays, nodes, sm = CASES[case]
    if sm:
        request.getfixturevalue("real_tools")
    scale = ["--trays", str(trays)] if trays else []
    topologies = _topologies(tmp_path / "topologies.yaml", nodes)
    with fabric_up(spec, tmp_path / "fabric", sm=sm, extra=scale) as f:
        for engine in ENGINES:
            for extra in ([], ["--compat", "topograph"], ["--names"]):
                args = ["-e", engine, "--topologies", topologies, *extra]
                offline = fl("topology", spec, *scale, *args)
                live = f.fabriclab("topology", "--name", f.name, *args)
                assert offline.returncode == 0, offline.stderr
                assert (live.returncode, live.stderr) == (0, ""), (engine, extra, live.stderr)
                assert live.stdout == offline.stdout, (engine, extra)
        live_blocks = f.ok("topology", "--name", f.name, "-e", "slurm-block")
    blocks = re.findall(r"^BlockName=(\S+) ", live_blocks, re.M)
    expected = {
        "lab": ["nvl8"],
        "gb200-su": [f"nvl72-r{n:02d}" for n in range(1, 9)],
        "three-tier-scaled": [f"nvl-rk{n:02d}" for n in range(1, 7)],
    }[case]
    assert sorted(blocks) == expected  # the spec's domains, not stems of the trays' names


def test_a_tray_with_every_link_down_is_named(tmp_path):
    """'fault down' of a tray takes every link of it down: the scan does not reach it,
    so it leaves the tree, its block and its labels, and the warning names it (exit 1);
    asked for by --nodes, it is listed under no-topology, and the warning says why."""
    with fabric_up("lab", tmp_path) as f:
        n = f.name
        f.ok("fault", "--name", n, "down", "sched-worker2")
        for engine in ENGINES[:2] + ENGINES[3:]:
            r = f.fabriclab("topology", "--name", n, "-e", engine)
            assert r.returncode == 1, r.stderr
            assert r.stderr == f"warning: sched-worker2: {CUT_OFF}\n"
            assert "sched-worker2" not in r.stdout and "sched-worker1" in r.stdout
        block = f.fabriclab("topology", "--name", n, "-e", "slurm-block").stdout
        assert "BlockName=nvl8 Nodes=sched-worker1\n" in block  # the spec's name, still
        r = f.fabriclab("topology", "--name", n, "--nodes", "sched-worker[1-2]")
        assert r.returncode == 1
        assert "SwitchName=no-topology Nodes=sched-worker2\n" in r.stdout
        assert r.stderr.splitlines()[0] == (
            "warning: sched-worker2: every InfiniBand link of the tray is down: the "
            "fabric's scan does not reach it"
        )
        # not asked for: not said
        r = f.fabriclab("topology", "--name", n, "--nodes", "sched-worker1")
        assert (r.returncode, r.stderr) == (0, "")
        f.ok("fault", "--name", n, "clear")
        r = f.fabriclab("topology", "--name", n, "-e", "slurm-tree")
        assert (r.returncode, r.stderr) == (0, "")
        assert r.stdout == fl("topology", "lab", "-e", "slurm-tree").stdout
