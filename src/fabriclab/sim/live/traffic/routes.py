"""Where the traffic engine's flows go: their routes over the forwarding tables, cut
where a partition check refuses their packets, and the flow/port incidences the rates
and the counters are worked out from.

The routes come from :func:`...fabric.datapaths.route`; :func:`route_flows` runs each
delivered flow's packets through :func:`...fabric.partitions.enforce` along its path
(once per distinct path) and ends a refused flow where it is refused.  :class:`Crossings`
turns routes into sparse incidences with numpy (no per-flow Python work).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy.sparse import csr_matrix

from ....ib.packets import WIRE_OVERHEAD_BYTES
from ...fabric import partitions
from ...fabric.datapaths import (
    CONSTRAINT,
    DELIVERED,
    DISCARDED,
    PKEY,
    XMIT_CONSTRAINT,
    Routes,
    Snapshot,
    route,
)
from ...fabric.state import SimPort

# ends where the port named by Routes.at takes the packets without sending them on
HELD = (DISCARDED, XMIT_CONSTRAINT)
# what partitions.enforce's Drop counter says, as a flow's end
_DROP_END = {
    "PortRcvConstraintErrors": CONSTRAINT,
    "PortXmitConstraintErrors": XMIT_CONSTRAINT,
    None: PKEY,
}

# sends the trap a partition drop raises: (port, trap number, sending port, the Drop)
OnTrap = Callable[[SimPort, int, SimPort, partitions.Drop], None]


def route_flows(snap: Snapshot, src: np.ndarray, dst: np.ndarray, on_trap: OnTrap | None) -> Routes:
    """The routes of flows ``src`` -> ``dst`` (flat port numbers) on ``snap``, each cut
    where a partition check refuses its packets (see :func:`partition`)."""
    return partition(snap, route(snap, src, dst), on_trap)


def partition(snap: Snapshot, r: Routes, on_trap: OnTrap | None) -> Routes:
    """The routes ``r`` with each delivered flow's packets run through the partition
    checks of its path (:func:`...fabric.partitions.enforce`, once per distinct path); a flow
    refused on the way ends where it is refused, its hops cut there.  A refusal that
    raises a trap sends it through ``on_trap``, once per flow."""
    if snap.default_pkeys is None:
        snap.default_pkeys = partitions.all_default(snap.ports)
    if snap.default_pkeys:
        return r  # every table the default partition alone: every check passes
    ports, peer = snap.ports, snap.peer
    seen: dict[tuple[int, ...], partitions.Drop | None] = {}
    cut: dict[int, int] = {}  # flow -> hops it keeps
    for i in np.flatnonzero(r.end == DELIVERED).tolist():
        hops = r.hops[r.ptr[i] : r.ptr[i + 1]].tolist()
        key = tuple(hops)
        if key not in seen:
            path: list[SimPort] = []
            for h in hops:
                # the port it leaves by, the port it arrives at: sender,
                # (ingress, egress) per switch, receiver
                path += [ports[h], ports[int(peer[h])]]  # type: ignore[list-item]
            pkey = partitions.carried_pkey(path[0], path[-1])
            seen[key] = None if pkey is None else partitions.enforce(path, pkey)
        drop = seen[key]
        if drop is None:
            continue
        at = snap.index(drop.port)
        end = _DROP_END[drop.counter]
        r.end[i], r.at[i] = end, at
        if end == XMIT_CONSTRAINT:
            cut[i] = hops.index(at)  # up to the egress port that keeps them
        elif end == CONSTRAINT:
            cut[i] = [int(peer[h]) for h in hops].index(at) + 1
        if drop.trap is not None and on_trap is not None:
            on_trap(drop.port, drop.trap, ports[hops[0]], drop)
    if not cut:
        return r
    nhops = np.diff(r.ptr)
    keep = np.ones(len(r.hops), dtype=bool)
    for i, k in cut.items():
        keep[r.ptr[i] + k : r.ptr[i + 1]] = False
        nhops[i] = k
    ptr = np.concatenate(([0], np.cumsum(nhops)))
    return Routes(ptr, r.hops[keep], r.end, r.at, r.mtu)


class Crossings:
    """The incidences the rates and counters need, from the routes ``r``: by flow, the
    links each flow's packets take (its hops, then the port that discards them, which
    takes them at its rate); by port, the flows crossing it (scipy's sparse matrix build
    does the grouping, a counting sort).

    ``by_port``: ports x flows, 1 where the flow's packets leave by the port (0 at a port
    that discards them; a flow crossing a port twice, a loop, sums); ``con``: the
    incidence as :func:`.maxmin.maxmin` takes it (flow_ptr, links, link_ptr,
    link_flows); ``seg_port``/``seg_peer``: the ports some flow leaves by and the ports
    at the other end of their links; ``weight``: each flow's wire bytes per payload
    byte."""

    def __init__(self, snap: Snapshot, r: Routes):
        nflows = len(r.end)
        nhops = np.diff(r.ptr)
        disc = np.isin(r.end, HELD)
        if disc.any():
            cnt = nhops + disc
            ptr = np.concatenate(([0], np.cumsum(cnt)))
            links = np.empty(int(ptr[-1]), dtype=np.int64)
            is_hop = np.ones(len(links), dtype=bool)
            is_hop[ptr[1:][disc] - 1] = False
            links[is_hop] = r.hops
            links[~is_hop] = r.at[disc]
        else:
            ptr, links = r.ptr, r.hops
            is_hop = np.ones(len(links), dtype=bool)
        owner = np.repeat(np.arange(nflows), np.diff(ptr))
        by_port = csr_matrix(
            (is_hop.astype(np.int64), (links, owner)), shape=(snap.nports, max(nflows, 1))
        )
        self.by_port = by_port
        self.con = (ptr, links, by_port.indptr, by_port.indices)
        used = np.flatnonzero(np.diff(by_port.indptr))
        self.seg_port = used
        self.seg_peer = snap.peer[used]
        self.weight = (r.mtu + WIRE_OVERHEAD_BYTES) / r.mtu


def touching(snap: Snapshot, r: Routes, src: np.ndarray, dst: np.ndarray, at: np.ndarray):
    """The flows (indices into ``r``) whose route a change at flat ports ``at`` may
    move: those starting or ending there, leaving by or arriving at one of them on
    the way, or dropped at one of them."""
    mark = np.zeros(snap.nports, dtype=bool)
    mark[at] = True
    hops = r.hops
    hit = mark[hops] | mark[snap.peer[hops]]
    owner = np.repeat(np.arange(len(r.end)), np.diff(r.ptr))
    flows = np.zeros(len(r.end), dtype=bool)
    flows[owner[hit]] = True
    flows |= mark[src] | mark[dst]
    dropped = r.at >= 0
    flows[dropped] |= mark[r.at[dropped]]
    return np.flatnonzero(flows)


def splice(r: Routes, idx: np.ndarray, new: Routes) -> Routes:
    """``r`` with the routes of flows ``idx`` (ascending) replaced by ``new``'s: the
    hops copied in runs (the flows between two replaced ones are one slice)."""
    nhops = np.diff(r.ptr)
    nhops[idx] = np.diff(new.ptr)
    ptr = np.concatenate(([0], np.cumsum(nhops)))
    # the runs of old hops kept: from after one replaced flow to the next
    starts = r.ptr[np.concatenate(([0], idx + 1))].tolist()
    stops = r.ptr[np.concatenate((idx, [len(r.end)]))].tolist()
    got = new.ptr.tolist()
    pieces = [r.hops[starts[0] : stops[0]]]
    for k in range(len(idx)):
        pieces.append(new.hops[got[k] : got[k + 1]])
        pieces.append(r.hops[starts[k + 1] : stops[k + 1]])
    hops = np.concatenate(pieces).astype(r.hops.dtype, copy=False)
    end, at, mtu = r.end.copy(), r.at.copy(), r.mtu.copy()
    end[idx], at[idx], mtu[idx] = new.end, new.at, new.mtu
    return Routes(ptr, hops, end, at, mtu)


def same(r: Routes, idx: np.ndarray, new: Routes) -> bool:
    """Whether ``new`` (the routes of flows ``idx`` found again) is what ``r`` holds for
    them: then nothing a rate or a counter depends on has moved."""
    counts = np.diff(new.ptr)
    if not np.array_equal(np.diff(r.ptr)[idx], counts):
        return False
    if not (
        np.array_equal(r.end[idx], new.end)
        and np.array_equal(r.at[idx], new.at)
        and np.array_equal(r.mtu[idx], new.mtu)
    ):
        return False
    at = np.repeat(r.ptr[idx] - new.ptr[:-1], counts) + np.arange(len(new.hops))
    return bool(np.array_equal(r.hops[at], new.hops))
