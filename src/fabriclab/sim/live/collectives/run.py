"""A collective estimated on a fabric, as ``fabriclab collective`` prints it and as a
running fabric answers it: the fabric routed (a spec: as a subnet manager at its first
tray leaves it, :mod:`...sim.fabric.routed`; a running fabric: its own tables), the
ranks placed, the knobs read, and the result as JSON."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ....errors import InputError, Problem
from ....model.cluster import Cluster
from ...fabric import routed
from ...fabric.datapaths import Snapshot
from ...fabric.state import SimFabric
from . import sharp, tuning
from .carry import port_loads
from .estimate import ALGO_NAMES, OPS, PROTO_NAMES, Estimate, Plan
from .knobs import Knobs
from .placement import place


@dataclass(frozen=True)
class Request:
    """What to estimate: the operation, its size (bytes), the nodes, GPUs per node, the
    algorithm and protocol asked for ('auto': NCCL's choice) and NCCL's variables."""

    op: str
    size: int
    nodes: str
    gpus_per_node: int | None = None
    algo: str = "auto"
    proto: str = "auto"
    env: Mapping[str, str] | None = None

    def check(self) -> None:
        if self.op not in OPS:
            raise InputError(
                [Problem("--op", f"unknown operation {self.op!r}; one of: {', '.join(OPS)}")]
            )
        if self.algo != "auto" and self.algo not in ALGO_NAMES:
            raise InputError(
                [
                    Problem(
                        "--algo",
                        f"unknown algorithm {self.algo!r}; one of: auto, {', '.join(ALGO_NAMES)}",
                    )
                ]
            )
        if self.proto != "auto" and self.proto not in PROTO_NAMES:
            raise InputError(
                [
                    Problem(
                        "--proto",
                        f"unknown protocol {self.proto!r}; one of: auto, {', '.join(PROTO_NAMES)}",
                    )
                ]
            )
        if self.size < 0:
            raise InputError([Problem("--size", "a size is 0 or more bytes")])
        if self.gpus_per_node is not None and self.gpus_per_node < 1:
            raise InputError([Problem("--gpus-per-node", "want 1 or more")])


def routed_fabric(cluster: Cluster) -> SimFabric:
    """The spec's fabric as a subnet manager at its first tray leaves it."""
    sim = SimFabric(cluster.fabric)
    start, _ = cluster.locate(None)
    if start is not None:
        routed.configure(sim, sim.port_of(start))
    return sim


def plan(cluster: Cluster, sim: SimFabric, snap: Snapshot, req: Request, able=None) -> Plan:
    """The plan of ``req`` on ``sim`` (``snap`` its snapshot)."""
    req.check()
    func = OPS[req.op][0] or "AllReduce"
    knobs = Knobs.read(req.env or {}, func)
    pl = place(cluster, sim, req.nodes, req.gpus_per_node, knobs.hca)
    if pl.nranks < 2 and req.op != "broadcast":
        raise InputError(
            [Problem("--nodes", f"{req.op} needs 2 or more ranks; these nodes give {pl.nranks}")]
        )
    if able is None and knobs.collnet:
        able = sharp.capable(sim)
    spread = bool(getattr(sim.fabric, "adaptive_routing", False)) and knobs.adaptive
    return Plan(snap, pl, req.op, knobs, req.algo, req.proto, able, spread)


def to_json(snap: Snapshot, p: Plan, est: Estimate) -> dict:
    """The estimate as ``collective --json`` prints it."""
    return {
        "op": est.op,
        "gpu": p.pl.gpu_name,
        "size": est.size,
        "ranks": est.nranks,
        "nodes": p.pl.nnodes,
        "time_s": est.time_us / 1e6,
        "algbw_GBps": est.algbw_GBps,
        "busbw_GBps": est.busbw_GBps,
        "algorithm": est.algorithm,
        "protocol": est.protocol,
        "channels": est.channels,
        "why": est.why,
        "choices": [
            {
                "algorithm": tuning.ALGOS[c.algo],
                "protocol": tuning.PROTOS[c.proto],
                "time_s": c.time_us / 1e6,
                "bus_GBps": c.bus_GBps,
            }
            for c in sorted(est.choices, key=lambda c: c.time_us)
        ],
        "links": port_loads(snap, est.fabric, est.flow_bytes),
    }


def sweep(
    cluster: Cluster,
    sim: SimFabric,
    snap: Snapshot,
    req: Request,
    sizes: list[int],
    links: bool = False,
) -> tuple[list[Estimate], list[dict]]:
    """``req`` at each of ``sizes``: the estimates and their JSON (the loaded ports on
    the first one's only, when ``links``)."""
    p = plan(cluster, sim, snap, req)
    ests = [p.estimate(s) for s in sizes]
    docs = []
    for k, e in enumerate(ests):
        d = to_json(snap, p, e)
        if not (links and k == 0):
            d.pop("links")
        docs.append(d)
    return ests, docs


def estimate(cluster: Cluster, sim: SimFabric, req: Request, snap: Snapshot | None = None) -> dict:
    """``req`` on ``sim``, as JSON."""
    snap = snap or Snapshot(sim)
    p = plan(cluster, sim, snap, req)
    return to_json(snap, p, p.estimate(req.size))
