"""Switch tiers by distance: a switch cabled to a starting end node is tier 1, its other
switch neighbours tier 2, and so on (a breadth-first search over the switches)."""

from __future__ import annotations

from collections.abc import Iterable

from .fabric import Fabric, Node

ROLE_BY_TIER = {1: "leaf", 2: "spine", 3: "core"}


def switch_tiers(switches: Iterable[Node], start_ends: set[int]) -> dict[int, int]:
    """id(switch) -> tier for ``switches`` reachable from the end nodes whose ids are in
    ``start_ends``: 1 when cabled to one of them, else one more than the nearest
    neighbour.  The search walks only through ``switches``; others are left out."""
    among = {id(n): n for n in switches}
    tier: dict[int, int] = {}
    frontier = []
    for n in among.values():
        if any(p.peer is not None and id(p.peer.node) in start_ends for p in n.iter_ports()):
            tier[id(n)] = 1
            frontier.append(n)
    level = 1
    while frontier:
        level += 1
        next_frontier = []
        for n in frontier:
            for p in n.iter_ports():
                q = p.peer
                if q is not None and id(q.node) in among and id(q.node) not in tier:
                    tier[id(q.node)] = level
                    next_frontier.append(q.node)
        frontier = next_frontier
    return tier


def assign_tiers(fabric: Fabric) -> None:
    """Give switches without a tier one by distance from the end nodes (every CA and
    router but SHARP Aggregation Nodes, which belong to their switch); a switch no end
    node reaches is tier 1.  A switch whose role is unset or plain ``switch`` is named
    after its tier (leaf, spine, core, tier-N)."""
    pending = [n for n in fabric.nodes if n.is_switch and not n.tier]
    if not pending:
        return
    ends = {id(n) for n in fabric.nodes if not n.is_switch and n.role != "aggregation"}
    tier = switch_tiers(pending, ends)
    for n in pending:
        n.tier = tier.get(id(n), 1)
        if n.role in ("", "switch"):
            n.role = ROLE_BY_TIER.get(n.tier, f"tier-{n.tier}")
