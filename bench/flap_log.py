"""A flap storm's cost in time and in the event log: the lab fabric under the virtual
clock, 12 links (every cabled port of its leaf) flapping at 1 ms, then ``fabriclab clock
advance 10`` (20,000 changes a link), as a user runs it; then the log read back by
``fabriclab events --json`` and ``fabriclab events``, each a fresh process.

Reported: the advance's time, the log's size and number of events, and each reader's time
and peak memory (its maximum resident set, from getrusage(2)).

    python bench/flap_log.py [--links 12] [--period 1ms] [--seconds 10]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LEAF = "LAB-IBLEAF-01"


def fabriclab(env: dict, *args: str, out=subprocess.PIPE) -> subprocess.CompletedProcess:
    r = subprocess.run(
        [sys.executable, "-m", "fabriclab.cli", *args], env=env, stdout=out, stderr=subprocess.PIPE
    )
    if r.returncode != 0:
        sys.exit(f"fabriclab {' '.join(args)} failed: {r.stderr.decode().strip()}")
    return r


def timed_reader(env: dict, *args: str) -> tuple[float, int]:
    """Seconds and peak resident KiB of ``fabriclab ARGS`` (output thrown away)."""
    code = (
        "import resource, subprocess, sys, time\n"
        "t = time.monotonic()\n"
        "subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "print(time.monotonic() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, sys.executable, "-m", "fabriclab.cli", *args],
        env=env,
        capture_output=True,
        text=True,
    )
    took, rss = r.stdout.split()
    return float(took), int(rss)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--links", type=int, default=12, help="leaf ports flapping (1 to 12)")
    ap.add_argument("--period", default="1ms", help="the flap period")
    ap.add_argument("--seconds", default="10", help="how far the clock is advanced")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="fabriclab-bench-") as tmp:
        state = Path(tmp) / "state"
        env = {**os.environ, "FABRICLAB_STATE_DIR": str(state)}
        name = f"flaplog{os.getpid()}"
        fabriclab(env, "up", "lab", "--name", name, "--detach", "--virtual-clock")
        try:
            for i in range(1, a.links + 1):
                port = f"{LEAF}[{i}]"
                fabriclab(
                    env,
                    "fault",
                    "--name",
                    name,
                    "flap",
                    port,
                    "--period",
                    a.period,
                    "--count",
                    "100000",
                )
            t0 = time.monotonic()
            fabriclab(env, "clock", "--name", name, "advance", a.seconds)
            took = time.monotonic() - t0
            files = sorted(state.glob(f"{name}.events.jsonl*"))
            size = sum(p.stat().st_size for p in files)
            events = 0
            for p in files:
                with open(p, "rb") as f:
                    events += sum(1 for _ in f)
            print(
                f"{a.links} links flapping at {a.period}, clock advance {a.seconds}: {took:.2f} s"
            )
            print(f"event log: {size:,} bytes in {len(files)} file(s), {events:,} events")
            for args in (("events", "--name", name, "--json"), ("events", "--name", name)):
                t, rss = timed_reader(env, *args)
                print(
                    f"fabriclab {' '.join(args[:1] + args[3:])}: {t:.2f} s, {rss // 1024} MiB peak"
                )
        finally:
            fabriclab(env, "down", "--name", name)
    print(f"(this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MiB)")


if __name__ == "__main__":
    main()
