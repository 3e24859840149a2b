"""The other networks built in Linux ('up --networks'), seen by the real programs: ip
shows each endpoint's interfaces as the spec names them, ping reaches what the spec
cables and nothing else, the compute fabric's tools run in the tray's namespace as
before, and 'down' leaves no namespace, veth or process behind."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from fabric_server import fabric_up
from helpers import fl

PING = ("ping", "-c", "1", "-W", "2")


def _ns_left(name: str) -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(f"fl.{name}.")]


def test_lab_networks_as_ip_and_ping_see_them(real_tools, tmp_path):
    with fabric_up("lab", tmp_path, extra=["--networks", "--routed"]) as f:
        doc = json.loads(f.ok("networks", "--name", f.name, "--json"))
        addr = {
            (e["name"], i["network"]): i["address"].split("/")[0]
            for e in doc["endpoints"]
            if e["kind"] != "switch"
            for i in e["interfaces"]
        }
        assert len(_ns_left(f.name)) == 10  # 2 trays, their 2 BMCs, 3 service nodes, 3 switches
        out = f.ok("exec", "--name", f.name, "sched-worker1", "--", "ip", "-br", "addr")
        names = {line.split()[0].split("@")[0] for line in out.splitlines()}
        assert names == {"lo", "enp1s0f0np0", "enp1s0f1np1"}
        assert addr[("sched-worker1", "frontend")] in out

        def ping(src: str, dst: tuple[str, str]):
            return f.fabriclab("exec", "--name", f.name, src, "--", *PING, addr[dst])

        # the controller over the front end, the storage node over the storage network
        assert ping("sched-worker1", ("sched-controller", "frontend")).returncode == 0
        assert ping("sched-worker1", ("sched-storage", "storage")).returncode == 0
        # a BMC only over out-of-band management: from the controller, not from a tray
        assert ping("sched-controller", ("sched-worker2-bmc", "oob")).returncode == 0
        r = ping("sched-worker1", ("sched-worker2-bmc", "oob"))
        assert r.returncode != 0 and "unreachable" in (r.stdout + r.stderr).lower()
        # the compute fabric's view from the same tray, through the host library
        ibstat = f.ok("exec", "--name", f.name, "sched-worker1", "--", "ibstat", "-l")
        assert ibstat.split() == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
        # a process left running in a namespace goes with the fabric
        sleeper = subprocess.Popen(
            ["ip", "netns", "exec", f"fl.{f.name}.sched-login", "sleep", "600"]
        )
    try:
        assert sleeper.wait(timeout=30) != 0  # ended by 'down'
    finally:
        sleeper.kill()
    assert _ns_left(f.name) == []
    links = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True).stdout
    assert not [line for line in links.splitlines() if line.startswith("fl")]


def test_networks_need_a_spec_that_declares_them():
    spec = str(Path(__file__).parent / "specs" / "coll-rails.yaml")
    r = fl("up", spec, "--name", "nonets", "--networks", "--detach")
    assert r.returncode == 2
    assert r.stderr.strip().endswith(f"--networks: {spec} declares no networks"), r.stderr
    assert _ns_left("nonets") == []
