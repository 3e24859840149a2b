"""The running fabric as its trays see it now: 'fabriclab topology --name N' reads the
server's current state (links down, NVLink faults) and agrees with the real
ibnetdiscover run at the same moment; an NVLink fault injected with 'fabriclab fault
nvlink' shows in the tray's nvidia-smi (-q and the --query-gpu form topograph uses) and
moves the tray out of its Slurm block; clearing it brings all of that back."""

from __future__ import annotations

import json
import re

from fabric_server import fabric_up

from fabriclab.formats import nvidia_smi
from fabriclab.model.build import build
from fabriclab.spec.load import load_spec

QUERY = [
    "--query-gpu=fabric.state,fabric.status,fabric.clusterUuid,fabric.cliqueId",
    "--format=csv,noheader",
]


def _blocks(text: str) -> dict[str, str]:
    return dict(re.findall(r"^BlockName=(\S+) Nodes=(\S+)$", text, re.M))


def test_nvlink_fault_on_the_running_fabric(real_tools, tmp_path):
    with fabric_up("lab", tmp_path) as f:
        n = f.name
        healthy = f.ok("nvidia-smi", "--name", n, "sched-worker2", "--", *QUERY)
        assert healthy == "Completed, Success, 7f3c2a10-5b4e-4d6a-9c1e-2b8f0e6d4a91, 1\n" * 4
        assert _blocks(f.ok("topology", "--name", n, "-e", "slurm-block")) == {
            "nvl8": "sched-worker[1-2]"
        }

        out = f.ok("fault", "--name", n, "nvlink", "sched-worker2", "--gpus", "0,1")
        assert out.strip() == "fault 1: nvlink sched-worker2 gpus=[0, 1]"
        # what the model shows for the same fault, by the formats' own renderers
        model = build(load_spec("lab"))
        model.nvlink_fault("sched-worker2", [0, 1])
        tray = model.tray("sched-worker2")
        q = f.ok("nvidia-smi", "--name", n, "sched-worker2", "--", *QUERY)
        assert q == nvidia_smi.render_query(tray, QUERY)
        assert (
            q.splitlines()[:2]
            == ["Completed, Insufficient Resources, 00000000-0000-0000-0000-000000000000, 0"] * 2
        )
        assert q.splitlines()[2:] == healthy.splitlines()[2:]
        full = f.ok("nvidia-smi", "--name", n, "sched-worker2", "--", "-q")
        assert full == nvidia_smi.render_q_fabric(tray)
        assert full.count("Bandwidth                     : Degraded") == 2
        # the tray's shims and 'exec' answer the same
        assert f.ok("exec", "--name", n, "sched-worker2", "--", "nvidia-smi", "-q") == full
        f.ok("shims", "--name", n, "sched-worker2", str(tmp_path / "bin"))
        import subprocess

        shim = subprocess.run(
            [str(tmp_path / "bin" / "nvidia-smi"), *QUERY],
            capture_output=True,
            text=True,
            env=f.env,
            timeout=60,
        )
        assert shim.returncode == 0 and shim.stdout == q, shim.stderr
        # the Slurm block feed: the tray leaves its block (its GPUs disagree)
        r = f.fabriclab("topology", "--name", n, "-e", "slurm-block")
        assert r.returncode == 1 and "sched-worker2: GPUs disagree" in r.stderr, r.stderr
        assert _blocks(r.stdout) == {"nvl8": "sched-worker1"}  # the spec's name, still
        events = [
            json.loads(line)
            for line in f.ok("events", "--name", n, "--json").splitlines()
            if "NVLink" in line
        ]
        assert [e["name"] for e in events] == ["NVLink fault"]
        assert events[0]["object_name"] == "sched-worker2"
        # a second fault on the same GPUs stacks (its own id); a bad GPU is named
        out = f.ok("fault", "--name", n, "nvlink", "sched-worker2", "--gpus", "1")
        assert out.strip() == "fault 2: nvlink sched-worker2 gpus=[1]"
        r = f.fabriclab("fault", "--name", n, "nvlink", "sched-worker2", "--gpus", "4")
        assert r.stderr.strip() == "error: --gpus: no GPU 4 on sched-worker2 (it has GPUs 0-3)"

        assert f.ok("fault", "--name", n, "clear", "1").strip() == "cleared 1 fault(s) 1"
        assert f.ok("nvidia-smi", "--name", n, "sched-worker2", "--", *QUERY) != healthy
        assert f.ok("fault", "--name", n, "clear", "2").strip() == "cleared 1 fault(s) 2"
        assert f.ok("nvidia-smi", "--name", n, "sched-worker2", "--", *QUERY) == healthy
        assert _blocks(f.ok("topology", "--name", n, "-e", "slurm-block")) == {
            "nvl8": "sched-worker[1-2]"
        }
        names = [json.loads(x)["name"] for x in f.ok("events", "--name", n, "--json").splitlines()]
        assert names[-1] == "NVLink fault cleared"


def test_topology_of_the_running_fabric_follows_a_downed_leaf(real_tools, tmp_path):
    """Every leaf port facing sched-worker2 taken down: 'fabriclab topology --name N'
    no longer lists the tray under the leaf, says so (the tray named, exit 1), and
    otherwise says exactly what 'fabriclab topology' fed the real ibnetdiscover's output
    of the same moment says."""
    with fabric_up("lab", tmp_path, sm=True) as f:
        n = f.name
        tree = f.ok("topology", "--name", n, "-e", "slurm-tree")
        leaf = f.cluster.fabric.find("LAB-IBLEAF-01")
        assert f"SwitchName=S-{leaf.guid:016x} Nodes=sched-worker[1-2]" in tree, tree
        worker2 = [f.cluster.fabric.find(f"sched-worker2 mlx5_{i}").ports[1] for i in range(4)]
        for p in worker2:
            f.ok("fault", "--name", n, "down", f"LAB-IBLEAF-01[{p.peer.num}]")

        def both(cut_off: bool) -> tuple[str, str]:
            ours = f.fabriclab("topology", "--name", n, "-e", "slurm-tree")
            dump = tmp_path / "ibnetdiscover.txt"
            dump.write_text(f.run("sched-worker1", "ibnetdiscover").stdout)
            real = f.fabriclab("topology", "--ibnetdiscover", str(dump), "-e", "slurm-tree")
            assert real.returncode == 0, real.stderr
            if cut_off:  # the dump cannot know the tray; the running fabric does
                assert ours.returncode == 1, ours.stderr
                assert ours.stderr == (
                    "warning: sched-worker2: every InfiniBand link of the tray is down: the "
                    "fabric's scan does not reach it; left out of the topology\n"
                )
            else:
                assert ours.returncode == 0 and not ours.stderr, ours.stderr
            return ours.stdout, real.stdout

        ours, real = both(cut_off=True)
        assert ours == real
        assert f"SwitchName=S-{leaf.guid:016x} Nodes=sched-worker1\n" in ours, ours
        assert "sched-worker2" not in ours
        f.ok("fault", "--name", n, "clear")
        ours, real = both(cut_off=False)
        assert ours == real == tree
