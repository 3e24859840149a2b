"""The web view's first draw in Debian's headless Chromium (Playwright): from the
navigation to cytoscape's first ``render``, the graph's JSON fetched on the way, for
gb200-su (its full view: every switch, tray and cable) and for the 8,192-tray fabric
(summarised: its pods), each with a ring of traffic running; a fresh browser context
(no cache) each round, the median of the rounds printed, and the first round apart
(it pays for the server's first look at the layout).  Also the 8,192-tray fabric's
hosts-per-leaf summary, once, for comparison.  Targets: gb200-su <= 2 s, the 8,192-tray
fabric summarised <= 5 s.

    python bench/web.py [--rounds 5] [--trays 8192]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from api_fabric import api_fabric
from web_page import chromium, first_draw, locked_source, serve


def rounds(browser, url: str, n: int) -> list[float]:
    """Seconds to the first draw of ``url``, ``n`` times, each in a fresh context."""
    out = []
    for _ in range(n):
        ctx = browser.new_context(viewport={"width": 1600, "height": 900})
        try:
            out.append(first_draw(ctx.new_page(), url, timeout_ms=120_000))
        finally:
            ctx.close()
    return out


def fabric(spec: str, trays: int | None, n: int, extra: list[str], every: int) -> None:
    lock = threading.Lock()
    with tempfile.TemporaryDirectory() as tmp:
        t = time.monotonic()
        with api_fabric(Path(tmp), spec=spec, trays=trays) as f:
            up = time.monotonic() - t
            lay = f.source.layout()
            ring = lay.trays[::every]  # across racks, through the spines (and cores)
            with lock:
                f.live.traffic_request("ring", [",".join(ring)], {"rate": "200Gb/s"})
                f.live.advance(1.0)
            print(
                f"{spec}: {len(lay.trays)} trays, {int(lay.node_switch.sum())} switches, "
                f"{len(lay.links)} links (up in {up:.1f} s; a ring of traffic over {len(ring)} trays)"
            )
            with serve(locked_source(f.source, lock)) as url, chromium() as browser:
                for query in ["", *extra]:
                    times = rounds(browser, url + query, n if not query else 1)
                    page = query or "auto view"
                    med = statistics.median(times[1:] or times)
                    print(
                        f"  first draw ({page}): median {med:.2f} s over {len(times[1:]) or 1} "
                        f"rounds, first round {times[0]:.2f} s; all: "
                        + " ".join(f"{x:.2f}" for x in times)
                    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--trays", type=int, default=8192)
    a = ap.parse_args()
    fabric("gb200-su", None, a.rounds, [], 4)
    fabric("gb200-su", a.trays, a.rounds, ["?view=summary"], 18)


if __name__ == "__main__":
    main()
