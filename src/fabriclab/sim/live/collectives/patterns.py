"""The InfiniBand flows each algorithm puts on the fabric: which HCA sends to which, on
which channel, and what share of the collective's bytes each carries.

NCCL splits a collective's data equally over its channels, and each channel leaves a
group by one of the group's HCAs (channel c by the group's HCA c mod k, so that the
channels spread over the rails).  Per channel:

- ring: each group sends to the next in rank order, the last to the first; with
  ``NCCL_CROSS_NIC`` 0 or 2 (NCCL's default) the receiving group takes the channel in
  by its HCA of the same name when it has one (the same rail), with 1 by its HCA at
  the channel's position (src/graph/search.cc: 0 keeps one NIC per ring across nodes,
  2 prefers it);
- tree: a double binary tree over the groups, the channels of each HCA alternating
  between the two trees, each edge carrying data both ways (the reduction up, the broadcast down).  NCCL's trees
  (src/graph/trees.cc) number the nodes differently; each node has the same number of
  edges;
- collnet: each link of the channel's SHARP aggregation tree (the routes from the
  groups' HCAs up to the switch at its top) once each way: every switch reduces what
  comes up to it into one stream;
- all-to-all and send-recv: a flow from each rank's HCA to each peer's in another
  group (the peers of a send-recv: the next rank).

``share`` is the bytes a flow carries per byte of the channel's data.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...fabric.datapaths import Snapshot, route
from .placement import Placement


@dataclass
class Pattern:
    """Flows of one algorithm: flat source and destination ports (a destination may be
    a switch's port 0, for SHARP), their channel, and their share of its data."""

    src: np.ndarray
    dst: np.ndarray
    channel: np.ndarray
    share: np.ndarray

    @staticmethod
    def of(rows: list[tuple[int, int, int, float]]) -> Pattern:
        a = np.asarray(rows, dtype=np.float64).reshape(-1, 4)
        return Pattern(
            a[:, 0].astype(np.int64), a[:, 1].astype(np.int64), a[:, 2].astype(np.int64), a[:, 3]
        )


def _pick(nics: list, c: int):
    return nics[c % len(nics)]


def _entry(snap: Snapshot, nics: list, out_port, c: int, cross: int) -> int:
    """The HCA port a group takes channel ``c`` in by (see the module)."""
    at = _pick(nics, c)
    if cross != 1:
        name = out_port.node.fabric_node.hca
        if at.node.fabric_node.hca != name:
            k = len(nics)
            for step in range(1, k):  # the nearest of that name after the channel's own
                p = nics[(c + step) % k]
                if p.node.fabric_node.hca == name:
                    return snap.index(p)
    return snap.index(at)


def ring(snap: Snapshot, pl: Placement, nch: int, cross: int) -> Pattern:
    """Each group to the next, per channel."""
    rows = []
    groups = pl.groups
    n = len(groups)
    for c in range(nch):
        for i, g in enumerate(groups):
            nxt = groups[(i + 1) % n]
            out = _pick(g.nics, c)
            rows.append((snap.index(out), _entry(snap, nxt.nics, out, c, cross), c, 1.0))
    return Pattern.of(rows)


def tree_edges(n: int, which: int) -> list[tuple[int, int]]:
    """(parent, child) edges of binary tree ``which`` (0 or 1) over nodes 0..n-1: tree
    0 in heap order, tree 1 the same over the nodes in reverse, so that a node inner in
    one is mostly a leaf in the other."""
    order = list(range(n)) if which == 0 else list(range(n - 1, -1, -1))
    return [(order[(k - 1) // 2], order[k]) for k in range(1, n)]


def tree(snap: Snapshot, pl: Placement, nch: int, cross: int) -> Pattern:
    """Each tree edge both ways, per channel."""
    rows = []
    groups = pl.groups
    k = max(len(g.nics) for g in groups)
    for c in range(nch):
        # the channels of one HCA alternate between the trees
        for parent, child in tree_edges(len(groups), (c // k) % 2):
            gp, gc = groups[parent], groups[child]
            up = _pick(gc.nics, c)
            down = _pick(gp.nics, c)
            rows.append((snap.index(up), _entry(snap, gp.nics, up, c, cross), c, 1.0))
            rows.append((snap.index(down), _entry(snap, gc.nics, down, c, cross), c, 1.0))
    return Pattern.of(rows)


def peers(snap: Snapshot, pl: Placement, a: np.ndarray, b: np.ndarray) -> Pattern:
    """A flow per pair of ranks (a[i], b[i]) in different groups, from a's HCA to b's,
    those between the same two HCAs summed into one flow (its share their number)."""
    group_of = np.zeros(pl.nranks, dtype=np.int64)
    nic_of = np.zeros(pl.nranks, dtype=np.int64)
    for gi, g in enumerate(pl.groups):
        group_of[g.ranks] = gi
        if g.rank_nics:
            nic_of[g.ranks] = [snap.index(p) for p in g.rank_nics]
    keep = group_of[a] != group_of[b]
    src, dst = nic_of[a[keep]], nic_of[b[keep]]
    key = src * (snap.nports + 1) + dst
    uniq, count = np.unique(key, return_counts=True)
    return Pattern(
        uniq // (snap.nports + 1),
        uniq % (snap.nports + 1),
        np.zeros(len(uniq), dtype=np.int64),
        count.astype(np.float64),
    )


def all_pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Every ordered pair of distinct ranks (all-to-all)."""
    a = np.repeat(np.arange(n), n)
    b = np.tile(np.arange(n), n)
    keep = a != b
    return a[keep], b[keep]


def next_pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Each rank to the next (nccl-tests' send-recv)."""
    a = np.arange(n) if n > 1 else np.zeros(0, dtype=np.int64)
    return a, (a + 1) % max(n, 1)


def collnet(snap: Snapshot, pl: Placement, nch: int, roots: list[int]) -> Pattern:
    """SHARP's aggregation tree of each channel: the links of the routes from the
    groups' HCAs (channel c's) up to the switch ``roots[c]`` (a flat port 0), each link
    once whatever number of HCAs lies below it (each switch reduces what comes up to it
    into one stream) and carrying the channel's data up and, the result, down."""
    rows = []
    for c in range(nch):
        nics = np.asarray([snap.index(_pick(g.nics, c)) for g in pl.groups], dtype=np.int64)
        up = route(snap, nics, np.full(len(nics), roots[c]))
        for e in np.unique(up.hops).tolist():
            far = int(snap.peer[e])
            rows.append((e, _end(snap, far), c, 1.0))
            rows.append((far, _end(snap, e), c, 1.0))
    return Pattern.of(rows)


def _end(snap: Snapshot, port: int) -> int:
    """Where a one-link flow arriving at ``port`` ends: the port of a CA, a switch's
    port 0."""
    return int(snap.base_at[port]) if snap.is_switch[port] else port
