"""What watching the fabric costs the tools: the real ``ibnetdiscover`` of the 8,192-tray
fabric (32,768 HCAs) with nobody scraping, and while ``/metrics`` is scraped every
``--every`` seconds (each scrape makes the server walk its 260,000 ports once, for the
``watch`` state), rounds alternating, medians.  Goal: within 10 % of its time without.

The fabric is served by ``fabriclab up --api`` (no subnet manager: ibnetdiscover walks it
by directed routes, as on a fabric before the SM has run).

    python bench/api_load.py [--trays 8192] [--rounds 3] [--every 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

FAB = [sys.executable, "-m", "fabriclab.cli"]


def cli(*args: str, env: dict) -> str:
    return subprocess.run(
        [*FAB, *args], env=env, check=True, capture_output=True, text=True, timeout=900
    ).stdout


def discover(env: dict, tray: str, name: str) -> float:
    t0 = time.perf_counter()
    subprocess.run(
        [*FAB, "exec", "--name", name, tray, "--", "ibnetdiscover"],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        timeout=900,
    )
    return time.perf_counter() - t0


class Scraper(threading.Thread):
    """Scrapes ``url`` every ``every`` seconds until stopped; the scrapes' times."""

    def __init__(self, url: str, every: float):
        super().__init__(daemon=True)
        self.url, self.every = url, every
        self.done = threading.Event()
        self.times: list[float] = []
        self.sizes: list[int] = []

    def run(self) -> None:
        while not self.done.is_set():
            t0 = time.perf_counter()
            with urllib.request.urlopen(self.url, timeout=120) as r:
                self.sizes.append(len(r.read()))
            took = time.perf_counter() - t0
            self.times.append(took)
            self.done.wait(max(0.0, self.every - took))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trays", type=int, default=8192)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--every", type=float, default=5.0, help="seconds between scrapes")
    a = ap.parse_args()
    state = tempfile.mkdtemp(prefix="fl-bench-")
    env = {**os.environ, "FABRICLAB_STATE_DIR": state}
    name = "apiload"
    t0 = time.perf_counter()
    cli("up", "gb200-su", "--trays", str(a.trays), "--name", name, "--detach", "--api",
        "127.0.0.1:0", env=env)  # fmt: skip
    print(f"fabric gb200-su x {a.trays} trays up with its API in {time.perf_counter() - t0:.1f} s")
    try:
        import json

        url = json.loads(cli("status", "--json", env=env))[0]["api"] + "metrics"
        tray = "gb-r01-t01"
        discover(env, tray, name)  # warm: the tray's tree, the pages
        alone, watched, scrapes = [], [], []
        for r in range(a.rounds):
            alone.append(discover(env, tray, name))
            s = Scraper(url, a.every)
            s.start()
            while not s.times:  # a first scrape done: the API has its layout
                time.sleep(0.05)
            watched.append(discover(env, tray, name))
            s.done.set()
            s.join()
            scrapes += s.times
            print(
                f"round {r + 1}: ibnetdiscover alone {alone[-1]:.2f} s, while scraped "
                f"{watched[-1]:.2f} s ({len(s.times)} scrapes, {s.sizes[-1] / 1e6:.0f} MB each)"
            )
        ma, mw = statistics.median(alone), statistics.median(watched)
        print(
            f"ibnetdiscover, {a.trays} trays: alone median {ma:.2f} s "
            f"[{min(alone):.2f}-{max(alone):.2f}], scraped every {a.every:g} s median "
            f"{mw:.2f} s [{min(watched):.2f}-{max(watched):.2f}]: {mw / ma:.3f}x "
            f"(goal <= 1.10x)"
        )
        print(
            f"a full scrape while ibnetdiscover ran: median {statistics.median(scrapes):.2f} s "
            f"[{min(scrapes):.2f}-{max(scrapes):.2f}] over {len(scrapes)} scrapes"
        )
    finally:
        subprocess.run([*FAB, "down", "--name", name], env=env, capture_output=True)
        shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    main()
