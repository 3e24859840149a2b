"""Adaptive routing for collectives' flows: on a fabric whose switches enable it (spec
``fat_tree.adaptive_routing``), a flow spreads over the equal-cost paths to its
destination instead of following one forwarding-table entry.

NVIDIA's Adaptive Routing on Quantum switches sends each packet of an adaptive flow by
the least loaded of the ports that lead to its destination on a shortest path (the
port's AR group); NCCL asks for it on every InfiniBand device unless
``NCCL_IB_ADAPTIVE_ROUTING`` is 0 (NCCL 2.30.7, src/transport/net_ib/init.cc: "Enable
ADAPTIVE_ROUTING by default on IB networks").  Here each flow is split into :data:`SUBFLOWS` sub-flows walked hop
by hop: at a switch short of the destination's leaf, a sub-flow takes one of the
ports whose far switch is one hop nearer to that leaf (sub-flow j the (j / s) mod k-th
of k, s the choices before it, so that the sub-flows cover the choices evenly); at the
destination's leaf, the forwarding table's entry.  Max-min sharing then gives each
sub-flow its rate, and a flow's rate is theirs together: the switches send more where
there is room.
"""

from __future__ import annotations

import weakref

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import shortest_path

from ...fabric.datapaths import DELIVERED, DISCARDED, LOST, MAX_HOPS, RELAY, Snapshot, walked

SUBFLOWS = 16
_FAR = 1 << 14  # a distance for switches with no path between them

# each snapshot's switch-to-switch hop counts, with the generation they were taken at
_DIST: weakref.WeakKeyDictionary[Snapshot, tuple[int, np.ndarray, np.ndarray]] = (
    weakref.WeakKeyDictionary()
)


def distances(snap: Snapshot) -> tuple[np.ndarray, np.ndarray]:
    """Hop counts between every two switches over the links that carry data, and each
    node's row in them (-1: not a switch)."""
    kept = _DIST.get(snap)
    if kept is not None and kept[0] == snap.generation:
        return kept[1], kept[2]
    nnodes = len(snap.base) - 1
    node_is_switch = snap.is_switch[np.minimum(snap.base[:-1], snap.nports - 1)]
    row = np.full(nnodes, -1, dtype=np.int64)
    sw = np.flatnonzero(node_is_switch)
    row[sw] = np.arange(len(sw))
    peer = snap.peer
    has = (peer >= 0) & snap.link_ok & snap.is_switch
    has[has] &= snap.is_switch[peer[has]]
    a = row[snap.node[has]]
    b = row[snap.node[peer[has]]]
    g = csr_matrix((np.ones(len(a)), (a, b)), shape=(len(sw), len(sw)))
    d = shortest_path(g, unweighted=True, directed=True)
    dist = np.where(np.isfinite(d), d, _FAR).astype(np.int32)
    _DIST[snap] = (snap.generation, dist, row)
    return dist, row


def spread(snap: Snapshot, src: np.ndarray, dst: np.ndarray, m: int = SUBFLOWS):
    """The routes of ``m`` sub-flows of each flow from ports ``src`` to CA ports ``dst``,
    and each sub-flow's flow."""
    dist, row = distances(snap)
    n = len(src)
    parent = np.repeat(np.arange(n), m)
    j = np.tile(np.arange(m), n)
    total = n * m
    dstp = dst[parent]
    dlid = snap.lid[dstp]
    leaf = snap.node[np.maximum(snap.peer[dstp], 0)]
    leaf_row = row[leaf]
    stride = np.ones(total, dtype=np.int64)
    end = np.full(total, LOST, dtype=np.int8)
    at = np.full(total, -1, dtype=np.int64)
    nhops = np.zeros(total, dtype=np.int64)
    steps_f: list[np.ndarray] = []
    steps_p: list[np.ndarray] = []
    alive = np.arange(total)
    egress = src[parent].astype(np.int64)
    width = int(snap.size_at.max()) if snap.nports else 0
    ks = np.arange(width)
    for _ in range(MAX_HOPS):
        if len(alive) == 0:
            break
        ok = snap.link_ok[egress]
        if not ok.all():
            end[alive[~ok]], at[alive[~ok]] = DISCARDED, egress[~ok]
            alive, egress = alive[ok], egress[ok]
        steps_f.append(alive)
        steps_p.append(egress)
        nhops[alive] += 1
        ingress = snap.peer[egress]
        sw = snap.is_switch[ingress]
        if not sw.all():
            arrived, where = alive[~sw], ingress[~sw]
            hit = where == dstp[arrived]
            end[arrived[hit]] = DELIVERED
            end[arrived[~hit]], at[arrived[~hit]] = LOST, where[~hit]
            alive, ingress = alive[sw], ingress[sw]
        here = snap.node[ingress]
        # by the forwarding table: at the destination's leaf, or where no port is nearer
        out = snap.lft_flat[snap.row_at[ingress] + dlid[alive]].astype(np.int64)
        nxt = snap.base_at[ingress] + np.where(
            (out == 0xFF) | (out >= snap.size_at[ingress]), 0, out
        )
        relay = (out == 0xFF) | (out >= snap.size_at[ingress]) | (out == 0)
        away = here != leaf[alive]
        if away.any():
            idx = np.flatnonzero(away)
            base = snap.base_at[ingress[idx]]
            cand = base[:, None] + ks[None, :]
            valid = ks[None, :] < snap.size_at[ingress[idx]][:, None]
            cand = np.where(valid, cand, 0)
            far = snap.peer[cand]
            good = valid & snap.exists[cand] & snap.link_ok[cand] & (far >= 0)
            far_row = row[snap.node[np.maximum(far, 0)]]
            good &= far_row >= 0
            lr = leaf_row[alive[idx]]
            nearer = (
                dist[np.maximum(far_row, 0), lr[:, None]] == (dist[row[here[idx]], lr] - 1)[:, None]
            )
            good &= nearer
            count = good.sum(axis=1)
            has = count > 0
            if has.any():
                hi = idx[has]
                f = alive[hi]
                pick = (j[f] // stride[f]) % count[has]
                stride[f] *= count[has]
                order = np.cumsum(good[has], axis=1)
                col = np.argmax(order > pick[:, None], axis=1)
                nxt[hi] = cand[has, col]
                relay[hi] = False
        if relay.any():
            end[alive[relay]], at[alive[relay]] = RELAY, ingress[relay]
        keep = ~relay
        alive, egress = alive[keep], nxt[keep]
    return walked(snap, src[parent], nhops, steps_f, steps_p, end, at), parent
