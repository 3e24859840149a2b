"""Scheduler topology for a 32,768-HCA three-tier fabric, from its ibnetdiscover dump
(8,192 trays) and the trays' nvidia-smi answers: every engine, timed, default and
topograph-compatible modes.  Target: every engine <= 2 s.  Also prints the parse time
beside the floor (reading the file and splitting its lines).

    python bench/topology.py [--trays 8192] [--repeat 3]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from fabriclab.formats import ibnetdiscover, nvidia_smi
from fabriclab.model.build import build
from fabriclab.model.cluster import find_port
from fabriclab.spec.load import load_spec
from fabriclab.topology import inputs as topology_inputs
from fabriclab.topology.engines import ENGINES, EngineOptions, run
from fabriclab.topology.engines.slurm import BLOCK, TREE, TopologySpec
from fabriclab.topology.providers import local_graph


def best(fn, repeat):
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trays", type=int, default=8192)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    cluster = build(load_spec("gb200-su", trays=a.trays))
    start, _ = find_port(cluster, None)
    tmp = Path(tempfile.mkdtemp())
    ib = tmp / "ibnetdiscover.txt"
    ib.write_text(ibnetdiscover.render(cluster.fabric, start))
    smi = tmp / "nvidia-smi.txt"
    smi.write_text(nvidia_smi.render_pdsh(cluster.trays))
    size = ib.stat().st_size
    hcas = sum(len(t.hcas) for t in cluster.trays)
    print(
        f"fabric: {a.trays} trays, {hcas} HCAs, {len(cluster.fabric.switches())} switches, "
        f"{len(cluster.tiers())} tiers; dump {size / 1e6:.1f} MB"
    )

    floor, _ = best(lambda: ib.read_text().splitlines(), a.repeat)
    parse, _ = best(lambda: ibnetdiscover.parse_file(str(ib)), a.repeat)
    load, inputs = best(lambda: topology_inputs.from_files([str(ib)], str(smi)), a.repeat)
    print(f"read+split lines (floor): {floor:6.2f} s")
    print(f"parse ibnetdiscover:      {parse:6.2f} s   ({parse / floor:.1f}x the floor)")
    print(f"load inputs (parse + nvidia-smi): {load:6.2f} s")

    nodes = [t.host for t in cluster.trays]
    topologies = {
        "gpu": TopologySpec(BLOCK, nodes),
        "all": TopologySpec(TREE, nodes, cluster_default=True),
    }
    for compat in (False, True):
        mode = "topograph-compat" if compat else "default"
        gtime, graph = best(
            lambda compat=compat: local_graph(inputs, None, compat=compat, names=False), a.repeat
        )
        print(f"[{mode}] graph: {gtime:6.2f} s")
        for engine in ENGINES:
            opts = EngineOptions(
                gpus=inputs.gpus, topologies=topologies if engine == "slurm-yaml" else {}
            )
            t, out = best(
                lambda engine=engine, graph=graph, opts=opts: run(engine, graph, opts), a.repeat
            )
            total = gtime + t
            flag = "ok" if total <= 2.0 else "OVER"
            print(
                f"[{mode}] {engine:12s} engine {t:6.2f} s, graph+engine {total:6.2f} s "
                f"(target <= 2 s: {flag}), {len(out.splitlines())} lines"
            )
    print(f"best of {a.repeat} runs, one process")


if __name__ == "__main__":
    main()
