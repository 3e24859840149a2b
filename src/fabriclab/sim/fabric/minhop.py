"""Forwarding tables filled without a subnet manager: min-hop routes, spread D-mod-k.

A stand-in for an SM in tests and benchmarks only (the real OpenSM configures a served
fabric; on 30,000 HCAs it takes far longer than a benchmark may).  It does what an SM
does to carry data, in one step: every port whose link is up becomes ACTIVE, and each
switch's linear forwarding table sends every end port's LIDs out of a port on a
shortest path to it.  Where several ports are on shortest paths, LID ``d`` takes the
``d mod k``-th of the ``k`` candidates in port order ("D-mod-k", Zahavi et al., "Optimized
InfiniBand fat-tree routing for shift all-to-all communication patterns", 2010); in a
fat tree every shortest path goes up then down, so this is an up-down routing.
Switch-to-switch distances come from scipy's breadth-first shortest paths.
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import shortest_path

from ...ib.enums import PhysState, PortState
from .datapaths import Snapshot
from .state import SimFabric


def activate(sim: SimFabric) -> None:
    """Every port whose link is up (both ends LinkUp) goes ACTIVE, as after an SM's
    sweep; switch ports 0 are ACTIVE from the start."""
    for node in sim.nodes:
        for p in node.ports:
            if p is None or p.num == 0:
                continue
            q = p.peer
            if q is not None and p.phys == PhysState.LINKUP and q.phys == PhysState.LINKUP:
                if p.state != PortState.ACTIVE:
                    p.state = PortState.ACTIVE
                    p.changed()


def fill(sim: SimFabric) -> None:
    """Activate the fabric and write every switch's forwarding table (see the module)."""
    activate(sim)
    snap = Snapshot(sim)
    sw_nodes = [n.index for n in sim.nodes if n.is_switch]
    nsw = len(sw_nodes)
    if nsw == 0:
        return
    row = snap.sw_row
    # switch-to-switch links that carry data
    ports = np.flatnonzero(snap.exists & snap.link_ok & snap.is_switch)
    peers = snap.peer[ports]
    isl = snap.is_switch[peers]
    a_port, b_port = ports[isl], peers[isl]
    a, b = row[snap.node[a_port]], row[snap.node[b_port]]
    graph = csr_matrix((np.ones(len(a)), (a, b)), shape=(nsw, nsw))
    dist = shortest_path(graph, method="D", unweighted=True)
    # where each LID ends: the switch it is reached through and the port it leaves by
    lids, target, exit_port = [], [], []
    for n in sim.nodes:
        for p in n.ports:
            if p is None or not p.is_endport or p.lid == 0:
                continue
            if n.is_switch:
                t, e = row[n.index], 0
            else:
                q = p.peer
                if q is None or not q.node.is_switch:
                    continue
                t, e = row[q.node.index], q.num
            for lid in range(p.lid, p.lid + (1 << p.lmc)):
                lids.append(lid)
                target.append(t)
                exit_port.append(e)
    lid_a = np.array(lids, dtype=np.int64)
    tgt = np.array(target, dtype=np.int64)
    ext = np.array(exit_port, dtype=np.int64)
    top = int(np.max(lid_a)) if len(lid_a) else 0
    size = (top // 64 + 1) * 64
    # each switch's neighbours, by port: the ISL ends grouped by the switch they leave
    order = np.lexsort((snap.num[a_port], a))
    a_sorted, port_sorted, nb_sorted = a[order], snap.num[a_port][order], b[order]
    starts = np.searchsorted(a_sorted, np.arange(nsw + 1))
    for r, ni in enumerate(sw_nodes):
        lft = np.full(size, 0xFF, dtype=np.uint8)
        mine = tgt == r
        lft[lid_a[mine]] = ext[mine]
        lo, hi = starts[r], starts[r + 1]
        others = ~mine & np.isfinite(dist[r, tgt])
        if hi > lo and others.any():
            nb_ports, nbs = port_sorted[lo:hi], nb_sorted[lo:hi]
            # candidates[j, t]: neighbour j is one hop closer to switch t
            closer = dist[nbs, :] == (dist[r, :] - 1)[None, :]
            count = closer.sum(axis=0)
            _, cand_j = np.nonzero(closer.T)  # by target, then port order
            first = np.concatenate(([0], np.cumsum(count)))
            d, t = lid_a[others], tgt[others]
            ok = count[t] > 0
            d, t = d[ok], t[ok]
            pick = cand_j[first[t] + d % count[t]]
            lft[d] = nb_ports[pick]
        sw = sim.nodes[ni].sw
        sw.lft = bytearray(lft.tobytes())  # type: ignore[union-attr]
        sw.lft_top = top  # type: ignore[union-attr]
    sim.generation.bump()
