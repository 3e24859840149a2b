"""The model's bus bandwidth for the configurations docs/collectives.md sets beside
published figures: all-reduce and all-gather of 8 GiB (nccl-tests' -e 8G row)
inside one GB200 NVL72 domain (2, 8 and 72 GPUs), across InfiniBand (GB200 trays of
different racks, 4 GPUs and 4 ConnectX-7 each; DGX H100 nodes, 8 GPUs and 8 HCAs), and
one DGX H100 node.  NCCL's own choice of algorithm and protocol, nothing set.

    python bench/calibration.py [--json]
"""

from __future__ import annotations

import argparse
import json

from fabriclab.model.build import build
from fabriclab.sim.fabric.datapaths import Snapshot
from fabriclab.sim.live.collectives import run
from fabriclab.spec.load import load_spec

SIZE = 8 << 30
# (label, spec, trays to scale it to, nodes, GPUs per node)
CASES = (
    ("GB200, 2 GPUs, one tray (NVLink)", "gb200-su", None, "gb-r01-t01:0-1", None),
    ("GB200, 8 GPUs, 2 trays of one NVL72 (MNNVL)", "gb200-su", None, "gb-r01-t[01-02]", None),
    ("GB200, 72 GPUs, one NVL72 rack (MNNVL)", "gb200-su", None, "gb-r01-t[01-18]", None),
    ("GB200, 2 trays of 2 racks (IB, 4 HCAs each)", "gb200-su", 288, "gb-r[01-02]-t01", None),
    ("GB200, 4 trays of 4 racks (IB)", "gb200-su", 288, "gb-r[01-04]-t01", None),
    ("GB200, 8 trays of 8 racks (IB)", "gb200-su", 288, "gb-r[01-08]-t01", None),
    ("GB200, 16 trays of 16 racks (IB)", "gb200-su", 288, "gb-r[01-16]-t01", None),
    ("H100, 8 GPUs, one node (NVLink)", "h100-su", None, "dgx001", None),
    ("H100, 2 nodes (IB, 8 HCAs each)", "h100-su", None, "dgx[001-002]", None),
    ("H100, 4 nodes (IB)", "h100-su", None, "dgx[001-004]", None),
    ("H100, 8 nodes (IB)", "h100-su", None, "dgx[001-008]", None),
    ("H100, 16 nodes (IB)", "h100-su", None, "dgx[001-016]", None),
)


def table() -> list[dict]:
    """Each case: its label, ranks, and for all-reduce and all-gather the bus bandwidth
    (GB/s) and what NCCL would run."""
    fabrics: dict = {}
    out = []
    for label, spec, trays, nodes, per in CASES:
        key = (spec, trays)
        if key not in fabrics:
            cluster = build(load_spec(spec, trays=trays))
            sim = run.routed_fabric(cluster)
            fabrics[key] = (cluster, sim, Snapshot(sim))
        cluster, sim, snap = fabrics[key]
        row: dict = {"case": label}
        for op in ("all-reduce", "all-gather"):
            d = run.estimate(cluster, sim, run.Request(op, SIZE, nodes, per), snap)
            row["ranks"] = d["ranks"]
            row[op] = {
                "busbw_GBps": round(d["busbw_GBps"], 1),
                "by": f"{d['algorithm']}/{d['protocol']}",
            }
        out.append(row)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rows = table()
    if a.json:
        print(json.dumps(rows, indent=1))
        return
    for r in rows:
        ar, ag = r["all-reduce"], r["all-gather"]
        print(
            f"{r['case']:<48} {r['ranks']:>4} ranks  all-reduce {ar['busbw_GBps']:7.1f} "
            f"({ar['by']})  all-gather {ag['busbw_GBps']:7.1f} ({ag['by']})"
        )


if __name__ == "__main__":
    main()
