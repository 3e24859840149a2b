"""Overlapping faults, durations and SM-made link changes as the real tools see them: a
switch downed twice stays down until its last fault clears (ibnetdiscover, the event
log), ``fault flap --period 2s`` is taken as a scenario takes it, and the real
ibportstate's disable and enable are logged as link down and up events."""

from __future__ import annotations

import json
import re

from fabric_server import fabric_up
from helpers import wait_for

LEAF, SPINE = "LAB-IBLEAF-01", "LAB-IBSPINE-01"


def _events(f) -> list[dict]:
    return [json.loads(line) for line in f.ok("events", "--name", f.name, "--json").splitlines()]


def test_a_switch_downed_twice_stays_down_until_the_last_clears(real_tools, tmp_path):
    with fabric_up("lab", tmp_path, sm=True) as f:
        n = f.name

        def seen() -> bool:
            return SPINE in f.run("sched-worker1", "ibnetdiscover").stdout

        wait_for(seen, 60, "the spine in ibnetdiscover", interval=0.5)
        assert f.ok("fault", "--name", n, "down", SPINE).strip() == f"fault 1: down {SPINE}"
        assert f.ok("fault", "--name", n, "down", SPINE).strip() == f"fault 2: down {SPINE}"
        assert [x["id"] for x in json.loads(f.ok("fault", "--name", n, "list", "--json"))] == [1, 2]
        wait_for(lambda: not seen(), 60, "the spine gone from ibnetdiscover", interval=0.5)
        assert f.ok("fault", "--name", n, "clear", "1").strip() == "cleared 1 fault(s) 1"
        last = _events(f)[-1]
        assert (last["name"], last["object_name"], last["description"]) == (
            "Still held by another fault",
            SPINE,
            f"Switch {SPINE} still down: held by fault 2 (fault 1 cleared)",
        )
        assert "Switch is up" not in [e["name"] for e in _events(f)]
        out = f.run("sched-worker1", "iblinkinfo", "--switches-only").stdout
        assert SPINE not in out and not seen()
        assert f.ok("fault", "--name", n, "clear", "2").strip() == "cleared 1 fault(s) 2"
        wait_for(seen, 60, "the spine back in ibnetdiscover", interval=0.5)
        names = [e["name"] for e in _events(f)]
        assert names.count("Switch is up") == 1 and names.count("Switch is down") == 2
        assert SPINE in f.run("sched-worker1", "iblinkinfo", "--switches-only").stdout


def test_flap_period_takes_a_duration(real_tools, tmp_path):
    with fabric_up("lab", tmp_path, extra=["--virtual-clock"]) as f:
        n = f.name
        out = f.ok("fault", "--name", n, "flap", f"{LEAF}[9]", "--period", "2s", "--count", "2")
        assert out.strip() == f"fault 1: flap {LEAF}[9] period=2.0 count=2"
        assert f.ok("clock", "--name", n, "advance", "500ms").strip() == "clock at 0.5 s"
        assert f.ok("clock", "--name", n, "advance", "1m").strip() == "clock at 60.5 s"
        ups = [e["sim_time"] for e in _events(f) if e["name"] == "Link is up"]
        assert ups == [1.0, 3.0]
        # a bad duration: one line naming the option, exit 2, nothing changed
        for args, line in (
            (("fault", "--name", n, "flap", f"{LEAF}[9]", "--period", "2x"), "--period: '2x'"),
            (("clock", "--name", n, "advance", "soon"), "SECONDS: 'soon'"),
        ):
            r = f.fabriclab(*args)
            assert r.returncode == 2 and r.stderr.strip().splitlines() == [
                f"error: {line} is not a duration (2, 2.5, 2s, 500ms, 1m, 1h)"
            ], r.stderr
        assert f.ok("fault", "--name", n, "list", "--json").strip() == "[]"


def test_ibportstate_disable_and_enable_are_events(real_tools, tmp_path):
    with fabric_up("lab", tmp_path, sm=True) as f:
        n = f.name
        leaf = f.cluster.fabric.find(LEAF)
        link = f"{LEAF}[5] -- sched-worker2/mlx5_0[1]"

        def ibportstate(what: str) -> None:
            r = f.fabriclab(
                "exec", "--name", n, "sched-worker1", "--", "ibportstate", str(leaf.lid), "5", what
            )
            assert r.returncode == 0, r.stderr

        def logged() -> list[tuple[str, str, str]]:
            return [
                (e["name"], e["object_name"], e["description"])
                for e in _events(f)
                if "PortInfo Set" in e["description"]
            ]

        ibportstate("disable")
        want = [
            (
                "Link went down",
                link,
                f"Link went down: {link} (by PortInfo Set (SM): {LEAF}[5] disabled)",
            )
        ]
        assert logged() == want
        ibportstate("enable")
        want.append(
            ("Link is up", link, f"Link is up: {link} (by PortInfo Set (SM): {LEAF}[5] enabled)")
        )
        assert logged() == want

        def active() -> bool:
            out = f.run("sched-worker1", "iblinkinfo", "--switches-only").stdout
            port5 = re.compile(rf"\s+{leaf.lid}\s+5\[")
            return any(port5.match(line) and "Active" in line for line in out.splitlines())

        wait_for(active, 60, "the leaf's port 5 Active again", interval=0.5)
        assert len(_events(f)) == 2  # the SM's own sweeps (Arm, Active) are no events
