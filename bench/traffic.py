"""Traffic on the 8,192-tray, three-tier fabric (32,768 HCAs): routing flows hop by hop
over the forwarding tables and computing their max-min rates, and one counter update of
the whole fabric.  Targets: a ring over all 32,768 HCAs <= 5 s, an all-to-all among
1,024 HCAs (1,047,552 flows) <= 5 s, a counter update <= 0.2 s.

The forwarding tables are filled by fabriclab's min-hop stand-in for an SM
(:mod:`fabriclab.sim.fabric.minhop`; the real OpenSM takes far longer on this fabric).

    python bench/traffic.py [--trays 8192] [--preset gb200-su] [--a2a 1024]
"""

from __future__ import annotations

import argparse
import gc
import resource
import statistics
import time

from fabriclab.model.build import build
from fabriclab.sim.fabric import minhop
from fabriclab.sim.fabric.state import SimFabric
from fabriclab.sim.live.clock import VirtualClock
from fabriclab.sim.live.traffic.engine import TrafficEngine
from fabriclab.spec.load import load_spec


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Took(float):
    """Wall seconds, with the process's CPU seconds beside them (the machine may be
    shared: CPU time is what the work itself cost)."""

    cpu: float

    def __format__(self, spec: str) -> str:
        return f"{float(self):{spec}} s (cpu {self.cpu:.2f})"


def timed(fn):
    gc.collect()
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    took = Took(time.perf_counter() - t0)
    took.cpu = time.process_time() - c0
    return out, took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="gb200-su")
    ap.add_argument("--trays", type=int, default=8192)
    ap.add_argument("--a2a", type=int, default=1024, help="HCAs in the all-to-all")
    a = ap.parse_args()

    cluster, t_build = timed(lambda: build(load_spec(a.preset, trays=a.trays)))
    sim, t_sim = timed(lambda: SimFabric(cluster.fabric))
    _, t_fill = timed(lambda: minhop.fill(sim))
    cas = [n.ports[1] for n in sim.nodes if not n.is_switch]
    nsw = sum(1 for n in sim.nodes if n.is_switch)
    print(
        f"fabric: {a.preset} x {a.trays} trays: {len(cas)} HCAs, {nsw} switches, "
        f"{cluster.fabric.link_count()} links"
    )
    print(f"build {t_build:.2f}, run-time state {t_sim:.2f}, min-hop LFT fill {t_fill:.2f}")

    clock = VirtualClock()
    eng = TrafficEngine(sim, clock)
    ids, t_ring = timed(lambda: eng.ring(cas))
    rates = [f.rate for f in eng.flows([ids[0], ids[-1]])]
    print(
        f"ring over {len(ids)} HCAs: route + max-min {t_ring:6.2f}   (target <= 5 s); "
        f"rates {rates[0] / 1e9:.2f}..{rates[-1] / 1e9:.2f} GB/s"
    )
    clock.advance(1e-3)
    _, t_upd = timed(eng.advance)
    print(f"counter update (ring):             {t_upd:6.3f}   (target <= 0.2 s)")
    eng.stop()

    step = max(1, len(cas) // a.a2a)
    members = cas[::step][: a.a2a]
    ids, t_a2a = timed(lambda: eng.all_to_all(members))
    got = [f.rate for f in eng.flows(ids[:: max(1, len(ids) // 2000)])]  # a sample
    print(
        f"all-to-all among {len(members)} HCAs ({len(ids)} flows): route + max-min "
        f"{t_a2a:6.2f}   (target <= 5 s); rates {min(got) / 1e6:.1f}..{max(got) / 1e6:.1f} MB/s"
    )
    clock.advance(1e-3)
    _, t_upd = timed(eng.advance)
    print(f"counter update (all-to-all):       {t_upd:6.3f}   (target <= 0.2 s)")
    # one forwarding-table entry changed (a block written, as an SM moves a route): only
    # the flows through that switch are routed again; beside it every flow routed again
    # on a fresh snapshot, as every change did before
    dst = members[-1]
    leaf = next(n for n in sim.nodes if n.is_switch and n is not dst.peer.node)  # type: ignore[union-attr]
    sw = leaf.sw
    uplinks = [p.num for p in leaf.ports[1:] if p is not None and p.peer and p.peer.node.is_switch]
    lid, cpu_one, cpu_all = dst.lid, [], []
    for k in range(3):  # alternating
        block = bytearray(sw.lft_block(lid // 64))  # type: ignore[union-attr]
        block[lid % 64] = (
            uplinks[k % len(uplinks)]
            if block[lid % 64] != uplinks[k % len(uplinks)]
            else uplinks[(k + 1) % len(uplinks)]
        )
        before = eng.routings
        t = time.process_time()
        sw.write_lft_block(lid // 64, bytes(block))  # type: ignore[union-attr]
        eng.advance()
        cpu_one.append(time.process_time() - t)
        moved = eng.routings - before
        t = time.process_time()
        eng.reroute()
        cpu_all.append(time.process_time() - t)
    one, full = statistics.median(cpu_one), statistics.median(cpu_all)
    print(
        f"one LFT entry changed, CPU: {one:6.3f} s ({moved} of {len(ids)} flows routed again, "
        f"rates shared anew); re-routing every flow {full:6.2f} s: ratio {one / full:.2f}"
    )
    print(f"peak RSS {rss_mb():.0f} MB; one process")


if __name__ == "__main__":
    main()
