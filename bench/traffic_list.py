"""Listing flows on a running fabric at scale: gb200-su (144 trays) brought up with the
real OpenSM under a virtual clock, an all-to-all among its trays (144 x 143 = 20,592
flows) and a link down under it, then ``fabriclab traffic list`` as a user runs it:
the summary with the first 20 flows, a filter, every flow (``--all``) and
``--all --json``; and the client's ``flow_summary()`` and ``flows()``.  Targets: the
summary well under 1 s, every flow a few seconds at most.

Each figure is the median wall time of ``--rounds`` runs of the whole command (a fresh
``fabriclab`` process: its start-up included), output to a pipe.

    python bench/traffic_list.py [--preset gb200-su] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fabriclab.client import Fabric

FABRICLAB = str(Path(sys.executable).with_name("fabriclab"))  # the command, as installed


def timed_cli(argv: list[str], rounds: int) -> tuple[float, int]:
    """Median seconds of ``fabriclab ARGV`` and the lines it printed."""
    took, lines = [], 0
    for _ in range(rounds):
        t0 = time.perf_counter()
        r = subprocess.run([FABRICLAB, *argv], capture_output=True, text=True, check=True)
        took.append(time.perf_counter() - t0)
        lines = r.stdout.count("\n")
    return statistics.median(took), lines


def timed(fn, rounds: int):
    took, out = [], None
    for _ in range(rounds):
        t0 = time.perf_counter()
        out = fn()
        took.append(time.perf_counter() - t0)
    return statistics.median(took), out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="gb200-su")
    ap.add_argument("--trays", default="gb-r[01-08]-t[01-18]", help="the all-to-all's set")
    ap.add_argument("--down", default="SU1-IBLEAF-R1-01[1]", help="a link taken down")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    os.environ.setdefault("FABRICLAB_STATE_DIR", tempfile.mkdtemp(prefix="fabriclab-bench-"))
    name = f"bench-list-{os.getpid()}"
    t0 = time.perf_counter()
    fabric = Fabric.up(a.preset, name=name, sm=True, virtual_clock=True)
    try:
        print(f"{a.preset} up with OpenSM in {time.perf_counter() - t0:.1f} s")
        started = fabric.traffic("all-to-all", a.trays, rate="1GB/s")
        fabric.fault("down", a.down)
        fabric.advance(1)
        s = fabric.flow_summary()
        states = ", ".join(f"{n} {k}" for k, n in s["states"].items() if n)
        print(f"all-to-all {a.trays}: {started['count']} flows ({states})")
        base = ["traffic", "--name", name, "list"]
        for label, extra in (
            ("traffic list (summary + 20)", []),
            ("traffic list --state retrying", ["--state", "retrying"]),
            ("traffic list --from TRAY", ["--from", "gb-r02-t05"]),
            ("traffic list --all", ["--all"]),
            ("traffic list --all --json", ["--all", "--json"]),
        ):
            took, lines = timed_cli(base + extra, a.rounds)
            print(f"{label:32s} {took:6.2f} s  ({lines} lines)")
        took, _ = timed(fabric.flow_summary, a.rounds)
        print(f"{'client flow_summary()':32s} {took:6.2f} s")
        took, flows = timed(fabric.flows, a.rounds)
        print(f"{'client flows()':32s} {took:6.2f} s  ({len(flows)} flows)")
        r = subprocess.run(
            [FABRICLAB, "traffic", "--name", name, "stop"],
            capture_output=True,
            text=True,
            check=True,
        )
        print(r.stdout.strip().split(" 1 ")[0])
    finally:
        fabric.down()


if __name__ == "__main__":
    main()
