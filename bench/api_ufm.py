"""The UFM-compatible API on the 8,192-tray fabric (``gb200-su``, 8,192 trays: 36,194
nodes, 258,884 ports): ``GET /ufmRest/resources/ports`` of every port, then systems and
links, in process (FastAPI's TestClient on a live fabric of this process, as
tests/api_fabric.py makes it).  Prints each answer's size and the median of its rounds
(the first, which renders the layout's part once, separately); the target for the
ports is 2 s.

    python bench/api_ufm.py [--trays 8192] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from api_fabric import api_fabric
from fastapi.testclient import TestClient

from fabriclab.api.ufm import routes


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trays", type=int, default=8192)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    with (
        tempfile.TemporaryDirectory() as tmp,
        api_fabric(Path(tmp), spec="gb200-su", trays=args.trays) as f,
    ):
        layout = f.source.layout()
        print(f"gb200-su, {args.trays} trays: {layout.node_count} nodes, {layout.port_count} ports")
        routes.STATE_MAX_AGE = 0.0  # every request reads the state afresh
        client = TestClient(f.app())
        for path in (
            "/ufmRest/resources/ports",
            "/ufmRest/resources/systems",
            "/ufmRest/resources/links",
        ):
            times = []
            size = 0
            count = 0
            for i in range(args.rounds + 1):
                if i:
                    # a new state each round: read and rendered again, not cached
                    f.live.advance(1.0)
                t = time.monotonic()
                r = client.get(path)
                took = time.monotonic() - t
                assert r.status_code == 200, r.text[:200]
                if i == 0:
                    count = len(r.json())
                    size = len(r.content)
                    print(f"{path}: first {took:.2f} s ({count} records, {size / 1e6:.1f} MB)")
                else:
                    times.append(took)
            print(f"{path}: median {statistics.median(times):.2f} s of {args.rounds} rounds")


if __name__ == "__main__":
    main()
