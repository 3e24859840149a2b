"""How a MAD crosses the lab fabric, in-process (IBA Vol. 1, 14.2.2): LID routing through
forwarding tables the SMA was given by Set, directed routes out and back, which links a
packet may take, and the counters each crossing moves."""

from __future__ import annotations

import pytest

from fabriclab.ib.enums import PhysState, PortState
from fabriclab.ib.mad.consts import STATUS_OK, Attr, Method
from fabriclab.ib.mad.layouts import SWITCH_INFO
from fabriclab.model.build import build
from fabriclab.sim.fabric.router import Router, dr_in, dr_out, lid_route
from fabriclab.sim.fabric.sma import Sma
from fabriclab.sim.fabric.state import SimFabric
from fabriclab.spec.load import load_spec

LEAF = "MF0;LAB-IBLEAF-01:MQM9701/U1"
SPINE = "MF0;LAB-IBSPINE-01:MQM9701/U1"
W1 = "sched-worker1 mlx5_0"
W2 = "sched-worker2 mlx5_0"  # LID 104, on leaf port 5
SET = int(Method.SET)


class Lab:
    def __init__(self):
        self.cluster = build(load_spec("lab"))
        self.sim = SimFabric(self.cluster.fabric)
        self.sma = Sma()

    def node(self, desc: str):
        return self.sim.node_of(self.cluster.fabric.find(desc))

    def port(self, desc: str, num: int | None = None):
        node = self.node(desc)
        return node.ports[num if num is not None else (0 if node.is_switch else 1)]

    def write_lft(self, desc: str, routes: dict[int, int]) -> None:
        """The switch's forwarding table set the way an SM sets it: LinearFDB blocks,
        then SwitchInfo.LinearFdbTop."""
        p0 = self.port(desc)
        sw = p0.node.sw
        top = max(routes)
        for block in range(top // 64 + 1):
            data = bytes(routes.get(block * 64 + i, 0xFF) for i in range(64))
            assert self.sma.handlers[Attr.LINEAR_FDB](p0, SET, block, data)[0] == STATUS_OK
        si = SWITCH_INFO.pack({"LinearFdbTop": top}, base=sw.switch_info())
        assert self.sma.handlers[Attr.SWITCH_INFO](p0, SET, 0, si)[0] == STATUS_OK

    def route(self):
        """Every CA's LID and both switches' LIDs routed: CAs on leaf ports 1-8, the
        spine behind leaf port 9."""
        leaf = {100 + i: 1 + i for i in range(8)}
        leaf.update({1: 9, 2: 0})
        self.write_lft(LEAF, leaf)
        spine = {100 + i: 1 for i in range(8)}
        spine.update({1: 0, 2: 1})
        self.write_lft(SPINE, spine)

    def activate(self) -> None:
        for node in self.sim.nodes:
            for p in node.ports:
                if p is not None and p.up:
                    p.state = PortState.ACTIVE


@pytest.fixture()
def lab() -> Lab:
    return Lab()


def test_nothing_is_routed_before_the_sm_writes_the_tables(lab):
    """A switch without a forwarding entry for the DLID drops the packet and counts
    PortRcvSwitchRelayErrors on the port it came in by."""
    src = lab.port(W1)
    dest, hops = lid_route(src, 104, True)
    assert dest is None and hops == [(src, lab.port(LEAF, 1))]
    assert lab.port(LEAF, 1).flush().view()["PortRcvSwitchRelayErrors"] == 1


def test_a_switchs_own_packet_with_no_route_is_no_relay_error(lab):
    """What a switch's own port 0 sends (a Notice to its SM, an answer) before its
    forwarding table has an entry for the DLID is dropped where it starts: it was not
    received on any port, so no PortRcvSwitchRelayErrors (IBA 16.1.3.5 counts packets
    received on the port); a packet that came in over a link still counts there."""
    leaf0 = lab.port(LEAF)
    assert lid_route(leaf0, 100, True) == (None, [])
    assert leaf0.flush().view()["PortRcvSwitchRelayErrors"] == 0
    # one hop on, the spine receives it over a link: a relay error at its port 1
    lab.write_lft(LEAF, {100: 9})
    dest, hops = lid_route(leaf0, 100, True)
    assert dest is None and hops == [(lab.port(LEAF, 9), lab.port(SPINE, 1))]
    assert lab.port(SPINE, 1).flush().view()["PortRcvSwitchRelayErrors"] == 1
    assert lab.port(SPINE).flush().view()["PortRcvSwitchRelayErrors"] == 0


def test_lid_routing_through_tables_written_by_set(lab):
    lab.route()
    src = lab.port(W1)
    dest, hops = lid_route(src, 104, True)
    assert dest is lab.port(W2)
    assert hops == [(src, lab.port(LEAF, 1)), (lab.port(LEAF, 5), dest)]
    # to the switches themselves: LFT entry 0 is the switch's port 0
    assert lid_route(src, 2, True)[0] is lab.port(LEAF)
    dest, hops = lid_route(src, 1, True)
    assert dest is lab.port(SPINE) and len(hops) == 2
    # and back from the spine, through its own table
    assert lid_route(lab.port(SPINE), 100, True)[0] is src
    # a LID nobody has, routed to a CA, goes nowhere
    assert lid_route(src, 3, True)[0] is None


def test_a_port_answers_every_lid_of_its_lmc(lab):
    lab.route()
    w2 = lab.port(W2)
    w2.lid, w2.lmc = 104, 1
    lab.write_lft(LEAF, {**{100 + i: 1 + i for i in range(8)}, 105: 5})
    assert lid_route(lab.port(W1), 105, True)[0] is w2
    assert w2.has_lid(104) and w2.has_lid(105) and not w2.has_lid(106)


def test_only_smps_cross_links_that_are_not_active(lab):
    """LID-routed SMPs travel on VL15 and need only physically up links; anything else
    needs both ends ACTIVE, and a port that cannot send counts PortXmitDiscards."""
    lab.route()
    src = lab.port(W1)
    assert lid_route(src, 104, True)[0] is lab.port(W2)
    assert lid_route(src, 104, False)[0] is None
    assert src.flush().view()["PortXmitDiscards"] == 1
    lab.activate()
    assert lid_route(src, 104, False)[0] is lab.port(W2)


def test_a_forwarding_loop_ends(lab):
    lab.route()
    lab.write_lft(LEAF, {150: 9})
    lab.write_lft(SPINE, {150: 1})
    dest, hops = lid_route(lab.port(W1), 150, True)
    assert dest is None and len(hops) > 60


def test_crossings_count_packets_on_both_ends(lab):
    lab.route()
    src = lab.port(W1)
    lid_route(src, 104, True)
    assert src.flush().view()["PortXmitPkts"] == 1
    assert lab.port(LEAF, 1).flush().view()["PortRcvPkts"] == 1
    assert lab.port(LEAF, 5).flush().view()["PortXmitPkts"] == 1
    assert lab.port(W2).flush().view()["PortRcvPkts"] == 1


def test_directed_route_out_and_back(lab):
    """CA -> leaf (out its port 9) -> spine; the return path names the ports to go back
    by, and following it from the spine ends at the CA."""
    src = lab.port(W1)
    path = bytes([0, 1, 9]) + bytes(61)
    dest, rpath, hops = dr_out(src, path, 2)
    assert dest is lab.port(SPINE, 1)
    assert list(rpath[:3]) == [1, 1, 1]
    assert hops == [(src, lab.port(LEAF, 1)), (lab.port(LEAF, 9), dest)]
    assert dr_in(dest, bytes(rpath), 2) is src
    # hop count 0: the SMP is for the source itself
    assert dr_out(src, path, 0)[0] is src


def test_a_ca_does_not_forward_directed_routes(lab):
    p0 = lab.port(LEAF)
    assert dr_out(p0, bytes([0, 1, 1]) + bytes(61), 1)[0] is lab.port(W1)
    assert dr_out(p0, bytes([0, 1, 1]) + bytes(61), 2)[0] is None
    # nor does a CA send through a port it was not asked from
    assert dr_out(lab.port(W1), bytes([0, 2]) + bytes(62), 1)[0] is None


def test_a_directed_route_over_a_disabled_link_is_lost(lab):
    lab.port(LEAF, 9).phys = PhysState.DISABLED
    src = lab.port(W1)
    assert dr_out(src, bytes([0, 1, 9]) + bytes(62), 2)[0] is None
    assert lab.port(LEAF, 9).flush().view()["PortXmitDiscards"] == 1
    # a port that does not exist
    assert dr_out(src, bytes([0, 1, 99]) + bytes(61), 2)[0] is None


def test_the_router_remembers_routes_until_told_to_forget(lab):
    router = Router()
    lab.route()
    src = lab.port(W1)
    assert router.lid_route(src, 104, True)[0] is lab.port(W2)
    assert router.lid_route(src, 104, True)[0] is lab.port(W2)
    assert src.flush().view()["PortXmitPkts"] == 2  # a remembered route counts too
    lab.write_lft(LEAF, {104: 6})
    assert router.lid_route(src, 104, True)[0] is lab.port(W2)  # remembered
    router.forget(links=False)
    assert router.lid_route(src, 104, True)[0] is None  # leaf port 6 leads to LID 105
    # directed routes are kept until the links change
    path = bytes([0, 1, 9]) + bytes(61)
    assert router.dr_out(src, path, 2)[0] is lab.port(SPINE, 1)
    lab.port(LEAF, 9).phys = PhysState.DISABLED
    router.forget(links=False)
    assert router.dr_out(src, path, 2)[0] is lab.port(SPINE, 1)
    router.forget(links=True)
    assert router.dr_out(src, path, 2)[0] is None


def test_a_link_change_forgets_only_the_routes_that_cross_it(lab, monkeypatch):
    """A link going down (a flap, a fault) forgets the routes over it and keeps the
    rest: a storm of flaps elsewhere does not make every MAD walk its path again."""
    import fabriclab.sim.fabric.router as router_mod

    walks = []
    real = router_mod.dr_out
    monkeypatch.setattr(router_mod, "dr_out", lambda *a: walks.append(a) or real(*a))
    router = Router()
    src = lab.port(W1)
    to_spine = bytes([0, 1, 9]) + bytes(61)
    to_w2 = bytes([0, 1, 5]) + bytes(61)
    assert router.dr_out(src, to_spine, 2)[0] is lab.port(SPINE, 1)
    assert router.dr_out(src, to_w2, 2)[0] is lab.port(W2)
    assert len(walks) == 2
    w2_link = lab.port(LEAF, 5)
    w2_link.phys = lab.port(W2).phys = PhysState.POLLING  # W2's cable fails
    router.forget_links([w2_link])
    assert router.dr_out(src, to_spine, 2)[0] is lab.port(SPINE, 1)
    assert len(walks) == 2  # remembered: it does not cross W2's link
    assert router.dr_out(src, to_w2, 2)[0] is None  # walked again: the link is down
    assert len(walks) == 3
    w2_link.phys = lab.port(W2).phys = PhysState.LINKUP
    router.forget_links([lab.port(W2)])  # either end names the link
    assert router.dr_out(src, to_w2, 2)[0] is lab.port(W2)


def test_routes_remembered_over_link_changes_are_the_routes_walked():
    """Any mix of link changes and routes asked for: what the router remembers is what
    a fresh walk finds (directed routes and LID routes, SMPs or not)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    lab = Lab()
    lab.route()
    lab.activate()
    leaf_ports = [lab.port(LEAF, n) for n in range(1, 10)]
    cas = [lab.node(f"sched-worker{i} mlx5_0").ports[1] for i in (1, 2)]
    paths = [bytes([0, 1, n]) + bytes(61) for n in range(1, 10)]
    paths += [bytes([0, 1, 9, 1]) + bytes(60)]

    @settings(max_examples=200, deadline=None)
    @given(
        st.lists(
            st.tuples(st.integers(0, 8), st.integers(0, len(paths) - 1), st.integers(0, 9)),
            max_size=30,
        )
    )
    def run(steps):
        router = Router()
        for p in leaf_ports:
            if p.peer is not None:
                p.phys = p.peer.phys = PhysState.LINKUP
                p.state = p.peer.state = PortState.ACTIVE
        for flip, path, lid in steps:
            p = leaf_ports[flip]
            if p.peer is not None and lid % 3 == 0:  # the link goes down, or comes back
                up = p.phys != PhysState.LINKUP
                p.phys = p.peer.phys = PhysState.LINKUP if up else PhysState.POLLING
                p.state = p.peer.state = PortState.ACTIVE if up else PortState.DOWN
                router.forget_links([p])
            for src in cas:
                hops = 3 if path == len(paths) - 1 else 2
                got, walked = router.dr_out(src, paths[path], hops), dr_out(src, paths[path], hops)
                assert got[0] is walked[0] and bytes(got[1]) == bytes(walked[1])
                for smp in (True, False):
                    assert (
                        router.lid_route(src, 100 + lid, smp)[0]
                        is lid_route(src, 100 + lid, smp)[0]
                    )

    run()
