"""What a collective's estimate costs on the largest fabrics: routed, congested, in
process (the work ``fabriclab collective`` and a running fabric's ``collective`` do).

- all-reduce, 8 GiB, over every GPU of ``gb200-su --trays 8192`` (32,768 GB200 GPUs in
  456 NVL72 domains, 32,768 HCAs on the 3-tier fat tree): every algorithm NCCL could
  choose costed, ring and tree flows routed over the forwarding tables and given their
  max-min rates (goal: <= 2 s);
- the same all-reduce over one GPU of each tray (8,192 ranks, all on rail 0);
- a 1,024-way all-to-all, 1 GiB: 128 DGX H100 trays x 8 GPUs of ``h100-su --trays
  4096`` (32,768 HCAs, 3 tiers), each GPU's HCA sending to the 1,016 others outside its
  tray: 1,040,384 flows routed and shared (goal: <= 5 s).

The fabric is built and routed once per spec (as ``up --routed`` routes it) and its
snapshot for routing taken once, as a running fabric's traffic engine keeps it from
request to request (their times printed apart); then each estimate runs ``--rounds``
times: the median and the spread.

    python bench/collectives.py [--rounds 3] [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import time

from fabriclab.model.build import build
from fabriclab.sim.fabric.datapaths import Snapshot
from fabriclab.sim.live.collectives import run
from fabriclab.spec.load import load_spec

GIB = 1 << 30


def fabric(spec: str, trays: int):
    t0 = time.perf_counter()
    cluster = build(load_spec(spec, trays=trays))
    t1 = time.perf_counter()
    sim = run.routed_fabric(cluster)
    t2 = time.perf_counter()
    snap = Snapshot(sim)
    t3 = time.perf_counter()
    print(
        f"{spec} x{trays}: built {t1 - t0:.1f} s, routed {t2 - t1:.1f} s, snapshot {t3 - t2:.2f} s",
        flush=True,
    )
    return cluster, sim, snap


def case(label: str, cluster, sim, snap, req: run.Request, rounds: int, goal: float | None) -> None:
    times, doc = [], {}
    for _ in range(rounds):
        t0 = time.perf_counter()
        doc = run.estimate(cluster, sim, req, snap)
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    goal_text = f" (goal <= {goal:g} s: {'met' if med <= goal else 'NOT met'})" if goal else ""
    print(
        f"{label}: median {med:.2f} s, {min(times):.2f}-{max(times):.2f} s over {rounds}"
        f"{goal_text}; {doc['ranks']} ranks in {doc['nodes']} NVLink groups, "
        f"{doc['algorithm']}/{doc['protocol']}, {doc['time_s'] * 1e3:.2f} ms, "
        f"busbw {doc['busbw_GBps']:.1f} GB/s, {len(doc['links'])} ports loaded",
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="1/8 of the trays, one round")
    a = ap.parse_args()
    rounds = 1 if a.quick else a.rounds
    scale = 8 if a.quick else 1
    gb_trays, h_trays = 8192 // scale, 4096 // scale
    cluster, sim, snap = fabric("gb200-su", gb_trays)
    hosts = ",".join(t.host for t in cluster.trays)
    req = run.Request("all-reduce", 8 * GIB, hosts)
    case(f"all-reduce over {gb_trays} trays x 4 GPUs", cluster, sim, snap, req, rounds, 2.0)
    req = run.Request("all-reduce", 8 * GIB, hosts, gpus_per_node=1)
    case(f"all-reduce over {gb_trays} trays x 1 GPU", cluster, sim, snap, req, rounds, None)
    del cluster, sim, snap
    cluster, sim, snap = fabric("h100-su", h_trays)
    n = 1024 // scale // 8
    hosts = ",".join(t.host for t in cluster.trays[:n])
    req = run.Request("all-to-all", GIB, hosts)
    case(f"{n * 8}-way all-to-all ({n} trays x 8 GPUs)", cluster, sim, snap, req, rounds, 5.0)


if __name__ == "__main__":
    main()
