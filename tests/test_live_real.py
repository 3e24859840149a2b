"""The live fabric seen by the real tools: faults injected with 'fabriclab fault' show in
ibstat, iblinkinfo, ibnetdiscover, perfquery and ibqueryerrors, the real OpenSM reacts
to their traps, and a scenario survives a kill -9 of the server (up --resume)."""

from __future__ import annotations

import json
import os
import re
import signal

from fabric_server import fabric_up, link_trap
from helpers import counter, wait_for

LEAF = "LAB-IBLEAF-01"


def _events(f) -> list[dict]:
    return [json.loads(line) for line in f.ok("events", "--name", f.name, "--json").splitlines()]


def test_leaf_port_down_and_up_as_the_real_tools_see_it(real_tools, tmp_path):
    with fabric_up("lab", tmp_path, sm=True) as f:
        leaf = f.cluster.fabric.find(LEAF)
        assert "sched-worker2 mlx5_0" in f.run("sched-worker1", "ibnetdiscover").stdout
        log_before = len(f.opensm_log())
        assert f.ok("fault", "--name", f.name, "down", f"{LEAF}[5]").startswith("fault 1: down")
        st = f.run("sched-worker2", "ibstat").stdout  # the HCA at the other end
        assert "State: Down" in st and "Physical state: Polling" in st

        def link5() -> str:
            out = f.run("sched-worker1", "iblinkinfo", "--switches-only").stdout
            return next(ln for ln in out.splitlines() if re.match(rf"\s+{leaf.lid}\s+5\[", ln))

        assert "Down/ Polling" in link5()
        f.swept_after_trap(leaf.lid, since=log_before)
        assert "sched-worker2 mlx5_0" not in f.run("sched-worker1", "ibnetdiscover").stdout
        # either end names the link
        out = f.ok("fault", "--name", f.name, "up", "sched-worker2/mlx5_0[1]")
        assert "cleared fault(s) 1" in out
        wait_for(lambda: "Active/  LinkUp" in link5(), 60, "the link Active again", interval=0.3)
        assert "State: Active" in f.run("sched-worker2", "ibstat").stdout
        assert "sched-worker2 mlx5_0" in f.run("sched-worker1", "ibnetdiscover").stdout
        names = [(e["name"], e["object_name"]) for e in _events(f)]
        link = f"{LEAF}[5] -- sched-worker2/mlx5_0[1]"
        assert names == [("Link went down", link), ("Link is up", link)]
        # a bad target: one line, exit 2, nothing changed
        r = f.fabriclab("fault", "--name", f.name, "down", "NOPE[3]")
        assert r.returncode == 2 and r.stderr.strip().splitlines() == [
            "error: NOPE[3]: no switch, tray or HCA 'NOPE' in this fabric"
        ]
        assert LEAF not in f.ok("fault", "--name", f.name, "list")


def test_degraded_link_in_iblinkinfo_and_ibqueryerrors(real_tools, tmp_path):
    with fabric_up("lab", tmp_path, sm=True, extra=["--virtual-clock"]) as f:
        f.ok("fault", "--name", f.name, "degrade", f"{LEAF}[7]", "--width", "2x", "--speed", "HDR")

        def line() -> str:
            out = f.run("sched-worker1", "iblinkinfo", "--switches-only").stdout
            leaf = f.cluster.fabric.find(LEAF)
            return next(ln for ln in out.splitlines() if re.match(rf"\s+{leaf.lid}\s+7\[", ln))

        # the link retrained (INIT); OpenSM, told by trap 128, makes it Active again
        wait_for(
            lambda: "Active/  LinkUp" in line(),
            60,
            lambda: f"the link Active: {line()}",
            interval=0.3,
        )
        leaf = f.cluster.fabric.find(LEAF)
        assert link_trap(leaf.lid) in f.opensm_log(), f.opensm_log()[-3000:]
        assert "( 2X        53.125 Gbps Active/  LinkUp)" in line()
        assert "(Could be 4X Could be 106.25 Gbps)" in line()
        r = f.run("sched-worker1", "ibqueryerrors", "-r", check=False)
        assert "Could be 4X Could be 106.25 Gbps" in r.stdout
        evs = _events(f)
        assert [e["event_type"] for e in evs] == ["130", "9007"]
        assert evs[0]["name"] == "Non-optimal link width" and "2x" in evs[0]["description"]


