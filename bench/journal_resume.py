"""Resuming a journal with many flows: what ``up --resume`` does with it (read and check
the journal, bring back its faults and flows) on the lab fabric, and beside it the
flows started again one at a time (as before they were restored in one pass).
Target: 20,000 flows resumed <= 2 s.

    python bench/journal_resume.py [--flows 20000] [--one-by-one 20000]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from fabriclab.model.build import build
from fabriclab.sim.fabric import minhop
from fabriclab.sim.live import journal
from fabriclab.sim.live.api import LiveFabric
from fabriclab.sim.live.clock import VirtualClock
from fabriclab.sim.live.traffic.engine import TrafficEngine
from fabriclab.sim.wire.server import FabricServer
from fabriclab.spec.load import load_spec

_count = itertools.count()


@contextmanager
def served(cluster):
    """``cluster``'s fabric server in this process (bound, not serving: the live fabric
    needs its state, no tool talks to it)."""
    start, _ = cluster.locate(None)
    srv = FabricServer(
        cluster.fabric,
        f"flbench{os.getpid()}x{next(_count)}",
        resolve=lambda t: cluster.locate(t, switches=True),
        default_port=start,
    )
    srv.bind()
    try:
        yield srv
    finally:
        srv.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flows", type=int, default=20_000)
    ap.add_argument("--one-by-one", type=int, default=20_000, help="0: skip")
    args = ap.parse_args()
    cluster = build(load_spec("lab"))
    with served(cluster) as srv:
        minhop.fill(srv.sim)
        clock = VirtualClock()
        live = LiveFabric(srv, cluster, clock, traffic=TrafficEngine(srv.sim, clock))
        live.fault("down", "LAB-IBLEAF-01[5]")
        live.traffic_request("all-to-all", ["sched-worker[1-2]"], {"rate": "1GB/s"})
        doc = {"version": journal.VERSION, **live.snapshot()}
    flows = doc["traffic"]
    doc["traffic"] = [
        dict(flows[i % len(flows)], id=i + 1, left=1_000_000 + i, limit=1e9 + i)
        for i in range(args.flows)
    ]
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "bench.journal"
        path.write_text(json.dumps(doc))
        size = path.stat().st_size
        t0 = time.perf_counter()
        checked = journal.load(path)
        t1 = time.perf_counter()
        with served(cluster) as srv:
            minhop.fill(srv.sim)
            clock = VirtualClock(checked["clock"])
            live = LiveFabric(srv, cluster, clock, traffic=TrafficEngine(srv.sim, clock))
            live.restore(checked, f"journal {path}")
            t2 = time.perf_counter()
            assert live.traffic is not None and len(live.traffic.flows()) == args.flows
    print(
        f"resume of {args.flows:,} flows ({size / 1e6:.1f} MB journal): "
        f"{t2 - t0:.2f} s (read and check {t1 - t0:.2f} s, restore {t2 - t1:.2f} s)"
    )
    if args.one_by_one:
        n = args.one_by_one
        with served(cluster) as srv:
            minhop.fill(srv.sim)
            clock = VirtualClock()
            eng = TrafficEngine(srv.sim, clock)
            a = srv.sim.port_of(cluster.locate("sched-worker1")[0])
            b = srv.sim.port_of(cluster.locate("sched-worker2")[0])
            t0 = time.perf_counter()
            for i in range(n):
                eng.add(a, b, bytes=1_000_000 + i, rate=1e9 + i)
            took = time.perf_counter() - t0
        print(f"the same {n:,} flows started one at a time (as restored before): {took:.2f} s")


if __name__ == "__main__":
    main()
