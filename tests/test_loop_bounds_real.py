"""Flap storms against a real server: under wall time a period the loop cannot honour is
refused, and 8 links flapping at the shortest one taken, under all-to-all traffic and the
real OpenSM, leave the admin socket, ibnetdiscover (through ``fabriclab exec``) and
``down`` answering in time; under the virtual clock 12 links flapping at 1 ms for
``clock advance 10`` take little time and a log of a few kilobytes; ``events`` of a log
of 40 MB is read in bounded memory and time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from fabric_server import fabric_up
from helpers import fl

LEAF = "LAB-IBLEAF-01"
# sched-worker1's mlx5_0 (port 1) and sched-worker2's (port 5) stay up: the rest flap
FLAPPING = [f"{LEAF}[{i}]" for i in (2, 3, 4, 6, 7, 8, 9, 10)]


def _timed(f, *args: str) -> tuple[str, float]:
    t0 = time.monotonic()
    out = f.ok(*args)
    return out, time.monotonic() - t0


def _log_bytes(f) -> int:
    state = Path(f.env["FABRICLAB_STATE_DIR"])
    return sum(p.stat().st_size for p in state.glob(f"{f.name}.events.jsonl*"))


def test_a_wall_clock_flap_storm_leaves_the_fabric_answering(real_tools, tmp_path):
    with fabric_up("lab", tmp_path, sm=True) as f:
        n = f.name
        r = f.fabriclab("fault", "--name", n, "flap", FLAPPING[0], "--period", "0.002")
        assert r.returncode == 2 and r.stderr.strip().splitlines() == [
            "error: --period: 0.002 s is shorter than the 0.1 s a wall clock can honour "
            "(the server loop's tick); a virtual clock (up --virtual-clock) takes down to "
            "0.001 s"
        ]
        assert f.ok("fault", "--name", n, "list", "--json").strip() == "[]"
        f.ok("traffic", "--name", n, "all-to-all", "sched-worker[1-2]", "--rate", "100Gb/s")
        for link in FLAPPING:
            f.ok("fault", "--name", n, "flap", link, "--period", "0.1", "--count", "100000")
        storm = time.monotonic()
        slowest = 0.0
        while time.monotonic() - storm < 8:
            out, took = _timed(f, "fault", "--name", n, "list", "--json")
            assert len(json.loads(out)) == len(FLAPPING)
            slowest = max(slowest, took)
        assert slowest < 3, f"fault list took {slowest:.1f} s in the storm"
        t0 = time.monotonic()
        r = f.fabriclab("exec", "--name", n, "sched-worker1", "--", "ibnetdiscover", timeout=60)
        took = time.monotonic() - t0
        assert r.returncode == 0, r.stderr[-2000:]
        assert "sched-worker1 mlx5_0" in r.stdout and took < 20, took
        # the log grows by the flaps' events, a few hundred a second at most
        size = _log_bytes(f)
        assert size < 4 << 20, f"{size} bytes of events in {time.monotonic() - storm:.0f} s"
        out, took = _timed(f, "fault", "--name", n, "clear")
        assert out.startswith("cleared 8 fault(s)") and took < 3, (out, took)
        f.ok("fault", "--name", n, "flap", FLAPPING[0], "--period", "0.1", "--count", "100000")
        t0 = time.monotonic()  # down (as the block ends) while a link flaps
    took = time.monotonic() - t0
    assert took < 8, f"down took {took:.1f} s (its SIGKILL fallback comes at 10 s)"


def test_a_virtual_clock_flap_storm_is_quick_and_its_log_small(tmp_path):
    with fabric_up("lab", tmp_path, extra=["--virtual-clock"]) as f:
        n = f.name
        for i in range(1, 13):
            f.ok(
                "fault", "--name", n, "flap", f"{LEAF}[{i}]", "--period", "1ms", "--count", "100000"
            )
        before = _log_bytes(f)
        out, took = _timed(f, "clock", "--name", n, "advance", "10")
        assert out.strip() == "clock at 10 s"
        assert took < 10, f"clock advance 10 took {took:.1f} s"
        grew = _log_bytes(f) - before
        assert grew < 64 << 10, f"the log grew by {grew} bytes"
        runs = [
            json.loads(line)
            for line in f.ok("events", "--name", n, "--json").splitlines()
            if '"Link flapping"' in line
        ]
        assert len(runs) == 12 and {e["counter"] for e in runs} == {10000}
        faults = json.loads(f.ok("fault", "--name", n, "list", "--json"))
        assert {x["progress"]["flaps"] for x in faults} == {10000}


_MEASURE = """
import resource, subprocess, sys, time
t0 = time.monotonic()
with open(sys.argv[1], "wb") as out:
    r = subprocess.run(sys.argv[2:], stdout=out, stderr=subprocess.PIPE)
took = time.monotonic() - t0
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB (getrusage(2))
print(r.returncode, took, rss, r.stderr.decode()[-500:].replace(chr(10), " | "))
"""


def _measure(env: dict, out: Path, *args: str) -> tuple[int, float, int, str]:
    argv = [sys.executable, "-c", _MEASURE, str(out), sys.executable, "-m", "fabriclab.cli"]
    r = subprocess.run([*argv, *args], env=env, capture_output=True, text=True, timeout=600)
    code, took, rss, err = r.stdout.split(" ", 3)
    return int(code), float(took), int(rss), err


def test_events_of_a_large_log_in_bounded_memory_and_time(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    env = {**os.environ, "FABRICLAB_STATE_DIR": str(state)}
    template = {
        "id": 0,
        "name": "Link went down",
        "type": "Link",
        "event_type": "9001",
        "severity": "Critical",
        "timestamp": "2026-12-05 08:00:00.000",
        "counter": "N/A",
        "category": "Fabric Topology",
        "object_name": f"{LEAF}[5] -- sched-worker2/mlx5_0[1]",
        "object_path": f"default / {LEAF}[5] -- sched-worker2/mlx5_0[1]",
        "write_to_syslog": False,
        "description": f"Link went down: {LEAF}[5] -- sched-worker2/mlx5_0[1] (flap 1 of 9)",
        "sim_time": 0.0,
    }
    text = json.dumps(template)
    count = 40_000_000 // (len(text) + 8)
    with open(state / "big.events.jsonl", "w") as log:
        for i in range(1, count + 1):
            log.write(text.replace('"id": 0', f'"id": {i}', 1) + "\n")
    assert (state / "big.events.jsonl").stat().st_size > 38_000_000
    code, took, rss, err = _measure(env, tmp_path / "out.json", "events", "--name", "big", "--json")
    assert code == 0, err
    assert rss < 150 * 1024, f"events --json took {rss // 1024} MiB"
    assert took < 120, f"events --json took {took:.0f} s"
    with open(tmp_path / "out.json", "rb") as out:
        lines = sum(1 for _ in out)
    assert lines == count
    code, took, rss, err = _measure(env, tmp_path / "out.txt", "events", "--name", "big")
    assert code == 0, err
    assert rss < 150 * 1024, f"events took {rss // 1024} MiB"
    assert took < 120, f"events took {took:.0f} s"
    assert f"the latest 1000 of {count} events: --json for every one" in err
    shown = (tmp_path / "out.txt").read_text().splitlines()
    assert shown[-1].split()[0] == str(count) and len(shown) < 1010
    # a missing log is one line
    r = fl("events", "--name", "nolog", env=env)
    assert r.returncode == 2 and r.stderr.startswith("error: nolog: no event log"), r.stderr