def test_bit_errors_at_the_expected_pace(real_tools, tmp_path):
    with fabric_up("lab", tmp_path, sm=True, extra=["--virtual-clock"]) as f:
        # 4x NDR: 4.25e11 bits/s each way; BER 1e-10: 42.5 symbol errors a second
        f.ok(
            "fault",
            "--name",
            f.name,
            "errors",
            f"{LEAF}[5]",
            "--ber",
            "1e-10",
            "--down-after",
            "255",
        )
        assert f.ok("clock", "--name", f.name, "advance", "10").strip() == "clock at 10 s"
        pq = f.run("sched-worker2", "perfquery").stdout  # the HCA's own port
        assert counter(pq, "SymbolErrorCounter") == 425
        assert counter(pq, "LinkErrorRecoveryCounter") == 53
        assert counter(pq, "LocalLinkIntegrityErrors") == 15  # 4 bits wide: it stops at 15
        pqx = f.run("sched-worker2", "perfquery", "-x").stdout
        assert counter(pqx, "LocalLinkIntegrityErrors") == 53  # 64 bits wide
        leaf = f.cluster.fabric.find(LEAF)
        lq = f.run("sched-worker1", "perfquery", str(leaf.lid), "5").stdout
        assert counter(lq, "SymbolErrorCounter") == 425
        iq = f.run("sched-worker1", "ibqueryerrors", check=False).stdout
        assert "[SymbolErrorCounter == 425 (425.000)]" in iq
        f.ok("clock", "--name", f.name, "advance", "10")
        assert counter(f.run("sched-worker2", "perfquery").stdout, "SymbolErrorCounter") == 850
        f.run("sched-worker2", "perfquery", "-R")
        assert counter(f.run("sched-worker2", "perfquery").stdout, "SymbolErrorCounter") == 0
        f.ok("clock", "--name", f.name, "advance", "2")
        assert counter(f.run("sched-worker2", "perfquery").stdout, "SymbolErrorCounter") == 85
        evs = [e["name"] for e in _events(f)]
        assert evs[0] == "High BER reported" and "Counter threshold exceeded" in evs


def test_scenario_survives_kill_9_and_resume(real_tools, tmp_path):
    scenario = tmp_path / "flap.yaml"
    scenario.write_text(
        "name: leaf-flap\n"
        "steps:\n"
        f"  - at: 10s\n    do: flap {LEAF}[9]\n    period: 2s\n    count: 5\n"
        f"  - at: 0s\n    do: errors {LEAF}[5]\n    ber: 1e-10\n    down_after: 255\n"
        f"  - at: 5s\n    do: degrade {LEAF}[6]\n    width: 1x\n"
        f"  - at: 40s\n    do: clear {LEAF}[6]\n"
    )
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"- at: 1s\n  do: down {LEAF}[5]\n- at: 2s\n  do: explode {LEAF}[5]\n")
    with fabric_up("lab", tmp_path, extra=["--virtual-clock"]) as f:
        r = f.fabriclab("scenario", "--name", f.name, "run", str(bad))
        assert r.returncode == 2
        assert r.stderr.strip().splitlines() == [
            f"error: {bad}:4: unknown verb 'explode' (known: down, up, flap, degrade, errors, "
            "drop, nvlink, clear, traffic)"
        ]
        assert _events(f) == []
        r = f.fabriclab("scenario", "--name", f.name, "run", str(scenario))
        assert r.returncode == 0, r.stderr
        f.ok("clock", "--name", f.name, "advance", "15")  # mid-flap: link down at t=14
        faults = f.ok("fault", "--name", f.name, "list")
        before = f.run("sched-worker2", "perfquery").stdout
        assert counter(before, "SymbolErrorCounter") == 637  # 15 s x 42.5
        events_before = _events(f)
        # kill -9 the server, then bring it back from its journal
        os.kill(f.instance().pid, signal.SIGKILL)
        wait_for(
            lambda: f.fabriclab("status").stdout.count(f.name) == 0, 10, "the killed fabric gone"
        )
        r = f.fabriclab("up", "lab", "--name", f.name, "--detach", "--virtual-clock", "--resume")
        assert r.returncode == 0, r.stderr
        assert f.ok("fault", "--name", f.name, "list") == faults
        after = f.run("sched-worker2", "perfquery").stdout
        for name in ("SymbolErrorCounter", "LinkErrorRecoveryCounter", "LocalLinkIntegrityErrors"):
            assert counter(after, name) == counter(before, name), name
        assert f.ok("clock", "--name", f.name, "show").startswith("clock at 15 s")
        assert _events(f) == events_before  # nothing happened twice
        f.ok("clock", "--name", f.name, "advance", "30")
        assert counter(f.run("sched-worker2", "perfquery").stdout, "SymbolErrorCounter") == 1912
        evs = _events(f)
        flaps = [e["name"] for e in evs if e["object_name"].startswith(f"{LEAF}[9]")]
        assert flaps == ["Link went down", "Link is up"] * 5
        assert [e["id"] for e in evs] == list(range(1, len(evs) + 1))
        assert evs[-1]["name"] == "Link width and speed restored"
        assert "leaf-flap" not in f.ok("fault", "--name", f.name, "list")


