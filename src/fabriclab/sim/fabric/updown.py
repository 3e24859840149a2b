"""Forwarding tables as OpenSM's min-hop routing writes them, for ``up --routed``.

Every switch sends each LID out of a port on a shortest path to it (hop counts over the
links that are up), and spreads the LIDs over equal ports as OpenSM's default routing
does (opensm/osm_ucast_mgr.c ``ucast_mgr_build_lfts``, opensm/osm_switch.c
``osm_switch_recommend_path``; updn on a fat tree picks among the same ports, as every
shortest path there goes up then down):

- the LIDs are taken in OpenSM's port order: the CA ports attached to each switch, the
  switches taken by how many CA links they have (most first, ``sort_ports_by_switch_load``)
  and each switch's ports in port order; then the other ports (the switches' port 0) in
  the order of OpenSM's port table, keyed by the GUID as stored in network byte order;
- each LID goes out of the least-used of the ports on a shortest path (the ports'
  "number of paths" counters), the lowest port number among equals;
- a LID of a switch is routed but not counted (``port_profile_switch_nodes`` off).

The LIDs whose candidate ports are the same set are taken together, with numpy: the
ports' counters filled level by level, the lowest port first at each level, is the order
OpenSM's one-at-a-time choice takes them in.  The sets are taken in the order their
first LID comes; OpenSM interleaves them, which makes a difference only where two sets
share some ports but not all (not in a whole fat tree).  On the fabrics of tests/specs
and gb200-su (2,048 HCAs) the tables are byte for byte OpenSM 3.3's (docs/routed.md).
The result is deterministic: it depends on the cabling, the GUIDs and the LIDs only.
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import shortest_path

from .state import SimFabric, SimNode, SimPort

NO_PATH = 0xFF


def _net_order(guid: int) -> int:
    """The GUID as OpenSM's maps order it: the 8 bytes of its network (big-endian) form
    read as a little-endian integer (cl_qmap keys are ib_net64_t)."""
    return int.from_bytes(guid.to_bytes(8, "big"), "little")


def _linked(p) -> bool:
    q = p.peer
    return q is not None and p.up and q.up


def destinations(sim: SimFabric) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every LID to route, in OpenSM's port order: (lid, the switch row it is reached
    through, the port it leaves that switch by, whether it is counted)."""
    switches = [n for n in sim.nodes if n.is_switch]
    row = {n.index: r for r, n in enumerate(switches)}
    load = []
    for n in switches:
        cas: list[SimPort] = []
        for p in n.ports[1:]:
            if p is not None and p.peer is not None and _linked(p) and not p.peer.node.is_switch:
                cas.append(p.peer)
        load.append((-len(cas), _net_order(n.fabric_node.guid), n, cas))
    load.sort(key=lambda t: (t[0], t[1]))
    lids: list[int] = []
    target: list[int] = []
    exit_port: list[int] = []
    counted: list[bool] = []
    seen: set[int] = set()
    for _, _, n, cas in load:
        r = row[n.index]
        for q in cas:
            if q.lid == 0 or id(q) in seen:
                continue
            seen.add(id(q))
            lids.extend(range(q.lid, q.lid + (1 << q.lmc)))
            k = 1 << q.lmc
            target.extend([r] * k)
            exit_port.extend([q.peer.num] * k)  # type: ignore[union-attr]
            counted.extend([True] * k)
    rest = sorted(((_net_order(n.fabric_node.port_guid), n) for n in switches), key=lambda t: t[0])
    for _, n in rest:
        p0 = n.ports[0]
        if p0 is None or p0.lid == 0:
            continue
        k = 1 << p0.lmc
        lids.extend(range(p0.lid, p0.lid + k))
        target.extend([row[n.index]] * k)
        exit_port.extend([0] * k)
        counted.extend([False] * k)
    return (
        np.array(lids, dtype=np.int64),
        np.array(target, dtype=np.int64),
        np.array(exit_port, dtype=np.int64),
        np.array(counted, dtype=bool),
    )


