"""A collective on a running fabric (the admin socket's ``collective``): estimated over
the forwarding tables its subnet manager wrote and the faults it has now, and with
``apply`` its bytes put on the fabric as flows of the traffic engine, so that the
counters move on exactly the ports the estimate names."""

from __future__ import annotations

import math

from ....errors import InputError, Problem
from ...fabric.datapaths import Snapshot
from .estimate import Estimate
from .run import Request, sweep

MAX_FLOW_BYTES = float(1 << 62)  # what a flow's byte count (int64) holds, with room


def answer(live, r) -> dict:
    """Request ``r`` (:class:`...sim.live.admin_model.Collective`) on ``live``."""
    live.catch_up()
    eng = live.traffic
    sim, cluster = live.sim, live.resolver.cluster
    if eng is not None:
        eng.advance()
        snap = eng.snapshot()  # kept up to date by the engine: no walk of every port
    else:
        snap = Snapshot(sim)
    req = Request(r.collective, r.sizes[0], r.nodes, r.gpus_per_node, r.algo, r.proto, r.env)
    ests, docs = sweep(cluster, sim, snap, req, r.sizes, r.links)
    out: dict = {"estimates": docs}
    if r.apply:
        ids = apply(live, snap, ests, r.apply)
        out["flows"] = {"first": ids[0] if ids else None, "count": len(ids)}
    return out


def apply(live, snap: Snapshot, ests: list[Estimate], times: int) -> range:
    """Start the flows of ``ests`` on the traffic engine, each size ``times`` over, the
    bytes of flows between the same two HCAs summed; their ids."""
    eng = live.traffic
    if eng is None:
        raise InputError([Problem("apply", "this fabric has no traffic engine")])
    total: dict[tuple[int, int], float] = {}
    for e in ests:
        fab = e.fabric
        if fab is None or e.flow_bytes is None:
            continue
        if fab.parent is not None:
            raise InputError(
                [
                    Problem(
                        "apply",
                        "the traffic engine routes by the forwarding tables, not "
                        "adaptively: set NCCL_IB_ADAPTIVE_ROUTING=0 to apply on this fabric",
                    )
                ]
            )
        ends = [snap.ports[int(i)] for i in fab.pattern.dst]
        if any(p is None or p.node.is_switch for p in ends):
            raise InputError(
                [
                    Problem(
                        "apply",
                        f"{e.algorithm}'s flows end in switches (SHARP): the traffic "
                        "engine carries flows between HCAs; leave out --apply or NCCL_COLLNET_ENABLE",
                    )
                ]
            )
        for s, d, b in zip(
            fab.pattern.src.tolist(), fab.pattern.dst.tolist(), e.flow_bytes.tolist(), strict=True
        ):
            total[(s, d)] = total.get((s, d), 0.0) + b * times
    most = max(total.values(), default=0.0)
    if most > MAX_FLOW_BYTES:
        raise InputError(
            [Problem("apply", f"{most:.3g} bytes on one flow: more than {MAX_FLOW_BYTES:.3g}")]
        )
    pairs = [(snap.ports[s], snap.ports[d]) for s, d in total]
    sizes = [max(1, math.ceil(b)) for b in total.values()]
    if not pairs:
        return range(0)
    ids = eng.add_each(pairs, sizes, [None] * len(pairs))
    live.writer.flows_saved = False
    live.save()
    return ids
