"""What ``/metrics`` scrapes cost the fabric server's other clients: the real
``ibnetdiscover`` scanning the whole fabric from a tray, alone and while the API scrapes
the fabric again and again (each scrape the admin op ``watch``: the server's walk over
every port, in its loop).  Goal: scans during scrapes within 10 % of their time
without, for a scrape every second (``--interval``; Prometheus's default is 15 s) and,
to show the bound, for scrapes one after the other (``--interval 0``).

The fabric is bench/server.py's 2,048-HCA fabric (512 trays x 4 HCAs, 64 leaves, 32
spines), served by ``fabriclab up --detach``; no SM (``ibnetdiscover`` walks it by
directed route).  The API's side runs in this process (``Source.remote``, the
``Metrics`` of ``fabriclab api``), as a separate process from the server, as it runs.
Scans alternate, one without scrapes then one with, ``--rounds`` times; medians.

    python bench/api_metrics_scan.py [--rounds 5] [--interval 1 0]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from server import bench_fabric  # the same fabric as bench/server.py
from storm import _fabriclab, _tool_env, scan

from fabriclab.api.metrics import Metrics
from fabriclab.api.source import Source
from fabriclab.model.cluster import find_port


def scraping(m: Metrics, stop: threading.Event, took: list[float], interval: float) -> None:
    """Scrape every ``interval`` seconds until ``stop`` (0: one after the other)."""
    while not stop.is_set():
        t = time.perf_counter()
        for _ in m.scrape():
            pass
        took.append(time.perf_counter() - t)
        stop.wait(max(0.0, interval - took[-1]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--interval", type=float, nargs="+", default=[1.0, 0.0])
    a = ap.parse_args()
    if shutil.which("ibnetdiscover") is None:
        raise SystemExit("ibnetdiscover not found: run scripts/install-system-deps.sh")
    work = Path(tempfile.mkdtemp(prefix="fl-scrape-"))
    spec, cluster = bench_fabric(work)
    fabric = cluster.fabric
    want = len(fabric.switches()) + len(fabric.cas())
    start, _ = find_port(cluster, None)
    name = f"flscrape{os.getpid()}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IBSIM_", "SIM_"))}
    env.pop("LD_PRELOAD", None)
    env["FABRICLAB_STATE_DIR"] = str(work / "state")
    os.environ["FABRICLAB_STATE_DIR"] = env["FABRICLAB_STATE_DIR"]  # for Source.remote
    print(
        f"fabric: {len(cluster.trays)} trays, {len(fabric.cas())} HCAs, "
        f"{len(fabric.switches())} switches, {fabric.link_count()} links"
    )
    _fabriclab(env, "up", str(spec), "--name", name, "--detach")
    ok = True
    try:
        tenv = {**env, **_tool_env(name, start.node.desc, work)}
        m = Metrics(Source.remote(name))
        for _ in m.scrape():  # the labels made once, before any timing
            pass
        for interval in a.interval:
            alone: list[float] = []
            during: list[float] = []
            scrapes: list[float] = []
            for _ in range(a.rounds):
                s = scan(tenv, work)
                ok &= s.rc == 0 and s.nodes == want
                alone.append(s.seconds)
                stop = threading.Event()
                th = threading.Thread(target=scraping, args=(m, stop, scrapes, interval))
                th.start()
                try:
                    s = scan(tenv, work)
                finally:
                    stop.set()
                    th.join()
                ok &= s.rc == 0 and s.nodes == want
                during.append(s.seconds)
            med = statistics.median
            print(f"scrapes every {interval:g} s:")
            print(
                f"  ibnetdiscover alone:          {med(alone):6.2f} s  ({a.rounds} scans, median)"
            )
            print(
                f"  ibnetdiscover while scraping: {med(during):6.2f} s  "
                f"({len(scrapes)} scrapes meanwhile, {med(scrapes):.2f} s each, median)"
            )
            print(f"  ratio {med(during) / med(alone):.2f}   (goal <= 1.10 at a scrape a second)")
        print(f"every scan found all {want} nodes: {ok}")
        print(f"load: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    finally:
        _fabriclab(env, "down", "--name", name)
        shutil.rmtree(work, ignore_errors=True)
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
