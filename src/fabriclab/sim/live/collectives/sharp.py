"""SHARP aggregation trees for CollNet: which switches can reduce, and the switch at the
top of each channel's tree.

A switch reduces in the network when its SHARP Aggregation Node is there: the CA on
its AN port (spec ``fat_tree.sharp``; Quantum-2's port 65, :mod:`...ib.devices`).
SHARP's aggregation manager builds a tree over the fabric's switches; fabriclab takes
the switch half-way along the longest route between the channel's HCAs (a spine for
HCAs under different leaves of a two-tier tree, a core switch across pods of three,
the leaf itself when they share one) and refuses the tree when a switch on the routes
to it has no Aggregation Node.
"""

from __future__ import annotations

import numpy as np

from ...fabric.datapaths import DELIVERED, Snapshot, route
from ...fabric.state import SimFabric
from .placement import Placement


def capable(sim: SimFabric) -> np.ndarray:
    """Per node of ``sim``: whether it is a switch with a SHARP Aggregation Node."""
    out = np.zeros(len(sim.nodes), dtype=bool)
    for n in sim.nodes:
        if not n.is_switch:
            continue
        hw = n.fabric_node.hardware
        an = getattr(hw, "an_port", None)
        if an and an < len(n.ports) and n.ports[an] is not None:
            peer = n.ports[an].peer
            out[n.index] = peer is not None and not peer.node.is_switch
    return out


def _switches(snap: Snapshot, hops: np.ndarray) -> list[int]:
    """The switch nodes a route's hops arrive at, in order."""
    at = snap.peer[hops]
    return [int(snap.node[i]) for i in at.tolist() if snap.is_switch[i]]


def _name(snap: Snapshot, node: int) -> str:
    port0 = snap.ports[int(snap.base[node])]
    return str(port0.node.fabric_node.name) if port0 is not None else f"node {node}"


def roots_for(
    snap: Snapshot, pl: Placement, nch: int, able: np.ndarray | None
) -> tuple[list[int] | None, str | None]:
    """Each channel's aggregation root as a flat port (the switch's port 0), or None
    and why there is no tree."""
    if able is None or not able.any():
        return None, "no switch on the fabric has a SHARP Aggregation Node"
    roots: list[int] = []
    cache: dict[tuple, int] = {}
    for c in range(nch):
        nics = [snap.index(g.nics[c % len(g.nics)]) for g in pl.groups]
        key = tuple(nics)
        if key in cache:
            roots.append(cache[key])
            continue
        src = np.asarray(nics, dtype=np.int64)
        r = route(snap, src, np.full(len(src), src[0]))
        if (r.end[1:] != DELIVERED).any():
            return None, "an HCA of the job has no route to the others"
        paths = [_switches(snap, r.hops[r.ptr[f] : r.ptr[f + 1]]) for f in range(1, len(src))]
        longest = max(paths, key=len)
        top = longest[(len(longest) - 1) // 2]
        port0 = int(snap.base[top])
        up = route(snap, src, np.full(len(src), port0))
        if (up.end != DELIVERED).any():
            return (
                None,
                f"no route to the aggregation switch {_name(snap, top)}",
            )
        visited = {int(snap.node[i]) for i in snap.peer[up.hops].tolist()}
        visited = {v for v in visited if snap.is_switch[snap.base[v]]}
        lacking = sorted(v for v in visited if not able[v])
        if lacking:
            name = _name(snap, lacking[0])
            return None, f"switch {name} on the aggregation tree has no SHARP Aggregation Node"
        cache[key] = port0
        roots.append(port0)
    return roots, None
