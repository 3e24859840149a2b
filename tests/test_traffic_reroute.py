"""A forwarding-table write or a port change routes again only the flows through the
switches and ports it changed: a flow elsewhere keeps its route (it is not routed
again: the engine counts every flow it routes), a flow through the changed switch
follows the new entry, and after any mix of changes (a hypothesis run) the routes are
those a full re-route on a fresh snapshot gives."""

from __future__ import annotations

import numpy as np
import pytest
import yaml
from helpers import fat_tree_64
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fabriclab.ib.enums import PortState
from fabriclab.ib.rates import WIDTHS
from fabriclab.model.build import build
from fabriclab.sim.fabric import minhop
from fabriclab.sim.fabric.datapaths import DELIVERED, Snapshot
from fabriclab.sim.fabric.state import SimFabric
from fabriclab.sim.live.clock import VirtualClock
from fabriclab.sim.live.traffic.engine import TrafficEngine
from fabriclab.sim.live.traffic.routes import route_flows
from fabriclab.spec.load import load_spec

SPEC = fat_tree_64("reroute-64", "rr[01-16]")  # 64 HCAs, 4 leaves, 4 spines


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    path = tmp_path_factory.mktemp("rr") / "reroute-64.yaml"
    path.write_text(yaml.safe_dump(SPEC))
    return build(load_spec(str(path)))


def _fabric(cluster):
    sim = SimFabric(cluster.fabric)
    minhop.fill(sim)
    cas = [n.ports[1] for n in sim.nodes if not n.is_switch]
    leaves = {}
    for p in cas:
        leaves.setdefault(p.peer.node.index, []).append(p)
    return sim, cas, list(leaves.values())


def _same_as_a_full_reroute(eng: TrafficEngine, sim: SimFabric) -> None:
    f, r = eng._f, eng._routes
    full = route_flows(Snapshot(sim), f.src[: f.n], f.dst[: f.n], None)
    for name in ("ptr", "hops", "end", "at", "mtu"):
        assert np.array_equal(getattr(r, name), getattr(full, name)), name


def test_an_lft_write_routes_again_only_the_flows_through_the_switch(cluster):
    sim, _cas, leaves = _fabric(cluster)
    eng = TrafficEngine(sim, VirtualClock())
    a, b = leaves[0][0], leaves[0][1]  # two HCAs on one leaf: their flow stays there
    c = leaves[1][0]  # on another leaf: a flow to it crosses a spine
    local = eng.add(a, b, rate=1e9)
    far = eng.add(a, c, rate=1e9)
    eng.advance()
    before = eng.routings
    hops = eng._routes.hops[eng._routes.ptr[1] : eng._routes.ptr[2]]
    spine = eng._snap.ports[int(eng._snap.peer[hops[1]])].node  # where the far flow turns
    sw = spine.sw
    lid = c.lid
    block = bytearray(sw.lft_block(lid // 64))
    turn = next(
        p.num for p in spine.ports[1:] if p is not None and p.num != block[lid % 64] and p.peer
    )
    block[lid % 64] = turn  # the spine sends c's packets down another leaf
    sw.write_lft_block(lid // 64, bytes(block))
    eng.advance()
    assert eng.routings == before + 1  # the far flow alone
    r = eng._routes
    far_hops = r.hops[r.ptr[1] : r.ptr[2]].tolist()
    assert eng._snap.index(spine.ports[turn]) in far_hops  # it follows the new entry
    assert r.end[1] != DELIVERED  # down the wrong leaf: not delivered
    assert [f.state for f in eng.flows([local, far])] == ["running", "retrying"]
    _same_as_a_full_reroute(eng, sim)
    # and a port going down routes again the flows through it alone
    before = eng.routings
    a.state = PortState.INIT
    a.changed()
    eng.advance()
    assert eng.routings == before + 2  # both start at a
    _same_as_a_full_reroute(eng, sim)


_CHANGE = st.tuples(
    st.sampled_from(["lft", "port", "degrade", "everything"]),
    st.integers(0, 10_000),
    st.integers(0, 10_000),
    st.integers(0, 70),
)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(changes=st.lists(st.lists(_CHANGE, min_size=1, max_size=4), max_size=8))
def test_routes_after_any_changes_are_those_of_a_full_reroute(cluster, changes):
    sim, cas, _ = _fabric(cluster)
    eng = TrafficEngine(sim, VirtualClock())
    eng.all_to_all(cas[::4])
    switches = [n for n in sim.nodes if n.is_switch]
    ports = [p for n in sim.nodes for p in n.ports if p is not None and p.num]
    for batch in changes:  # changes between two routings
        for kind, a, b, c in batch:
            if kind == "lft":
                sw = switches[a % len(switches)].sw
                lid = b % max(1, sw.lft_top + 1)
                block = bytearray(sw.lft_block(lid // 64))
                block[lid % 64] = c if c <= 64 else 0xFF
                sw.write_lft_block(lid // 64, bytes(block))
            elif kind == "port":
                p = ports[a % len(ports)]
                p.state = PortState.ACTIVE if b % 2 else PortState.INIT
                p.changed()
            elif kind == "degrade":  # a link retrained narrower: its capacity moves
                p = ports[a % len(ports)]
                p.width_trained = WIDTHS["1x"] if b % 2 else None
                p.changed()
            else:
                sim.generation.bump()
        eng.advance()
        _same_as_a_full_reroute(eng, sim)
        ref = TrafficEngine(sim, VirtualClock())  # every flow routed on a fresh snapshot
        ref.all_to_all(cas[::4])
        assert np.array_equal(eng._f.rate[: eng._f.n], ref._f.rate[: ref._f.n])
        assert np.array_equal(eng._f.state[: eng._f.n], ref._f.state[: ref._f.n])


def test_an_entry_no_flow_follows_leaves_the_rates_alone(cluster):
    """A block written with a change for a LID no flow goes to: the flows through the
    switch are routed again, find the routes they had, and nothing else is redone."""
    sim, _cas, leaves = _fabric(cluster)
    eng = TrafficEngine(sim, VirtualClock())
    a, c = leaves[0][0], leaves[1][0]
    eng.add(a, c, rate=1e9)
    eng.advance()
    x, routes, before = eng._x, eng._routes, eng.routings
    spine = eng._snap.ports[int(eng._snap.peer[routes.hops[1]])].node
    idle = leaves[2][0].lid  # no flow goes there
    block = bytearray(spine.sw.lft_block(idle // 64))
    block[idle % 64] = 0xFF
    spine.sw.write_lft_block(idle // 64, bytes(block))
    eng.advance()
    assert eng.routings == before + 1  # routed again ...
    assert eng._x is x and eng._routes is routes  # ... to where it went: nothing redone
    _same_as_a_full_reroute(eng, sim)
