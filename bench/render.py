"""Build and render ibnetdiscover for 8,192 trays x 4 HCAs (32,768 HCAs, three tiers),
then parse the output back.  Prints the figures; targets on one core: build+render
<= 3 s, parse <= 3 s, peak RSS <= 1.5 GB.

    python bench/render.py [--trays N] [--preset gb200-su] [--repeat 3]
"""

from __future__ import annotations

import argparse
import gc
import resource
import time

from fabriclab.formats import ibnetdiscover
from fabriclab.model.build import build
from fabriclab.model.cluster import find_port
from fabriclab.spec.load import load_spec


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="gb200-su")
    ap.add_argument("--trays", type=int, default=8192)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()

    best_build = best_render = best_parse = float("inf")
    text = ""
    for _ in range(a.repeat):
        gc.collect()
        t0 = time.perf_counter()
        cluster = build(load_spec(a.preset, trays=a.trays))
        t1 = time.perf_counter()
        start, _ = find_port(cluster, None)
        text = ibnetdiscover.render(cluster.fabric, start, now=0)
        t2 = time.perf_counter()
        dump = ibnetdiscover.parse(text, "bench")
        t3 = time.perf_counter()
        assert dump.fabric.same_as(cluster.fabric), "parse(render(f)) != f"
        best_build = min(best_build, t1 - t0)
        best_render = min(best_render, t2 - t1)
        best_parse = min(best_parse, t3 - t2)
        del dump
    f = cluster.fabric
    hcas = sum(len(t.hcas) for t in cluster.trays)
    tiers = len(cluster.tiers())
    print(
        f"fabric: {a.preset} x {a.trays} trays: {hcas} HCAs, {len(f.switches())} switches "
        f"({tiers} tiers), {f.link_count()} links; output {len(text.splitlines())} lines, "
        f"{len(text) / 1e6:.1f} MB"
    )
    print(f"build:        {best_build:6.2f} s")
    print(f"render:       {best_render:6.2f} s")
    print(f"build+render: {best_build + best_render:6.2f} s   (target <= 3 s)")
    print(f"parse:        {best_parse:6.2f} s   (target <= 3 s)")
    print(f"peak RSS:     {rss_mb():6.0f} MB  (target <= 1536 MB)")
    print(f"best of {a.repeat} runs, one process, one core")


if __name__ == "__main__":
    main()
