"""A full ``/metrics`` scrape of the 8,192-tray fabric (about 259,000 ports, 197,000 of
them cabled: some 5.5 million samples) with a ring of traffic running over every HCA.
Targets: a scrape <= 2 s and <= 200 MB of extra memory in the API's process.

The fabric is live in this process (as tests/api_fabric.py makes it: the API's Source
sends its admin requests straight to the server's answering code).  A scrape is two
steps in two processes, measured apart here: the server's (the admin op ``watch``: its
walk over every port and the ``.npy`` file written) and the API's (that file read, the
text written, plain and gzipped), each with the peak RSS it adds
(``/proc/self/clear_refs`` resets the peak first).  Medians of ``--rounds`` rounds; the
clock moves between them so that the counters change.

    python bench/api_metrics.py [--trays 8192] [--preset gb200-su] [--rounds 5]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from api_fabric import api_fabric

from fabriclab.api.metrics import Metrics
from fabriclab.api.metrics_text import gzipped
from fabriclab.api.source import Source


def status_kb(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


class Took(float):
    """Wall seconds, with the process's CPU seconds beside them (the machine may be
    shared: CPU time is what the work itself cost; the gzip thread's adds to it)."""

    cpu: float


def peak(fn):
    """``fn()``, its time (:class:`Took`) and the peak RSS (MB) it added."""
    gc.collect()
    rss0 = status_kb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    t, c = time.perf_counter(), time.process_time()
    out = fn()
    took = Took(time.perf_counter() - t)
    took.cpu = time.process_time() - c
    return out, took, (status_kb("VmHWM") - rss0) / 1024


def consume(chunks) -> tuple[int, int]:
    """The bytes and lines of a scrape, read as a client reads it (nothing kept)."""
    n = size = 0
    for c in chunks:
        size += len(c)
        n += c.count(b"\n")
    return size, n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="gb200-su")
    ap.add_argument("--trays", type=int, default=8192)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d, api_fabric(Path(d), a.preset, a.trays) as f:
        lay = f.source.layout()
        print(
            f"fabric {a.preset} x {a.trays} trays: {lay.node_count} nodes, "
            f"{lay.port_count} ports (built and routed in {time.perf_counter() - t0:.1f} s)"
        )
        t1 = time.perf_counter()
        # every HCA sends to the next (as bench/traffic.py's ring), at the links' rates
        ring = f.live.traffic.ring([n.ports[1] for n in f.live.sim.nodes if not n.is_switch])
        f.live.advance(1.0)
        print(f"ring of traffic: {len(ring)} flows (started in {time.perf_counter() - t1:.1f} s)")

        # the API's side alone: its Source gets the server's answer to watch made before
        answers: dict = {}
        server_send = f.source._send

        def send(req: dict):
            if req.get("op") == "watch" and req.get("part") == "state":
                return answers["watch"]
            return server_send(req)

        api = Source(f.source.name, send, f.source.events_path)
        m = Metrics(api)
        answers["watch"] = server_send({"op": "watch", "part": "state"})
        gc.collect()
        rss0 = status_kb("VmRSS")
        _, t_layout, _ = peak(api.layout)
        gc.collect()
        print(
            f"layout read by the API's Source (shared with its other parts): {t_layout:.2f} s, "
            f"{(status_kb('VmRSS') - rss0) / 1024:.0f} MB kept"
        )
        rss0 = status_kb("VmRSS")
        _, t_first, mb_first = peak(lambda: consume(m.scrape()))
        gc.collect()
        kept = (status_kb("VmRSS") - rss0) / 1024
        print(
            f"first scrape (labels, info series and the state made or read): "
            f"{t_first:.2f} s (cpu {t_first.cpu:.2f}), +{mb_first:.0f} MB peak, "
            f"{kept:.0f} MB kept"
        )
        rows: dict[str, list[float]] = {}
        whole = Metrics(f.source)  # server and API in turn, as in one process
        consume(whole.scrape())

        def note(key: str, v: float) -> None:
            rows.setdefault(key, []).append(v)
            if isinstance(v, Took):
                rows.setdefault(key + " cpu", []).append(v.cpu)

        size = gzsize = lines = 0
        for _ in range(a.rounds):
            f.live.advance(1.0)
            ans, t, mb = peak(lambda: server_send({"op": "watch", "part": "state"}))
            answers["watch"] = ans
            note("server watch s", t)
            note("server watch MB", mb)
            api._state = None  # (no state read kept between the steps)
            (size, lines), t, mb = peak(lambda: consume(m.scrape()))
            note("api scrape s", t)
            note("api scrape MB", mb)
            api._state = None
            _, t, mb = peak(lambda: api.state())
            note("api read s", t)
            api._state = None
            (gzsize, _), t, mb = peak(lambda: consume(gzipped(m.scrape())))
            note("api gzip s", t)
            note("api gzip MB", mb)
            _, t, _ = peak(lambda: consume(whole.scrape()))
            note("in-process s", t)
        med = {k: statistics.median(v) for k, v in rows.items()}

        def secs(key: str) -> str:
            return f"{med[key]:.2f} s (cpu {med[key + ' cpu']:.2f})"

        print(
            f"one scrape: {lines} lines, {size / 1e6:.0f} MB of text ({gzsize / 1e6:.1f} MB gzipped)"
        )
        print(
            f"server side, admin op watch (walk + .npy file): {secs('server watch s')}, "
            f"+{med['server watch MB']:.0f} MB peak"
        )
        print(f"API: state file read:                  {secs('api read s')}")
        print(
            f"API: scrape (read + text):             {secs('api scrape s')}, "
            f"+{med['api scrape MB']:.0f} MB peak   (target <= 200 MB)"
        )
        print(
            f"API: scrape gzipped:                   {secs('api gzip s')}, "
            f"+{med['api gzip MB']:.0f} MB peak"
        )
        full = med["server watch s"] + med["api scrape s"]
        print(f"full scrape, server + API:             {full:.2f} s   (target <= 2 s)")
        print(
            f"full scrape, gzipped:                  {med['server watch s'] + med['api gzip s']:.2f} s"
        )
        print(f"full scrape in one process (measured): {secs('in-process s')}")
        print(f"rounds {a.rounds}; figures are medians")


if __name__ == "__main__":
    main()
