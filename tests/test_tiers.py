"""Switch tiers by distance from the end nodes (fabriclab.model.tiers), in process."""

from __future__ import annotations

import itertools

from fabriclab.ib import rates
from fabriclab.ib.enums import NodeType
from fabriclab.model.fabric import Fabric, Node
from fabriclab.model.tiers import assign_tiers, switch_tiers

W, S = rates.WIDTHS["4x"], rates.SPEEDS["NDR"]


def _fabric():
    """h1 - a - c - d - e - an(aggregation);  h2 - b - c;  lone switch f;  d has tier 7."""
    f = Fabric()
    guid = iter(range(0x100, 0x200))

    def switch(name, tier=0):
        return f.add(
            Node(NodeType.SWITCH, next(guid), 8, name, name=name, role="switch", tier=tier)
        )

    def ca(name, role="hca"):
        return f.add(Node(NodeType.CA, next(guid), 1, name, name=name, role=role))

    a, b, c, d, e, lone = (
        switch("a"),
        switch("b"),
        switch("c"),
        switch("d", 7),
        switch("e"),
        switch("f"),
    )
    h1, h2, an = ca("h1"), ca("h2"), ca("an", "aggregation")
    cables = [
        (h1, 1, a, 1),
        (h2, 1, b, 1),
        (a, 2, c, 1),
        (b, 2, c, 2),
        (c, 3, d, 1),
        (d, 2, e, 1),
        (e, 2, an, 1),
    ]
    for x, xp, y, yp in cables:
        f.connect(x.port(xp), y.port(yp), W, S)
    return f, {"a": a, "b": b, "c": c, "d": d, "e": e, "lone": lone, "h1": h1, "h2": h2}


def test_switch_tiers_count_hops_from_the_start_set():
    f, n = _fabric()
    tier = switch_tiers(f.switches(), {id(n["h1"])})
    assert {k: tier.get(id(n[k])) for k in "abcde"} == {"a": 1, "c": 2, "b": 3, "d": 3, "e": 4}
    assert id(n["lone"]) not in tier


def test_switch_tiers_walk_only_the_switches_given():
    _f, n = _fabric()
    tier = switch_tiers([n["a"], n["b"], n["c"], n["e"]], {id(n["h1"]), id(n["h2"])})
    assert {k: tier.get(id(n[k])) for k in "abce"} == {"a": 1, "b": 1, "c": 2, "e": None}


def test_assign_tiers_keeps_given_tiers_and_names_roles():
    f, n = _fabric()
    assign_tiers(f)
    # the aggregation node does not make e a leaf; d keeps its tier and stops the walk,
    # so e (reached by no walk) and the lone switch are tier 1
    assert [(k, n[k].tier, n[k].role) for k in ("a", "b", "c", "d", "e", "lone")] == [
        ("a", 1, "leaf"),
        ("b", 1, "leaf"),
        ("c", 2, "spine"),
        ("d", 7, "switch"),
        ("e", 1, "leaf"),
        ("lone", 1, "leaf"),
    ]


def test_assign_tiers_names_tiers_above_three():
    f = Fabric()
    chain = [f.add(Node(NodeType.SWITCH, 0x10 + i, 4, f"s{i}")) for i in range(5)]
    host = f.add(Node(NodeType.CA, 0x99, 1, "h mlx5_0"))
    f.connect(host.port(1), chain[0].port(1), W, S)
    for low, high in itertools.pairwise(chain):
        f.connect(low.port(2), high.port(3), W, S)
    assign_tiers(f)
    assert [s.role for s in chain] == ["leaf", "spine", "core", "tier-4", "tier-5"]
