"""Hostile inputs (tests/hostile_cases.py), each run as a real ``fabriclab`` child:
per case, wall time, peak RSS and what the user saw.  Every child runs under an
address-space limit and a timeout, so an old or broken checkout cannot hurt the machine:
such cases are reported as "timeout" or "killed at limit".

    python bench/hostile.py [--pythonpath SRC] [--timeout 60] [--limit-gb 4] [--only NAME,...]

``--pythonpath`` runs another checkout's sources (e.g. the original code) with this
interpreter; ``--markdown`` prints a table for notes.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import hostile_cases as hc


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--pythonpath", default=None, help="run these sources instead of the installed ones"
    )
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--limit-gb", type=float, default=4.0, help="address-space limit per case")
    ap.add_argument("--only", default="", help="comma-separated case names")
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    only = set(filter(None, a.only.split(",")))
    cases = [c for c in hc.CASES if not only or c.name in only]
    if a.markdown:
        print("| case | time (s) | peak RSS (MB) | outcome |\n|---|---:|---:|---|")
    else:
        print(f"{'case':34s} {'time s':>8s} {'RSS MB':>8s}  outcome")
    for case in cases:
        with tempfile.TemporaryDirectory(prefix="fabriclab-hostile-") as d:
            case.write(Path(d))
            o = hc.run(
                case,
                Path(d),
                pythonpath=a.pythonpath,
                timeout=a.timeout,
                as_limit=int(a.limit_gb * (1 << 30)),
            )
        wrong = hc.problems(case, o)
        verdict = o.summary() + ("" if not wrong else f" ({'; '.join(wrong)})"[:110])
        if a.markdown:
            print(f"| {case.name} | {o.wall:.2f} | {o.rss_mb:.0f} | {verdict} |")
        else:
            print(f"{case.name:34s} {o.wall:8.2f} {o.rss_mb:8.0f}  {verdict}", flush=True)


if __name__ == "__main__":
    main()
