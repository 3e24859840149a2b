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
OpenSM's one-at-a-time choice takes them in.  Where the sets that count paths are
disjoint (a whole fat tree) each is a round robin of its own, and a set holding only
switch LIDs (counted by none) takes its least-used port; where they share some ports
(links down), the sets are taken in the order their first LID comes, the counters
carried over.  OpenSM interleaves them, which could differ only in which of two equal
ports a LID takes.  On the fabrics of tests/specs, gb200-su (2,048 HCAs) and
three-tier-hdr with links down, the tables are byte for byte OpenSM 3.3's
(tests/test_routed.py, docs/routed.md).
The result is deterministic: it depends on the cabling, the GUIDs and the LIDs only.
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import csr_matrix

from ...ib.enums import PhysState
from .state import SimFabric, SimNode

NO_PATH = 0xFF


def _net_order(guid: int) -> int:
    """The GUID as OpenSM's maps order it: the 8 bytes of its network (big-endian) form
    read as a little-endian integer (cl_qmap keys are ib_net64_t)."""
    return int.from_bytes(guid.to_bytes(8, "big"), "little")


class _Ports:
    """Every port as a row of the fabric's flat state (:mod:`.flat`), as arrays: its
    node, number, peer row, and whether its link carries data (both ends LinkUp)."""

    def __init__(self, sim: SimFabric):
        flat = sim.nodes[0].flat
        self.node = np.frombuffer(flat.node, dtype=np.int32).astype(np.int64)
        self.num = np.frombuffer(flat.num, dtype=np.uint16).astype(np.int64)
        self.peer = np.frombuffer(flat.peer, dtype=np.int32).astype(np.int64)
        self.lid = np.frombuffer(flat.lid, dtype=np.int64)
        self.lmc = np.frombuffer(flat.lmc, dtype=np.int64)
        present = np.frombuffer(flat.present, dtype=np.uint8).astype(bool)
        up = np.frombuffer(flat.phys, dtype=np.uint8) == PhysState.LINKUP
        peer = np.maximum(self.peer, 0)
        self.linked = present & (self.peer >= 0) & up & up[peer]
        self.switch_node = np.frombuffer(flat.is_switch, dtype=np.uint8).astype(bool)
        self.is_switch = self.switch_node[self.node]
        self.peer_switch = self.is_switch[peer] & (self.peer >= 0)