def test_traffic_commands_move_the_counters_perfquery_reads(real_tools, tmp_path):
    with fabric_up("lab", tmp_path, sm=True, extra=["--virtual-clock"]) as f:
        before = counter(f.run("sched-worker2", "perfquery", "-x").stdout, "PortRcvData")
        out = f.ok(
            "traffic",
            "--name",
            f.name,
            "send",
            "sched-worker1",
            "sched-worker2",
            "--bytes",
            "1Gi",
        )
        assert out.strip() == "send: 1 flow(s) 1"
        f.ok("clock", "--name", f.name, "advance", "1")
        after = counter(f.run("sched-worker2", "perfquery", "-x").stdout, "PortRcvData")
        assert after - before > (1 << 30) // 4  # payload in 4-byte words, plus headers
        assert "done" in f.ok("traffic", "--name", f.name, "list")
        r = f.fabriclab(
            "traffic", "--name", f.name, "send", "sched-worker1", "nope", "--bytes", "1"
        )
        assert r.returncode == 2
        assert r.stderr.strip() == "error: nope: no tray, CA or node 'nope' in this fabric"


def test_admin_socket_bounds_and_wall_clock_flap(real_tools, tmp_path):
    import socket
    import stat

    with fabric_up("lab", tmp_path) as f:
        path = tmp_path / "state" / f"{f.name}.admin"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600

        def ask(data: bytes) -> dict:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(30)
                s.connect(str(path))
                try:
                    s.sendall(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the server answered and hung up before all of it was sent
                buf = b""
                while not buf.endswith(b"\n"):
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    buf += chunk
                return json.loads(buf)

        assert ask(b"not json\n")["ok"] is False
        assert ask(b"[1, 2]\n") == {"ok": False, "where": "request", "what": "want a JSON object"}
        assert ask(b'{"op": "explode"}\n')["what"] == "unknown operation 'explode'"
        r = ask(b'{"op": "fault", "kind": "down", "target": "NOPE[1]"}\n')
        assert r == {
            "ok": False,
            "where": "NOPE[1]",
            "what": "no switch, tray or HCA 'NOPE' in this fabric",
        }
        assert (
            ask(
                b'{"op": "fault", "kind": "flap", "target": "LAB-IBLEAF-01[5]", '
                b'"options": {"count": "many"}}\n'
            )["ok"]
            is False
        )
        r = ask(b"x" * (2 << 20))  # no end of line within the bound: refused, closed
        assert r["what"].startswith("longer than")
        assert ask(b'{"op": "faults"}\n') == {"ok": True, "result": []}
        assert _events(f) == []
        # wall time: a flap of 1 s, twice, runs by itself
        f.ok("fault", "--name", f.name, "flap", f"{LEAF}[5]", "--period", "1", "--count", "2")
        wait_for(lambda: len(_events(f)) == 4, 20, lambda: f"four events: {_events(f)}")
        assert [e["name"] for e in _events(f)] == ["Link went down", "Link is up"] * 2
        times = [e["sim_time"] for e in _events(f)]
        assert 1.4 < times[-1] - times[0] < 3.0
        assert ask(b'{"op": "faults"}\n') == {"ok": True, "result": []}


def test_a_journal_fault_fault_would_refuse_is_refused_at_resume(real_tools, tmp_path):
    """A journal edited by hand (an errors fault's ber set to 1.0, a string clock, a
    scenario step 'at: soon'): up --resume says one line naming the field, and leaves
    no server running; the journal as it was resumes."""
    with fabric_up("lab", tmp_path, extra=["--virtual-clock"]) as f:
        f.ok("fault", "--name", f.name, "errors", f"{LEAF}[6]", "--ber", "1e-10")
        scenario = tmp_path / "s.yaml"
        scenario.write_text(f"- at: 100s\n  do: down {LEAF}[5]\n")
        f.ok("scenario", "--name", f.name, "run", str(scenario))
        f.ok("down", "--name", f.name)
        path = tmp_path / "state" / f"{f.name}.journal"
        good = json.loads(path.read_text())
        damage = [
            (lambda d: d["faults"][0]["options"].update(ber=1.0), "faults.0: --ber: 1: want"),
            (lambda d: d.update(clock="10"), "clock: Input should be a valid number"),
            (
                lambda d: d["scenarios"][0]["steps"][0].update(at="soon"),
                "scenarios.0.steps.0.at: Input should be a valid number",
            ),
        ]
        for change, message in damage:
            doc = json.loads(json.dumps(good))
            change(doc)
            path.write_text(json.dumps(doc))
            r = f.fabriclab(
                "up", "lab", "--name", f.name, "--detach", "--virtual-clock", "--resume"
            )
            assert r.returncode != 0
            # up's phase lines (not a terminal), then its one error line
            lines = [t for t in r.stderr.strip().splitlines() if t.startswith("error:")]
            assert r.stderr.strip().splitlines()[-1] == lines[0], r.stderr
            assert len(lines) == 1 and lines[0].startswith(f"error: {f.name}: the fabric server")
            assert f"journal {path}: {message}" in lines[0], lines[0]
            assert "internal" not in lines[0] and f.name not in f.fabriclab("status").stdout
        path.write_text(json.dumps(good))
        f.ok("up", "lab", "--name", f.name, "--detach", "--virtual-clock", "--resume")
        assert "1e-10" in f.ok("fault", "--name", f.name, "list")
        f.ok("clock", "--name", f.name, "advance", "1")
