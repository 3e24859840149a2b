"""The fabric as the web view draws it: nodes and edges with positions computed here, by
tier (spines and cores above leaves, trays grouped by rack / NVLink domain below), in
one of three views:

- ``full``: every switch, every tray, every cable;
- ``summary``: every switch, the hosts collapsed per leaf (as UFM's network map
  collapses them, "Expand Hosts" in NVIDIA UFM Enterprise User Manual, "Network Map");
  ``focus=<leaf>`` expands one leaf's hosts;
- ``pods``: for three tiers and more, the switches below the top tier grouped into pods
  (the parts they connect among themselves) and the top tier into groups reaching the same
  pods; ``focus=<pod>`` opens one pod.

Cables between the same two drawn nodes are one edge (``count``; a single cable keeps
the id ``l<row>``, its port row, and its two ends' names, ``ends``, the targets of
fabriclab's faults)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from ..errors import ApiError
from ..view import Layout
from .meter import STATUS, Links

VIEWS = ("auto", "full", "summary", "pods")
FULL_MAX_EDGES = 5000  # auto: the full view up to this many cables
SUMMARY_MAX_EDGES = 6000  # auto: the summary up to this many edges, else pods
TOP_GROUPS_MAX = 64  # pods view: the top tier in at most this many groups by plane
X_GAP = 40.0  # pixels between neighbours in the widest row
Y_GAP = 400.0  # pixels between tiers


@dataclass
class _Group:
    """Drawn nodes: for each fabric node the drawn node it is part of (-1: none)."""

    of: np.ndarray  # int64, a drawn node per fabric node
    nodes: list[dict[str, Any]]  # the drawn nodes' data (id, label, kind, tier, ...)
    key: list[float]  # a drawn node's order within its row at tier 0


class Topo:
    """What the views need of a layout, worked out once: each HCA's tray and leaf, the
    pods and top-tier groups."""

    def __init__(self, layout: Layout):
        self.layout = layout
        n = layout.nodes
        self.top = int(layout.node_tier.max()) if layout.node_count else 0
        tray_of = {t: i for i, t in enumerate(layout.trays)}
        self.node_tray = np.asarray([tray_of.get(h, -1) for h in n["host"]], dtype=np.int64)
        dom_of = {d: i for i, d in enumerate(layout.domains)}
        self.tray_domain = np.full(len(layout.trays), -1, dtype=np.int64)
        for h, d in zip(n["host"], n["domain"], strict=True):
            if h in tray_of:
                self.tray_domain[tray_of[h]] = dom_of.get(d, -1)
        links = layout.links
        self.na = layout.port_node[links[:, 0]]
        self.nb = layout.port_node[links[:, 1]]
        # each HCA's leaf: the switch its first cabled port reaches
        self.ca_leaf = np.full(layout.node_count, -1, dtype=np.int64)
        sw = layout.node_switch
        for x, y in ((self.na, self.nb), (self.nb, self.na)):
            sel = ~sw[x] & sw[y] & (self.ca_leaf[x] < 0)
            self.ca_leaf[x[sel]] = y[sel]
        self.name_index = {name: i for i, name in enumerate(n["name"])}

    @cached_property
    def pods(self) -> tuple[np.ndarray, np.ndarray]:
        """Pod of each switch below the top tier and group of each top-tier switch (-1
        for anything else): (pod per node, top group per node)."""
        lay = self.layout
        parent = np.arange(lay.node_count)

        def find(i: int) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = int(parent[i])
            return i

        low = lay.node_switch & (lay.node_tier < self.top)
        sel = low[self.na] & low[self.nb]
        for x, y in zip(self.na[sel].tolist(), self.nb[sel].tolist(), strict=True):
            rx, ry = find(x), find(y)
            if rx != ry:
                parent[max(rx, ry)] = min(rx, ry)
        roots = np.asarray([find(i) for i in range(lay.node_count)])
        pod = np.full(lay.node_count, -1, dtype=np.int64)
        _, pod[low] = np.unique(roots[low], return_inverse=True)
        # the top tier by plane: the switches reaching the same places (the same rank of
        # switch, in node order, within each pod) are one group; by the pods they reach
        # when that makes too many
        rank = np.full(lay.node_count, -1, dtype=np.int64)
        for p in range(int(pod.max()) + 1 if low.any() else 0):
            for t in np.unique(lay.node_tier[pod == p]).tolist():
                members = np.nonzero((pod == p) & (lay.node_tier == t))[0]
                rank[members] = np.arange(len(members))
        top = lay.node_switch & (lay.node_tier == self.top)
        planes: dict[int, set[int]] = {int(i): set() for i in np.nonzero(top)[0]}
        reach: dict[int, set[int]] = {int(i): set() for i in np.nonzero(top)[0]}
        for x, y in ((self.na, self.nb), (self.nb, self.na)):
            s = top[x] & low[y]
            for t, p, r in zip(x[s].tolist(), pod[y[s]].tolist(), rank[y[s]].tolist(), strict=True):
                reach[t].add(p)
                planes[t].add(r)
        by = planes if len({frozenset(v) for v in planes.values()}) <= TOP_GROUPS_MAX else reach
        group = np.full(lay.node_count, -1, dtype=np.int64)
        keys: dict[frozenset[int], int] = {}
        for t, ps in by.items():
            group[t] = keys.setdefault(frozenset(ps), len(keys))
        return pod, group


def graph(topo: Topo, links: Links, view: str = "auto", focus: str | None = None) -> dict:
    """The drawing of ``view`` (``auto``: the fullest that stays readable)."""
    if view not in VIEWS:
        raise ApiError(400, f"view {view!r}: want one of {', '.join(VIEWS)}")
    if view == "auto":
        view = _auto(topo, links)
    if view == "pods" and topo.top < 3:  # no pods in two tiers: the summary
        view, focus = "summary", None
    group = {"full": _full, "summary": _summary, "pods": _pods}[view](topo, focus)
    edges = _edges(topo, links, group, each=view == "full")
    _place(topo, group, edges)
    return {
        "view": view,
        "focus": focus,
        "now": links.now,
        "nodes": group.nodes,
        "edges": edges,
        "counts": {
            "nodes": len(group.nodes),
            "edges": len(edges),
            "switches": int(topo.layout.node_switch.sum()),
            "trays": len(topo.layout.trays),
            "links": len(links.status),
            "down": int((links.status == 2).sum()),
            "faults": int(links.fault.sum()),
        },
    }


def _auto(topo: Topo, links: Links) -> str:
    if len(links.status) <= FULL_MAX_EDGES:
        return "full"
    g = _summary(topo, None)
    da, db = g.of[topo.na], g.of[topo.nb]
    keep = (da >= 0) & (db >= 0) & (da != db)
    pairs = np.unique(np.minimum(da, db)[keep] * len(g.nodes) + np.maximum(da, db)[keep])
    if len(pairs) <= SUMMARY_MAX_EDGES or topo.top < 3:
        return "summary"
    return "pods"


def _switch(topo: Topo, i: int) -> dict[str, Any]:
    n = topo.layout.nodes
    return {
        "id": f"n{i}",
        "label": n["name"][i],
        "kind": "switch",
        "role": n["role"][i],
        "tier": int(n["tier"][i]),
        "guid": n["guid"][i],
        "count": 1,
    }


def _trays(topo: Topo, g: _Group, cas: np.ndarray, racks: bool) -> None:
    """Draw the trays of HCAs ``cas`` (each tray once), in a rack box when ``racks``."""
    lay = topo.layout
    seen: dict[int, int] = {}
    for ca in cas.tolist():
        t = int(topo.node_tray[ca])
        if t < 0:
            continue
        if t not in seen:
            seen[t] = len(g.nodes)
            d = int(topo.tray_domain[t])
            node = {"id": f"t{t}", "label": lay.trays[t], "kind": "tray", "tier": 0, "count": 1}
            if racks and d >= 0:
                node["parent"] = f"r{d}"
            g.nodes.append(node)
            g.key.append(d * 1e6 + t)
        g.of[ca] = seen[t]
    if racks:
        for d in sorted({int(topo.tray_domain[t]) for t in seen} - {-1}):
            g.nodes.append(
                {"id": f"r{d}", "label": lay.domains[d], "kind": "rack", "tier": -1, "count": 0}
            )
            g.key.append(-1.0)


def _host_groups(topo: Topo, g: _Group, leaves: list[int], cas: np.ndarray) -> None:
    """Draw the hosts of each leaf of ``leaves`` as one node (the HCAs ``cas``)."""
    lay = topo.layout
    index = {}
    for leaf in leaves:
        mine = cas[topo.ca_leaf[cas] == leaf]
        if not len(mine):
            continue
        index[leaf] = len(g.nodes)
        trays = topo.node_tray[mine]
        g.nodes.append(
            {
                "id": f"h{leaf}",
                "label": f"{len(mine)} hosts",
                "kind": "hosts",
                "tier": 0,
                "count": len(mine),
                "leaf": lay.nodes["name"][leaf],
                "drill": {"view": "summary", "focus": lay.nodes["name"][leaf]},
            }
        )
        g.key.append(float(trays.mean()) if len(trays) else 0.0)
        g.of[mine] = index[leaf]


def _full(topo: Topo, focus: str | None) -> _Group:
    lay = topo.layout
    g = _Group(np.full(lay.node_count, -1, dtype=np.int64), [], [])
    for i in np.nonzero(lay.node_switch)[0].tolist():
        g.of[i] = len(g.nodes)
        g.nodes.append(_switch(topo, i))
        g.key.append(0.0)
    _trays(topo, g, np.nonzero(~lay.node_switch)[0], racks=True)
    return g


def _summary(topo: Topo, focus: str | None) -> _Group:
    lay = topo.layout
    g = _Group(np.full(lay.node_count, -1, dtype=np.int64), [], [])
    switches = np.nonzero(lay.node_switch)[0].tolist()
    for i in switches:
        g.of[i] = len(g.nodes)
        g.nodes.append(_switch(topo, i))
        g.key.append(0.0)
    cas = np.nonzero(~lay.node_switch)[0]
    leaf = _find_switch(topo, focus) if focus else -1
    if leaf >= 0:
        _trays(topo, g, cas[topo.ca_leaf[cas] == leaf], racks=False)
    rest = cas[g.of[cas] < 0]
    leaves = sorted(set(topo.ca_leaf[rest].tolist()) - {-1})
    _host_groups(topo, g, leaves, rest)
    return g


def _pods(topo: Topo, focus: str | None) -> _Group:
    lay = topo.layout
    pod, group = topo.pods
    g = _Group(np.full(lay.node_count, -1, dtype=np.int64), [], [])
    open_pod = -1
    if focus:
        if not focus.startswith("pod-") or not focus[4:].isdigit():
            raise ApiError(404, f"focus {focus!r}: no such pod (want pod-<n>)")
        open_pod = int(focus[4:])
        if open_pod > int(pod.max()):
            raise ApiError(404, f"focus {focus!r}: no such pod")
    cas = np.nonzero(~lay.node_switch)[0]
    for p in range(int(pod.max()) + 1):
        members = np.nonzero(pod == p)[0]
        if p == open_pod:
            for i in members.tolist():
                g.of[i] = len(g.nodes)
                g.nodes.append(_switch(topo, i))
                g.key.append(0.0)
            leaves = [i for i in members.tolist() if np.any(topo.ca_leaf[cas] == i)]
            _host_groups(topo, g, leaves, cas[np.isin(topo.ca_leaf[cas], leaves)])
            continue
        mine = cas[np.isin(topo.ca_leaf[cas], members)]
        g.of[members] = len(g.nodes)
        g.of[mine] = len(g.nodes)
        g.nodes.append(
            {
                "id": f"p{p}",
                "label": f"pod-{p}",
                "detail": f"{len(members)} switches, {len(mine)} HCAs",
                "kind": "pod",
                "tier": 1,
                "count": len(members),
                "drill": {"view": "pods", "focus": f"pod-{p}"},
            }
        )
        g.key.append(float(topo.node_tray[mine].mean()) if len(mine) else float(p))
    for k in range(int(group.max()) + 1):
        members = np.nonzero(group == k)[0]
        g.of[members] = len(g.nodes)
        g.nodes.append(
            {
                "id": f"c{k}",
                "label": f"plane {k}",
                "detail": f"{len(members)} {lay.nodes['role'][int(members[0])]} switches",
                "kind": "group",
                "tier": topo.top,
                "count": len(members),
            }
        )
        g.key.append(0.0)
    return g


def _find_switch(topo: Topo, name: str) -> int:
    i = topo.name_index.get(name, -1)
    if i < 0 or not topo.layout.node_switch[i]:
        raise ApiError(404, f"focus {name!r}: no such switch")
    return i


def _edges(topo: Topo, links: Links, g: _Group, each: bool) -> list[dict[str, Any]]:
    """The drawn edges: a cable each (``each``), else the cables between two drawn nodes
    as one."""
    lay = topo.layout
    da, db = g.of[topo.na], g.of[topo.nb]
    keep = np.nonzero((da >= 0) & (db >= 0) & (da != db))[0]
    lo, hi = np.minimum(da, db)[keep], np.maximum(da, db)[keep]
    key = np.arange(len(keep)) if each else lo * len(g.nodes) + hi
    pairs, inv = np.unique(key, return_inverse=True)
    count = np.bincount(inv, minlength=len(pairs))
    down = np.bincount(inv, weights=links.status[keep] == 2, minlength=len(pairs))
    degraded = np.bincount(inv, weights=links.status[keep] == 1, minlength=len(pairs))
    fault = np.bincount(inv, weights=links.fault[keep], minlength=len(pairs))
    util = np.zeros(len(pairs), dtype=np.float32)
    np.maximum.at(util, inv, links.util[keep])
    first = np.full(len(pairs), -1, dtype=np.int64)
    first[inv[::-1]] = np.arange(len(keep))[::-1]  # a cable of each edge (the first)
    rows = lay.links[:, 0]
    ids = [n["id"] for n in g.nodes]
    out = []
    for e in range(len(pairs)):
        f = int(first[e])
        a, b = int(lo[f]), int(hi[f])
        c, d = int(count[e]), int(down[e])
        if d == c:
            st = 2
        elif d or degraded[e]:
            st = 1
        else:
            st = 0
        rec: dict[str, Any] = {
            "source": ids[a],
            "target": ids[b],
            "count": c,
            "down": d,
            "status": STATUS[st],
            "fault": int(fault[e]),
            "util": round(float(util[e]), 4),
        }
        if c == 1:
            k = int(keep[f])
            rec["id"] = f"l{int(rows[k])}"
            rec["ends"] = _ends(lay, k)
            rec["ports"] = [lay.port_name(int(r)) for r in lay.links[k]]
        else:
            rec["id"] = f"e{ids[a]}-{ids[b]}"
        out.append(rec)
    return out


def _ends(lay: Layout, k: int) -> list[str]:
    """The link's two ends as fabriclab names them (``LAB-IBLEAF-01[5]``), a switch's
    end first."""
    ends = []
    for r in lay.links[k].tolist():
        n = lay.ports["node"][r]
        ends.append((not lay.node_switch[n], f"{lay.nodes['name'][n]}[{lay.ports['num'][r]}]"))
    return [name for _, name in sorted(ends)]


def _place(topo: Topo, g: _Group, edges: list[dict[str, Any]]) -> None:
    """Positions by tier, top tier on top; tier 0 in its own order (racks, trays), each
    tier above at the mean place of what it links below (barycentre order)."""
    index = {n["id"]: i for i, n in enumerate(g.nodes)}
    tiers = sorted({n["tier"] for n in g.nodes if n["tier"] >= 0})
    rows = {t: [i for i, n in enumerate(g.nodes) if n["tier"] == t] for t in tiers}
    if not rows:
        return
    widest = max(len(r) for r in rows.values())
    width = max(widest * X_GAP, X_GAP)
    below: dict[int, list[int]] = {}
    for e in edges:
        a, b = index[e["source"]], index[e["target"]]
        ta, tb = g.nodes[a]["tier"], g.nodes[b]["tier"]
        if ta != tb:
            hi, lo = (a, b) if ta > tb else (b, a)
            below.setdefault(hi, []).append(lo)
    x: dict[int, float] = {}
    top = tiers[-1]
    for t in tiers:
        row = rows[t]
        if t == tiers[0]:
            order = sorted(row, key=lambda i: (g.key[i], i))
        else:
            bary = {
                i: float(np.mean([x[j] for j in below.get(i, []) if j in x] or [width]))
                for i in row
            }
            order = sorted(row, key=lambda i: (bary[i], i))
        gaps = _gaps(g, order) if t == tiers[0] else [0] * len(order)
        slots = len(order) + gaps[-1] if order else 1
        step = width / max(slots, 1)
        for k, i in enumerate(order):
            x[i] = (k + gaps[k] + 0.5) * step
            g.nodes[i]["position"] = {"x": round(x[i], 1), "y": (top - t) * Y_GAP}


def _gaps(g: _Group, order: list[int]) -> list[int]:
    """A slot left empty between racks: the empty slots before each node."""
    gaps, n, last = [], 0, None
    for i in order:
        rack = g.nodes[i].get("parent")
        if last is not None and rack != last:
            n += 1
        last = rack
        gaps.append(n)
    return gaps