def destinations(
    sim: SimFabric, ports: _Ports | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every LID to route, in OpenSM's port order: (lid, the switch row it is reached
    through, the port it leaves that switch by, whether it is counted)."""
    ports = ports or _Ports(sim)
    switches = [n for n in sim.nodes if n.is_switch]
    row = np.full(len(sim.nodes), -1, dtype=np.int64)
    row[[n.index for n in switches]] = np.arange(len(switches))
    # switch ports towards a CA, in row order (a node's rows are its ports in order)
    to_ca = np.flatnonzero(ports.is_switch & (ports.num > 0) & ports.linked & ~ports.peer_switch)
    n_cas = np.bincount(row[ports.node[to_ca]], minlength=len(switches))
    rank = np.empty(len(switches), dtype=np.int64)
    by_load = sorted(
        range(len(switches)),
        key=lambda r: (-int(n_cas[r]), _net_order(switches[r].fabric_node.guid)),
    )
    rank[by_load] = np.arange(len(switches))
    sw_of = row[ports.node[to_ca]]
    to_ca = to_ca[np.argsort(rank[sw_of], kind="stable")]
    ca = ports.peer[to_ca]
    _, first = np.unique(ca, return_index=True)  # a CA port once, where first met
    keep = np.zeros(len(ca), dtype=bool)
    keep[first] = True
    keep &= ports.lid[ca] != 0
    to_ca, ca = to_ca[keep], ca[keep]
    k = np.left_shift(1, ports.lmc[ca])
    base = np.repeat(ports.lid[ca], k)
    within = np.arange(len(base)) - np.repeat(np.cumsum(k) - k, k)
    lids = [base + within]
    target = [np.repeat(row[ports.node[to_ca]], k)]
    exit_port = [np.repeat(ports.num[to_ca], k)]
    counted = [np.ones(len(base), dtype=bool)]
    rest = sorted(switches, key=lambda n: _net_order(n.fabric_node.port_guid))
    for n in rest:
        p0 = n.ports[0]
        if p0 is None or p0.lid == 0:
            continue
        m = 1 << p0.lmc
        lids.append(np.arange(p0.lid, p0.lid + m))
        target.append(np.full(m, row[n.index]))
        exit_port.append(np.zeros(m, dtype=np.int64))
        counted.append(np.zeros(m, dtype=bool))
    return (
        np.concatenate(lids).astype(np.int64),
        np.concatenate(target).astype(np.int64),
        np.concatenate(exit_port).astype(np.int64),
        np.concatenate(counted),
    )


def lfts(sim: SimFabric) -> dict[int, tuple[bytearray, int]]:
    """Each switch's linear forwarding table (by node index): its bytes (a multiple of
    64, 0xFF where no route) and LinearFdbTop (the highest LID routed)."""
    switches: list[SimNode] = [n for n in sim.nodes if n.is_switch]
    nsw = len(switches)
    if nsw == 0:
        return {}
    ports = _Ports(sim)
    row = np.full(len(sim.nodes), -1, dtype=np.int64)
    row[[n.index for n in switches]] = np.arange(nsw)
    # the links between switches that carry data: (switch row, port, neighbour row), in
    # switch then port order (a node's rows are its ports in order)
    isl = np.flatnonzero(ports.is_switch & (ports.num > 0) & ports.linked & ports.peer_switch)
    a_arr = row[ports.node[isl]]
    port_arr = ports.num[isl]
    b_arr = row[ports.node[ports.peer[isl]]]
    hops = _hops(a_arr, b_arr, nsw)
    lid, tgt, ext, cnt = destinations(sim, ports)
    top = int(lid.max()) if len(lid) else 0
    size = (top // 64 + 1) * 64
    # runs of LIDs with the same target switch, and each LID's place in its run
    cut = np.flatnonzero(np.diff(tgt)) + 1
    run_start = np.concatenate(([0], cut)).astype(np.int64)
    run_len = np.diff(np.append(run_start, len(tgt)))
    run_id = np.repeat(np.arange(len(run_start)), run_len)
    run_tgt = tgt[run_start]
    ci = cnt.astype(np.int64)
    before = np.cumsum(ci) - ci  # counted LIDs before each, over all
    off = (before - before[run_start][run_id]).astype(np.int32)  # ... within its run
    run_counted = np.add.reduceat(ci, run_start) if len(ci) else ci
    starts = np.searchsorted(a_arr, np.arange(nsw + 1))  # a is in switch, then port order
    own: dict[int, list[int]] = {}
    for ri, t in enumerate(run_tgt.tolist()):
        own.setdefault(t, []).append(ri)
    srt = np.argsort(lid, kind="stable")  # the LIDs ascending, as the tables are written
    runs = _Runs(run_id[srt].astype(np.int32), off[srt], run_tgt, run_counted)
    lid_sorted = lid[srt]
    out: dict[int, tuple[bytearray, int]] = {}
    for r, n in enumerate(switches):
        lft = np.full(size, NO_PATH, dtype=np.uint8)
        lo, hi = starts[r], starts[r + 1]
        if hi > lo:
            lft[lid_sorted] = _route_switch(hops, r, port_arr[lo:hi], b_arr[lo:hi], runs)
        for ri in own.get(r, ()):  # its own LIDs: out of the port they are at
            a0, a1 = run_start[ri], run_start[ri] + run_len[ri]
            lft[lid[a0:a1]] = ext[a0:a1]
        out[n.index] = (bytearray(lft.data), top)
    return out


def _hops(a: np.ndarray, b: np.ndarray, n: int) -> np.ndarray:
    """Hops between every two of ``n`` switches over the links a[i]-b[i] (255: none),
    by a breadth-first search from all of them at once: each switch's reach a bitset,
    grown by its neighbours' at each step (a fat tree's diameter is a few steps)."""
    graph = csr_matrix((np.ones(len(a), dtype=np.int8), (a, b)), shape=(n, n))
    graph.sum_duplicates()
    indptr, nbr = graph.indptr, graph.indices
    has = np.diff(indptr) > 0
    words = -(-n // 64)
    reach = np.zeros((n, words * 64), dtype=bool)
    reach[np.arange(n), np.arange(n)] = True
    reach = np.packbits(reach, axis=1, bitorder="little").view(np.uint64)  # [n, words]
    hops = np.full((n, n), 255, dtype=np.uint8)
    hops[np.arange(n), np.arange(n)] = 0
    starts = np.minimum(indptr[:-1], max(len(nbr) - 1, 0))
    for step in range(1, 255):
        if len(nbr) == 0:
            break
        grown = np.bitwise_or.reduceat(reach[nbr], starts, axis=0)
        grown[~has] = 0
        new = grown & ~reach
        if not new.any():
            break
        reach |= new
        fresh = np.unpackbits(new.view(np.uint8), axis=1, bitorder="little")[:, :n]
        hops[fresh.astype(bool)] = step
    return hops


class _Runs:
    """The LIDs to route, cut in runs of the same target switch in OpenSM's order: each
    LID's run and place in it (counted LIDs before it there), the LIDs ascending; each
    run's target and counted LIDs."""

    __slots__ = ("longest", "off", "run_counted", "run_id", "run_tgt")

    def __init__(self, run_id, off, run_tgt, run_counted):
        self.run_id, self.off, self.run_tgt, self.run_counted = run_id, off, run_tgt, run_counted
        self.longest = int(run_counted.max()) + 1 if len(run_counted) else 1


