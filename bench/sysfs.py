"""Write a large tray's /sys/class/infiniband tree (32 HCAs, libibumad's most) the way
``fabriclab sysfs`` and the host library's trees do: the first write, a refresh where
nothing changed, and a refresh where every port's counters moved (what traffic does each
period).  Prints the figures (wall time, best of ``--repeat``), to compare with the
shortest ``--period`` (50 ms).

    python bench/sysfs.py [--hcas 32] [--repeat 5]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from fabriclab.sim.host import sysfs


def view(hcas: int, tick: int) -> dict:
    """A tray view (:func:`fabriclab.sim.host.hostview.tray_view`'s shape) of ``hcas``
    one-port ConnectX-7s whose counters all read ``tick``."""
    counters = {counter: tick for counter, _ext in sysfs.COUNTERS.values()}
    out = []
    for i in range(hcas):
        guid = 0x0002C90300000000 + i
        out.append(
            {
                "name": f"mlx5_{i}",
                "device_id": 0x1021,
                "node_guid": guid,
                "sys_image_guid": guid,
                "desc": f"bench-tray mlx5_{i}",
                "revision": 0,
                "ports": [
                    {
                        "num": 1,
                        "lid": 100 + i,
                        "lmc": 0,
                        "sm_lid": 1,
                        "sm_sl": 0,
                        "state": 4,
                        "phys": 5,
                        "cap_mask": 0xA751E848,
                        "gid_prefix": 0xFE80000000000000,
                        "guid": guid,
                        "speed": "NDR",
                        "lanes": 4,
                        "pkeys": [0xFFFF] + [0] * 127,
                        "counters": counters,
                        "counters_ext": counters,
                    }
                ],
            }
        )
    return {"hcas": out}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hcas", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    first = same = moved = float("inf")
    files = 0
    for r in range(a.repeat):
        with tempfile.TemporaryDirectory(prefix="fabriclab-bench-") as d:
            tree = sysfs.Tree(Path(d) / "sys")
            t0 = time.perf_counter()
            tree.claim()
            files = tree.update(sysfs.render(view(a.hcas, 0)))
            t1 = time.perf_counter()
            assert tree.update(sysfs.render(view(a.hcas, 0))) == 0
            t2 = time.perf_counter()
            n = tree.update(sysfs.render(view(a.hcas, r + 1)))
            t3 = time.perf_counter()
            assert n == a.hcas * len(sysfs.COUNTERS), n
            first, same, moved = min(first, t1 - t0), min(same, t2 - t1), min(moved, t3 - t2)
    print(f"tree: {a.hcas} HCAs, {files} files; best of {a.repeat}")
    print(f"first write:        {first * 1000:7.1f} ms")
    print(f"refresh, unchanged: {same * 1000:7.1f} ms")
    print(f"refresh, counters:  {moved * 1000:7.1f} ms   ({a.hcas * len(sysfs.COUNTERS)} files)")


if __name__ == "__main__":
    main()
