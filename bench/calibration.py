"""The model's bus bandwidth beside published nccl-tests figures: the calibration table
of docs/collectives.md, printed as it stands there (``--markdown``;
tests/test_collectives.py checks the page against it).

Each case runs the model as the published run ran: the operation, 8 GiB (nccl-tests'
``-e 8G`` row) unless the source's row was another size, and ``NCCL_ALGO`` where the
source forced an algorithm; NCCL's own choice otherwise.

    python bench/calibration.py [--markdown]
"""

from __future__ import annotations

import argparse
import functools
from dataclasses import dataclass, field

from fabriclab.model.build import build
from fabriclab.sim.fabric.datapaths import Snapshot
from fabriclab.sim.live.collectives import run
from fabriclab.spec.load import load_spec

GIB = 1 << 30
AZURE_GB200 = (
    "Azure/AI-benchmarking-guide, Azure_Results/ND_GB200_v6_results.md @2a370be6 "
    "(NCCL 2.25.1, Ring, in place)"
)
COREWEAVE = (
    "coreweave/nccl-tests README.md @cb865533, GB200 single rack (NCCL 2.26.2, out of place)"
)
LIXUEDUAN = (
    "lixueduan.com/posts/ai/13-gb200-mnnvl-nccl-test (MNNVL, 2 trays; operation and size not given)"
)
AZURE_GB300 = (
    "Azure ai-infrastructure-on-azure, expected inter-rack all-reduce baseline, NDR "
    "4 x 400G a tray (GB300: a baseline, not a run)"
)
AZURE_H100 = (
    "Azure/AI-benchmarking-guide, Azure_Results/ND_H100_v5_results.md @8fd0c6e1 "
    "(NCCL 2.18.5, NVLS, in place); NVIDIA/nccl-tests issue 212: ~480"
)
NVIDIA_AG = 'NVIDIA/nccl-tests issue 326: ~360 on 8 H100, "exactly what we\'d expect"'
COREWEAVE_H100 = (
    "coreweave/nccl-tests README.md @cb865533, 8 H100 nodes with SHARP (CollNetChain), out of place"
)
VOLTAGE = (
    "ZiyanIshani/vpbenchmarking @e55fe749, 4 H100 nodes, NCCL 2.24.3 (3.2 Tb/s of IB a "
    "node; its HCAs in use unclear)"
)


@dataclass(frozen=True)
class Case:
    """A published run and the model's version of it."""

    label: str
    spec: str
    trays: int | None
    nodes: str
    op: str
    published: float
    source: str
    size: int = 8 * GIB
    env: dict = field(default_factory=dict)


CASES = (
    Case("GB200, 4 GPUs, one tray (NVLink)", "gb200-su", None, "gb-r01-t01", "all-reduce",
         679.61, AZURE_GB200, env={"NCCL_ALGO": "ring"}),
    Case("GB200, 8 GPUs, 2 trays of one NVL72 (MNNVL)", "gb200-su", None, "gb-r01-t[01-02]",
         "all-reduce", 811.0, LIXUEDUAN),
    Case("GB200, 72 GPUs, one NVL72 rack (MNNVL)", "gb200-su", None, "gb-r01-t[01-18]",
         "all-reduce", 834.57, COREWEAVE),
    Case("GB200, 2 trays of 2 racks (IB, 4 HCAs each)", "gb200-su", 288, "gb-r[01-02]-t01",
         "all-reduce", 200.0, AZURE_GB300, size=16 * GIB),
    Case("H100, 8 GPUs, one node (NVLink)", "h100-su", None, "dgx001", "all-reduce",
         478.87, AZURE_H100),
    Case("H100, 8 GPUs, one node (NVLink)", "h100-su", None, "dgx001", "all-gather",
         360.0, NVIDIA_AG),
    Case("H100, 4 nodes (IB, 8 HCAs each)", "h100-su", None, "dgx[001-004]", "all-reduce",
         330.93, VOLTAGE),
    Case("H100, 8 nodes (IB, 8 HCAs each)", "h100-su", None, "dgx[001-008]", "all-reduce",
         386.56, COREWEAVE_H100),
)  # fmt: skip


@functools.cache
def _fabric(spec: str, trays: int | None):
    cluster = build(load_spec(spec, trays=trays))
    sim = run.routed_fabric(cluster)
    return cluster, sim, Snapshot(sim)


def model(case: Case) -> dict:
    """The model's estimate of ``case`` (as ``collective --json``)."""
    cluster, sim, snap = _fabric(case.spec, case.trays)
    req = run.Request(case.op, case.size, case.nodes, env=case.env)
    return run.estimate(cluster, sim, req, snap)


def markdown() -> list[str]:
    """The calibration table's lines."""
    out = [
        "| configuration | operation, size | model: NCCL's choice | model busbw (GB/s) "
        "| published busbw (GB/s) | model / published | source |",
        "| --- | --- | --- | ---: | ---: | ---: | --- |",
    ]
    for c in CASES:
        d = model(c)
        algo = f"{d['algorithm']}/{d['protocol']}"
        if c.env:
            algo += " (" + ", ".join(f"{k}={v}" for k, v in c.env.items()) + ")"
        out.append(
            f"| {c.label} | {c.op}, {c.size // GIB} GiB | {algo} | {d['busbw_GBps']:.1f} "
            f"| {c.published:g} | {d['busbw_GBps'] / c.published:.2f} | {c.source} |"
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--markdown", action="store_true", help="the table as the docs hold it")
    a = ap.parse_args()
    if a.markdown:
        print("\n".join(markdown()))
        return
    for c in CASES:
        d = model(c)
        print(
            f"{c.label:<46} {c.op:<10} model {d['busbw_GBps']:7.1f} "
            f"({d['algorithm']}/{d['protocol']})  published {c.published:7.2f}  "
            f"ratio {d['busbw_GBps'] / c.published:.2f}"
        )


if __name__ == "__main__":
    main()