def _route_switch(hops, r, ports, nbs, runs: _Runs) -> np.ndarray:
    """Switch ``r``'s out port for each LID (ascending) through its neighbours
    ``nbs`` (by its ``ports``, in port order); 0xFF for its own LIDs and those it does
    not reach."""
    here = hops[r] - np.uint8(1)  # 255 (none) for its own: no neighbour is 255 from r
    closer = hops[nbs] == here[None, :]  # [port j, target switch t]: one hop nearer
    nt, nj = closer.shape[1], closer.shape[0]
    keys: np.ndarray
    if nj <= 64:  # each target's candidate ports as one 64-bit word
        bits = np.zeros((nt, 64), dtype=bool)
        bits[:, :nj] = closer.T
        keys = np.packbits(bits, axis=1, bitorder="little").view(np.uint64)[:, 0]
    else:
        packed = np.packbits(np.ascontiguousarray(closer.T), axis=1)
        keys = packed.view(np.dtype((np.void, packed.shape[1])))[:, 0]
    _, first_t, set_of = np.unique(keys, return_index=True, return_inverse=True)
    members = closer[:, first_t].T  # [set, port j]
    k = members.sum(axis=1)
    s_run = set_of[runs.run_tgt]
    run_counted = runs.run_counted
    # each run's counted LIDs before it in its set
    order = np.argsort(s_run, kind="stable")
    rc = run_counted[order]
    acc = np.cumsum(rc) - rc
    grp = s_run[order]
    heads = np.flatnonzero(np.concatenate(([True], grp[1:] != grp[:-1])))
    acc -= np.repeat(acc[heads], np.diff(np.append(heads, len(grp))))
    run_base = np.empty_like(acc)
    run_base[order] = acc
    choice = np.append(ports, NO_PATH).astype(np.uint8)  # index len(ports): no path
    nsets = len(k)
    per_set = np.bincount(s_run, weights=run_counted, minlength=nsets).astype(np.int64)
    counting = per_set > 0
    used = members[counting]
    if int(used.sum()) != int(used.any(axis=0).sum()):
        return choice[_shared(members, k, s_run, run_base, per_set, len(ports), runs)]
    # the sets that count paths are disjoint: each a round robin in port order from the
    # lowest; a set of switch LIDs only (not counted) takes its least-used port
    kmax = max(int(k.max()), 1)
    table = np.full((nsets, kmax), len(ports), dtype=np.int64)
    js_set, js_port = np.nonzero(members)
    col = np.arange(len(js_set)) - np.searchsorted(js_set, js_set)
    table[js_set, col] = js_port
    kk = np.maximum(k, 1)
    if not counting.all():  # each port's paths: its share of its set's round robin
        paths = np.zeros(len(ports) + 1, dtype=np.int64)
        share = per_set[js_set] // kk[js_set] + (col < per_set[js_set] % kk[js_set])
        np.add.at(paths, js_port, share)
        cost = np.where(members, paths[None, : len(ports)], np.iinfo(np.int64).max)
        least = np.where(k > 0, np.argmin(cost, axis=1), len(ports))
        quiet = ~counting
        table[quiet, 0] = least[quiet]
        kk = np.where(quiet, 1, kk)
    # each set's round robin written out long enough for any run to read straight on:
    # a LID's port is at its run's start (set row, rank of its first LID) plus its place
    width = kmax + runs.longest
    values = choice[np.take_along_axis(table, np.arange(width)[None, :] % kk[:, None], 1)]
    start = (s_run * width + run_base % kk[s_run]).astype(np.int32)
    return values.ravel()[start[runs.run_id] + runs.off]


def _shared(members, k, s_run, run_base, per_set, nports, runs: _Runs) -> np.ndarray:
    """The port (index) of each LID (ascending) where sets of candidate ports share some: each
    set's LIDs in turn, the ports' counters carried over from set to set."""
    nsets = len(k)
    rank = run_base[runs.run_id] + runs.off  # the LIDs ascending
    s_lid = s_run[runs.run_id]
    pick = np.full(len(s_lid), nports, dtype=np.int64)
    paths = np.zeros(nports, dtype=np.int64)
    set_first_run = np.full(nsets, len(s_run), dtype=np.int64)
    np.minimum.at(set_first_run, s_run, np.arange(len(s_run)))
    lid_order = np.argsort(s_lid, kind="stable")
    bounds = np.searchsorted(s_lid[lid_order], np.arange(nsets + 1))
    for si in np.argsort(set_first_run, kind="stable").tolist():
        js = np.flatnonzero(members[si])
        idx = lid_order[bounds[si] : bounds[si + 1]]
        if len(js) == 0 or len(idx) == 0:
            continue
        n = int(per_set[si])
        seq = _fill_order(paths[js], n + 1)
        pick[idx] = js[seq[rank[idx]]]
        np.add.at(paths, js[seq[:n]], 1)
    return pick


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
