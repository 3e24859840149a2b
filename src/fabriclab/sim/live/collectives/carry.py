"""An algorithm's flows on the fabric: routed over the forwarding tables (or spread by
adaptive routing), given their max-min fair rates where they share links, the bus
bandwidth of channels paced by the slowest, and the ports they load, named."""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass

import numpy as np

from ...fabric.datapaths import DELIVERED, ENDS, Snapshot, route
from ..traffic.maxmin import maxmin
from ..traffic.routes import Crossings
from . import adaptive
from .patterns import Pattern


@dataclass
class Fabric:
    """Flows of one algorithm on the fabric: their routes (``crossings``; with adaptive
    routing, of sub-flows, each of flow ``parent``, at ``sub_rate``), each flow's rate
    (payload bytes/s) and what the channels together carry (GB/s, 0 when a flow goes
    nowhere: ``dropped`` says where)."""

    pattern: Pattern
    crossings: Crossings | None
    rate: np.ndarray
    bus_GBps: float
    dropped: str | None = None
    parent: np.ndarray | None = None
    sub_rate: np.ndarray | None = None


def carry(snap: Snapshot, pat: Pattern, nch: int, spread: bool = False) -> Fabric:
    """Route ``pat``'s flows (``spread``: over equal-cost paths, :mod:`.adaptive`), give
    them their max-min fair rates, and the bus bandwidth (GB/s) of ``nch`` channels
    paced by the slowest."""
    nflows = len(pat.src)
    if spread:
        r, parent = adaptive.spread(snap, pat.src, pat.dst)
    else:
        r, parent = route(snap, pat.src, pat.dst), np.arange(nflows)
    bad = np.flatnonzero(r.end != DELIVERED)
    if len(bad):
        f = int(bad[0])
        where = port_name(snap, int(r.at[f])) if r.at[f] >= 0 else "on the way"
        what = (
            f"{len(np.unique(parent[bad]))} flow(s) go nowhere: from "
            f"{port_name(snap, int(pat.src[parent[f]]))} {ENDS[int(r.end[f])]} at {where}"
        )
        return Fabric(pat, None, np.zeros(nflows), 0.0, what)
    x = Crossings(snap, r)
    flow_ptr, links, link_ptr, link_flows = x.con
    # a flow carrying more of its channel's data (summed pairs) weighs more: per payload
    # byte of the channel it takes share x its wire bytes
    weight = x.weight * pat.share[parent]
    n = len(parent)
    sub = maxmin(
        flow_ptr,
        links,
        link_ptr,
        link_flows,
        snap.capacity,
        weight,
        np.full(n, np.inf),
        np.ones(n, dtype=bool),
    )
    # per unit of channel data; a flow's sub-flows together (the switches send more where
    # there is room); its own payload rate is share x that
    rate = np.bincount(parent, weights=sub, minlength=nflows)
    per_channel = np.full(nch, np.inf)
    np.minimum.at(per_channel, pat.channel, rate)
    slowest = float(per_channel.min()) if nch else 0.0
    bus = nch * slowest / 1e9 if math.isfinite(slowest) else 0.0
    if not spread:  # one sub-flow a flow: none to tell apart
        return Fabric(pat, x, rate * pat.share, bus)
    return Fabric(pat, x, rate * pat.share, bus, parent=parent, sub_rate=sub)


# each snapshot's node names, by node index (naming 100,000 ports through their objects
# costs a quarter of a second)
_NAMES: weakref.WeakKeyDictionary[Snapshot, list[str]] = weakref.WeakKeyDictionary()


def _node_names(snap: Snapshot) -> list[str]:
    names = _NAMES.get(snap)
    if names is None:
        names = []
        for start, stop in zip(snap.base[:-1].tolist(), snap.base[1:].tolist(), strict=True):
            p = next((q for q in snap.ports[start:stop] if q is not None), None)
            names.append(str(p.node.fabric_node.name) if p is not None else "?")
        _NAMES[snap] = names
    return names


def port_name(snap: Snapshot, i: int) -> str:
    """Port ``i`` as ``NODE[PORT]``, the name locate and perfquery's users take."""
    return f"{_node_names(snap)[int(snap.node[i])]}[{int(snap.num[i])}]"


def port_loads(snap: Snapshot, fab: Fabric | None, flow_bytes: np.ndarray | None) -> list[dict]:
    """The InfiniBand ports ``fab``'s flows (carrying ``flow_bytes`` each) leave by: each
    with the port at the far end of its link, the payload bytes and their rate, most
    loaded first."""
    if fab is None or fab.crossings is None or flow_bytes is None:
        return []
    x = fab.crossings
    if fab.parent is None:
        per, per_rate = flow_bytes, fab.rate
    else:  # each sub-flow its part of its flow's bytes, as its rate is of the flow's
        total = np.bincount(fab.parent, weights=fab.sub_rate, minlength=len(flow_bytes))
        frac = fab.sub_rate / np.where(total > 0, total, 1.0)[fab.parent]
        per = flow_bytes[fab.parent] * frac
        per_rate = fab.rate[fab.parent] * frac
    nbytes = x.by_port @ per
    rate = x.by_port @ per_rate
    used = np.flatnonzero(nbytes > 0)
    order = used[np.lexsort((used, -nbytes[used]))]
    names = _node_names(snap)
    peer = snap.peer[order]
    node, num = snap.node[order].tolist(), snap.num[order].tolist()
    pnode = snap.node[np.maximum(peer, 0)].tolist()
    pnum = snap.num[np.maximum(peer, 0)].tolist()
    return [
        {
            "from": f"{names[a]}[{b}]",
            "to": f"{names[c]}[{d}]" if j >= 0 else None,
            "bytes": round(x),
            "GBps": r / 1e9,
            "capacity_GBps": cap / 1e9,
        }
        for a, b, c, d, j, x, r, cap in zip(
            node, num, pnode, pnum, peer.tolist(), nbytes[order].tolist(),
            rate[order].tolist(), snap.capacity[order].tolist(), strict=True,
        )
    ]  # fmt: skip