def lfts(sim: SimFabric) -> dict[int, tuple[bytes, int]]:
    """Each switch's linear forwarding table (by node index): its bytes (a multiple of
    64, 0xFF where no route) and LinearFdbTop (the highest LID routed)."""
    switches: list[SimNode] = [n for n in sim.nodes if n.is_switch]
    nsw = len(switches)
    if nsw == 0:
        return {}
    row = {n.index: r for r, n in enumerate(switches)}
    # the links between switches that carry data: (switch row, port, neighbour row)
    a, a_port, b = [], [], []
    for n in switches:
        r = row[n.index]
        for p in n.ports[1:]:
            if p is not None and _linked(p) and p.peer.node.is_switch:  # type: ignore[union-attr]
                a.append(r)
                a_port.append(p.num)
                b.append(row[p.peer.node.index])  # type: ignore[union-attr]
    a_arr, port_arr, b_arr = (np.array(x, dtype=np.int64) for x in (a, a_port, b))
    graph = csr_matrix((np.ones(len(a_arr)), (a_arr, b_arr)), shape=(nsw, nsw))
    dist = shortest_path(graph, method="D", unweighted=True)
    lid, tgt, ext, cnt = destinations(sim)
    top = int(lid.max()) if len(lid) else 0
    size = (top // 64 + 1) * 64
    starts = np.searchsorted(a_arr, np.arange(nsw + 1))  # a is in switch, then port order
    out: dict[int, tuple[bytes, int]] = {}
    for r, n in enumerate(switches):
        lft = np.full(size, NO_PATH, dtype=np.uint8)
        mine = tgt == r
        lft[lid[mine]] = ext[mine]
        lo, hi = starts[r], starts[r + 1]
        others = ~mine & np.isfinite(dist[r, tgt])
        if hi > lo and others.any():
            _route_switch(lft, r, dist, port_arr[lo:hi], b_arr[lo:hi], lid, tgt, cnt, others)
        out[n.index] = (lft.tobytes(), top)
    return out


def _route_switch(lft, r, dist, ports, nbs, lid, tgt, cnt, others) -> None:
    """Fill switch ``r``'s entries for the LIDs ``others`` reaches through its
    neighbours ``nbs`` (by its ``ports``, in port order)."""
    closer = dist[nbs, :] == (dist[r, :] - 1)[None, :]  # [port j, target switch t]
    packed = np.packbits(closer, axis=0)  # each target's candidate ports as bytes
    keys = np.ascontiguousarray(packed.T).view(np.dtype((np.void, packed.shape[0])))[:, 0]
    _, set_of = np.unique(keys, return_inverse=True)
    d, t, c = lid[others], tgt[others], cnt[others]
    s = set_of[t]
    order = np.argsort(s, kind="stable")  # by set, each in OpenSM's port order
    s_sorted, c_sorted = s[order], c[order].astype(np.int64)
    bounds = np.flatnonzero(np.diff(s_sorted)) + 1
    firsts = np.concatenate(([0], bounds))
    lasts = np.concatenate((bounds, [len(order)]))
    # the sets in the order their first LID comes
    by_first = np.argsort(order[firsts], kind="stable")
    paths = np.zeros(len(ports), dtype=np.int64)  # each port's "number of paths"
    pick = np.empty(len(order), dtype=np.int64)
    for g in by_first.tolist():
        lo, hi = int(firsts[g]), int(lasts[g])
        js = np.flatnonzero(closer[:, t[order[lo]]])
        if len(js) == 0:
            pick[lo:hi] = -1
            continue
        cs = c_sorted[lo:hi]
        rank = np.cumsum(cs) - cs  # counted LIDs before each
        n = int(cs.sum())
        seq = _fill_order(paths[js], n + 1)
        pick[lo:hi] = js[seq[rank]]
        np.add.at(paths, js[seq[:n]], 1)
    ok = pick >= 0
    lft[d[order][ok]] = ports[pick[ok]]


def _fill_order(counts: np.ndarray, n: int) -> np.ndarray:
    """The ports (indices into ``counts``) that ``n`` paths would take one after the
    other, each the least used so far, the lowest index among equals (OpenSM's choice)."""
    k = len(counts)
    lo = int(counts.min())
    # enough levels above the lowest count for n paths whatever the counts
    levels = int(counts.max()) - lo + n // k + 2
    lv = np.arange(lo, lo + levels)
    grid_level = np.repeat(lv, k)
    grid_port = np.tile(np.arange(k), levels)
    free = grid_level >= counts[grid_port]
    return grid_port[free][:n]
