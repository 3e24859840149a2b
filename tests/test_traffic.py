"""Traffic that moves counters, in-process: flows routed hop by hop over the forwarding
tables, max-min fair rates, and the counters of every port along each path, exact under
the virtual clock."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from fabriclab.errors import InputError
from fabriclab.ib.enums import PhysState, PortState
from fabriclab.ib.mad.consts import STATUS_OK, Attr, Method
from fabriclab.ib.mad.layouts import PORT_INFO
from fabriclab.model.build import build
from fabriclab.sim.fabric import minhop
from fabriclab.sim.fabric.counters import NAMES
from fabriclab.sim.fabric.sma import Sma
from fabriclab.sim.fabric.state import SimFabric
from fabriclab.sim.live.clock import VirtualClock
from fabriclab.sim.live.traffic.engine import TrafficEngine
from fabriclab.sim.live.traffic.maxmin import maxmin
from fabriclab.spec.load import parse_spec_text

# Four trays of one HCA, two leaves, two spines: every leaf has one uplink to each spine.
SPEC = {
    "name": "traffic",
    "trays": [{"hosts": "t[1-4]", "gpus": 1, "hcas": 1}],
    "fabric": {
        "fat_tree": {
            "tiers": 2,
            "switch": "quantum-2",
            "rail_optimized": False,
            "hosts_per_leaf": 2,
            "leaf_uplinks": 2,
            "spines": 2,
            "names": {"leaf": "LEAF-{n}", "spine": "SPINE-{n}"},
        }
    },
}
NDR_4X = 400e9 / 8  # bytes/s: 4 lanes x 100 Gb/s of data after encoding
MTU = 4096
WIRE = (MTU + 26) / MTU  # link bytes per payload byte: LRH 8, BTH 12, ICRC 4, VCRC 2


def cluster():
    return build(parse_spec_text(yaml.safe_dump(SPEC), "traffic.yaml"))


class Net:
    """The small fabric, routed min-hop, under a virtual clock."""

    def __init__(self):
        self.cluster = cluster()
        self.sim = SimFabric(self.cluster.fabric)
        minhop.fill(self.sim)
        self.clock = VirtualClock()
        self.eng = TrafficEngine(self.sim, self.clock)

    def ca(self, host: str):
        return self.sim.port_of(self.cluster.fabric.find(f"{host} mlx5_0").port(1))

    def sw(self, name: str):
        return next(
            n for n in self.sim.nodes if n.fabric_node.desc.split(";")[-1].startswith(f"{name}:")
        )

    def port(self, name: str, num: int):
        return self.sw(name).ports[num]

    def uplink(self, leaf: str, spine: str):
        return next(
            p
            for p in self.sw(leaf).ports
            if p is not None and p.peer is not None and p.peer.node is self.sw(spine)
        )

    def route_via(self, leaf: str, lid: int, out: int) -> None:
        """Set one LFT entry of ``leaf`` the way an SM writes a block."""
        sw = self.sw(leaf).sw
        block = bytearray(sw.lft_block(lid // 64))
        block[lid % 64] = out
        sw.write_lft_block(lid // 64, bytes(block))

    def run(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.eng.advance()

    def counters(self, ext: bool = True) -> dict:
        """Every port's counters (the view asked for), by port; zeros left out."""
        out = {}
        for n in self.sim.nodes:
            for p in n.ports:
                if p is None:
                    continue
                c = p.flush()
                v = c.view_ext() if ext else c.view()
                v = {k: x for k, x in v.items() if x}
                if v:
                    out[p] = v
        return out


def path(src, dst) -> list[tuple]:
    """The (egress, ingress) hops from ``src`` to ``dst``, read from the LFTs here."""
    hops, egress = [], src
    while True:
        ingress = egress.peer
        hops.append((egress, ingress))
        if not ingress.node.is_switch:
            assert ingress is dst
            return hops
        egress = ingress.node.ports[ingress.node.sw.out_port(dst.lid)]


def words(size: int, mtu: int = MTU) -> tuple[int, int]:
    """Packets and PortXmitData words of a message of ``size`` bytes: each packet its
    payload (padded to 4 bytes) plus LRH 8 + BTH 12 + ICRC 4 bytes."""
    full, rest = divmod(size, mtu)
    pkts = full + (1 if rest else 0)
    return pkts, full * (mtu // 4 + 6) + ((-(-rest // 4) + 6) if rest else 0)


@pytest.fixture()
def net():
    return Net()


def test_a_flow_of_known_size_moves_every_port_of_its_path_by_exactly_its_words(net):
    src, dst = net.ca("t1"), net.ca("t3")
    hops = path(src, dst)
    assert len(hops) == 4  # CA -> leaf -> spine -> leaf -> CA: across the spine
    size = 10_000_003  # not a whole number of packets nor of words
    fid = net.eng.add(src, dst, bytes=size)
    # in uneven steps: the fractions of a byte carry from one step to the next
    for dt in (1e-6, 3.3e-5, 7e-6, 1e-3):
        net.run(dt)
    (flow,) = net.eng.flows([fid])
    assert (flow.state, flow.delivered, flow.sent, flow.rate) == ("done", size, size, 0.0)
    pkts, wds = words(size)
    want = {}
    for egress, ingress in hops:
        want[egress] = {"PortXmitData": wds, "PortXmitPkts": pkts, "PortUnicastXmitPkts": pkts}
        want[ingress] = {"PortRcvData": wds, "PortRcvPkts": pkts, "PortUnicastRcvPkts": pkts}
    assert net.counters(ext=True) == want
    assert net.counters(ext=False) == {
        p: {k: v for k, v in w.items() if "Unicast" not in k} for p, w in want.items()
    }
    # nothing more moves once it is done
    net.run(1.0)
    assert net.counters() == want


def test_the_flow_runs_at_the_link_rate_and_ends_when_its_bytes_are_delivered(net):
    size = 5 * 10**9
    fid = net.eng.add(net.ca("t1"), net.ca("t3"), bytes=size)
    (flow,) = net.eng.flows([fid])
    assert flow.rate == NDR_4X / WIRE
    net.run(0.05)
    assert net.eng.flows([fid])[0].delivered == int(NDR_4X / WIRE * 0.05)
    net.run(size / flow.rate - 0.05 - 1e-6)
    assert net.eng.flows([fid])[0].state == "running"
    net.run(2e-6)
    assert net.eng.flows([fid])[0].state == "done"


def test_two_flows_over_one_uplink_each_get_half_and_it_counts_xmit_wait(net):
    t3, t4 = net.ca("t3"), net.ca("t4")
    up = net.uplink("LEAF-1", "SPINE-1")
    for lid in (t3.lid, t4.lid):
        net.route_via("LEAF-1", lid, up.num)  # both flows up the same uplink
    a = net.eng.add(net.ca("t1"), t3)
    b = net.eng.add(net.ca("t2"), t4)
    half = NDR_4X / 2 / WIRE
    assert [f.rate for f in net.eng.flows()] == [half, half]
    net.run(1e-3)
    sent = {f.id: f.sent for f in net.eng.flows()}
    assert sent == {a: int(half * 1e-3), b: int(half * 1e-3)}
    c = net.counters()
    per_flow = (sent[a] // MTU) * (MTU // 4 + 6)
    assert c[up]["PortXmitData"] == 2 * per_flow
    assert c[up.peer]["PortRcvData"] == 2 * per_flow
    # each sender offers its link's 50 GB/s; the uplink sends 50 of 100: 50 GB/s of
    # demand it cannot send, one tick per 8 bytes
    assert c[up]["PortXmitWait"] == int(NDR_4X * 1e-3 / 8)
    assert "PortXmitWait" not in c[net.ca("t1")] and "PortXmitWait" not in c[net.ca("t2")]
    other = net.uplink("LEAF-1", "SPINE-2")
    assert other not in c


def test_a_rate_limited_flow_gets_its_rate_and_the_rest_goes_to_the_other(net):
    t3, t4 = net.ca("t3"), net.ca("t4")
    up = net.uplink("LEAF-1", "SPINE-1")
    for lid in (t3.lid, t4.lid):
        net.route_via("LEAF-1", lid, up.num)
    slow = net.eng.add(net.ca("t1"), t3, rate=1e9)
    fast = net.eng.add(net.ca("t2"), t4)
    rates = {f.id: f.rate for f in net.eng.flows()}
    assert rates[slow] == 1e9
    assert rates[fast] == pytest.approx(NDR_4X / WIRE - 1e9, rel=1e-12)
    net.run(0.5)
    (f,) = net.eng.flows([slow])
    assert (f.sent, f.limit) == (5 * 10**8, 1e9)
    # 5e8 bytes: 122,070 whole packets so far (the flow goes on)
    assert net.counters()[net.ca("t1")]["PortXmitData"] == (5 * 10**8 // MTU) * (MTU // 4 + 6)
    # demand 1 + 50 GB/s on a 50 GB/s uplink: 1 GB/s waits
    assert net.counters()[up]["PortXmitWait"] == int(1e9 * WIRE * 0.5 / 8)


def test_a_flow_that_ends_frees_its_share_from_that_moment(net):
    t3, t4 = net.ca("t3"), net.ca("t4")
    up = net.uplink("LEAF-1", "SPINE-1")
    for lid in (t3.lid, t4.lid):
        net.route_via("LEAF-1", lid, up.num)
    half, full = NDR_4X / 2 / WIRE, NDR_4X / WIRE
    short = net.eng.add(net.ca("t1"), t3, bytes=10**8)
    long = net.eng.add(net.ca("t2"), t4)
    net.run(0.01)
    ends = 10**8 / half
    got = {f.id: f for f in net.eng.flows()}
    assert got[short].state == "done" and got[long].rate == full
    assert abs(got[long].sent - (half * ends + full * (0.01 - ends))) <= 1


def test_a_downed_link_discards_and_counts_until_the_routes_change(net):
    t1, t3 = net.ca("t1"), net.ca("t3")
    up = net.uplink("LEAF-1", "SPINE-1")
    other = net.uplink("LEAF-1", "SPINE-2")
    net.route_via("LEAF-1", t3.lid, up.num)
    fid = net.eng.add(t1, t3, bytes=10**9)
    net.run(1e-3)
    before = net.eng.flows([fid])[0].delivered
    # the spine end of the uplink goes down (as a cable pulled): both ends Down/Polling
    for p in (up, up.peer):
        p.phys, p.state = PhysState.POLLING, PortState.DOWN
        p.changed()
    base = net.counters()
    net.run(1e-3)
    (f,) = net.eng.flows([fid])
    # an RC queue pair whose packets go nowhere: it sent one packet, waits for its ACK
    assert f.delivered == before and f.state == "retrying" and f.rate == 0
    assert f.dropped == f"PortXmitDiscards at {up.ref()}"
    assert f.reason == f"link LEAF-1[{up.num}] is down"
    assert f.sent == before + MTU
    c = net.counters()
    assert c[t1]["PortXmitPkts"] - base[t1]["PortXmitPkts"] == 1
    assert c[up]["PortXmitDiscards"] == 1
    assert c[up]["PortXmitPkts"] == base[up]["PortXmitPkts"]  # nothing left by it
    assert c[net.port("LEAF-1", t1.peer.num)]["PortRcvPkts"] - base[t1.peer]["PortRcvPkts"] == 1
    assert c[t3]["PortRcvData"] == base[t3]["PortRcvData"]
    # the SM routes around it: the flow goes on over the other uplink and completes
    net.route_via("LEAF-1", t3.lid, other.num)
    net.run(1.0)
    (f,) = net.eng.flows([fid])
    assert (f.state, f.delivered, f.sent, f.dropped, f.reason) == ("done", 10**9, 10**9, None, None)
    c2 = net.counters()
    assert c2[up]["PortXmitDiscards"] == c[up]["PortXmitDiscards"]
    assert c2[other]["PortXmitData"] > 0


def test_rerouting_after_an_lft_change(net):
    t1, t3 = net.ca("t1"), net.ca("t3")
    up1, up2 = net.uplink("LEAF-1", "SPINE-1"), net.uplink("LEAF-1", "SPINE-2")
    net.route_via("LEAF-1", t3.lid, up1.num)
    net.eng.add(t1, t3)
    net.run(1e-4)
    first = net.counters()
    assert up1 in first and up2 not in first
    gen = net.sim.generation.value
    net.route_via("LEAF-1", t3.lid, up2.num)
    assert net.sim.generation.value > gen
    net.run(1e-4)
    second = net.counters()
    assert second[up1] == first[up1]
    assert second[up2]["PortXmitData"] > 0
    # a switch left without an entry for the destination: relay errors where it came in
    net.route_via("LEAF-1", t3.lid, 0xFF)
    net.run(1e-4)
    third = net.counters()
    assert third[t1.peer]["PortRcvSwitchRelayErrors"] > 0
    assert third[up2] == second[up2]


def test_sma_writes_move_the_generation(net):
    sma = Sma()
    leaf0 = net.sw("LEAF-1").ports[0]
    gen = net.sim.generation.value
    sw = leaf0.node.sw
    st, _ = sma.handlers[Attr.LINEAR_FDB](leaf0, int(Method.SET), 1, sw.lft_block(1))
    assert st == STATUS_OK and net.sim.generation.value == gen + 1
    t1 = net.ca("t1")
    pi = PORT_INFO.pack({"NeighborMTU": 4, "LinkState": 0, "PhysLinkState": 0}, base=t1.port_info())
    assert sma.handlers[Attr.PORT_INFO](t1, int(Method.SET), 0, pi)[0] == STATUS_OK
    assert net.sim.generation.value == gen + 2
    # and the engine follows: the flow's packets are now 2048 bytes
    fid = net.eng.add(t1, net.ca("t3"), bytes=4096)
    net.run(1e-3)
    assert net.eng.flows([fid])[0].state == "done"
    assert net.counters()[t1]["PortXmitPkts"] == 2


def _table(port, *keys: int) -> None:
    """Write ``port``'s P_Key table as the SM would (the rest of it zero)."""
    port.pkeys[:] = bytes(len(port.pkeys))
    for i, k in enumerate(keys):
        port.pkeys[2 * i : 2 * i + 2] = k.to_bytes(2, "big")
    port.changed()


def _tenants(net):
    """t1 and t2 in tenant 1, t3 in tenant 2 (full members), the default partition
    limited; the switch ports facing them hold their keys and links between switches do
    not enforce, as OpenSM writes them (osm_pkey_mgr.c)."""
    for n in net.sim.nodes:
        for p in n.ports if n.is_switch else ():
            if p is not None and p.peer is not None and p.peer.node.is_switch:
                p.part_enf_in = p.part_enf_out = 0
    t1, t2, t3 = net.ca("t1"), net.ca("t2"), net.ca("t3")
    for ca, key in ((t1, 0x8001), (t2, 0x8001), (t3, 0x8002)):
        _table(ca, 0x7FFF, key)
        _table(ca.peer, 0x7FFF, key)
    return t1, t2, t3


def test_foreign_pkey_stops_at_the_switch_port_facing_the_receiver(net):
    """The leaf port facing t3 enforces outbound: t1's packets (tenant 1) stop there,
    counted as PortXmitConstraintErrors and never sent to t3; t2 -> t1 flows."""
    t1, t2, t3 = _tenants(net)
    traps = []
    net.eng.on_trap = lambda *a: traps.append(a)
    bad = net.eng.add(t1, t3, bytes=4096 * 10)
    good = net.eng.add(t2, t1, bytes=4096 * 10)
    net.run(1e-3)
    flows = {f.id: f for f in net.eng.flows()}
    assert flows[good].state == "done" and flows[good].delivered == 4096 * 10
    assert flows[bad].delivered == 0
    assert flows[bad].dropped == f"PortXmitConstraintErrors at {t3.peer.ref()}"
    c = net.counters()
    assert c[t3.peer]["PortXmitConstraintErrors"] == c[t1]["PortXmitPkts"] > 0
    assert c[t3.peer].get("PortXmitPkts", 0) == 0 and c.get(t3, {}).get("PortRcvPkts", 0) == 0
    assert t3.pkey_violations == 0 and traps == []


def test_foreign_pkey_reaches_a_ca_behind_a_port_that_does_not_enforce(net):
    """Without outbound enforcement on the port facing t3, t1's packets reach t3 (its
    PortRcvPkts count them), which discards them: P_KeyViolations, and trap 257 to the
    SM naming both LIDs and the P_Key; new tables let the flow through."""
    t1, _t2, t3 = _tenants(net)
    t3.peer.part_enf_out = 0
    t3.peer.changed()
    traps = []
    net.eng.on_trap = lambda port, number, src, drop: traps.append((port, number, src, drop.pkey))
    bad = net.eng.add(t1, t3)
    net.run(1e-4)
    f = net.eng.flows([bad])[0]
    assert f.delivered == 0 and f.dropped == f"P_KeyViolations at {t3.ref()}"
    c = net.counters()
    assert t3.pkey_violations == c[t3]["PortRcvPkts"] == c[t1]["PortXmitPkts"] > 0
    assert traps == [(t3, 257, t1, 0x8001)]
    _table(t3, 0x7FFF, 0x8002, 0x8001)  # t3 joins tenant 1 too
    net.run(1e-4)
    assert net.eng.flows([bad])[0].delivered > 0


def test_stale_sender_key_stops_at_the_ingress_port(net):
    """A sender whose key its own switch port lacks (a stale table): the ingress port
    enforcing inbound discards its packets, PortRcvConstraintErrors there."""
    t1, _t2, t3 = _tenants(net)
    _table(t1.peer, 0x7FFF, 0x8002)  # the leaf port facing t1 now holds tenant 2
    _table(t1, 0x8001, 0x8002)  # t1 carries 0x8002 to t3... (its first match)
    _table(t1.peer, 0x7FFF, 0x8003)  # ...which its port does not hold
    bad = net.eng.add(t1, t3)
    net.run(1e-4)
    f = net.eng.flows([bad])[0]
    assert f.dropped == f"PortRcvConstraintErrors at {t1.peer.ref()}"
    c = net.counters()
    assert c[t1.peer]["PortRcvConstraintErrors"] == c[t1]["PortXmitPkts"] > 0
    assert c[t1.peer]["PortRcvPkts"] == c[t1]["PortXmitPkts"]


def test_stop_and_flows(net):
    t1, t2, t3, t4 = (net.ca(h) for h in ("t1", "t2", "t3", "t4"))
    a = net.eng.add(t1, t3, rate=2e9)
    b = net.eng.add(t2, t4, bytes=10**12)
    net.run(1e-3)
    fa = net.eng.flows([a])[0]
    assert (fa.id, fa.src, fa.dst, fa.size, fa.limit, fa.state) == (a, t1, t3, None, 2e9, "running")
    assert fa.sent == 2 * 10**6 and fa.dropped is None
    net.eng.stop(a)
    net.run(1e-3)
    fa = net.eng.flows([a])[0]
    assert (fa.state, fa.rate, fa.sent) == ("stopped", 0.0, 2 * 10**6)
    assert net.eng.flows([b])[0].state == "running"
    net.eng.stop()
    snap = net.counters()
    net.run(1.0)
    assert net.counters() == snap
    assert [f.state for f in net.eng.flows()] == ["stopped", "stopped"]
    with pytest.raises(InputError, match="no flow 3"):
        net.eng.stop(3)


def test_ring_and_all_to_all(net):
    cas = [net.ca(h) for h in ("t1", "t2", "t3", "t4")]
    ring = net.eng.ring(cas, bytes=4096)
    assert [(f.src, f.dst) for f in net.eng.flows(ring)] == list(
        zip(cas, cas[1:] + cas[:1], strict=True)
    )
    a2a = net.eng.all_to_all(cas, bytes=4096)
    assert len(a2a) == 12 and a2a.start == ring.stop
    net.run(1.0)
    assert {f.state for f in net.eng.flows()} == {"done"}
    # each CA sent 1 + 3 flows of one packet of 1030 words
    for p in cas:
        c = p.flush().view_ext()
        assert (c["PortXmitPkts"], c["PortXmitData"]) == (4, 4 * 1030)
        assert (c["PortRcvPkts"], c["PortRcvData"]) == (4, 4 * 1030)


def test_bad_flows_are_refused_with_one_line(net):
    t1 = net.ca("t1")
    with pytest.raises(InputError, match="to itself"):
        net.eng.add(t1, t1)
    with pytest.raises(InputError, match="not a CA port"):
        net.eng.add(t1, net.sw("LEAF-1").ports[0])
    for bad in (0, -5, 1.5, True):
        with pytest.raises(InputError, match="bytes"):
            net.eng.add(t1, net.ca("t2"), bytes=bad)
    for bad in (0, -1.0, float("inf"), float("nan")):
        with pytest.raises(InputError, match="rate"):
            net.eng.add(t1, net.ca("t2"), rate=bad)
    assert net.eng.flows() == []


def test_counters_keep_their_views(net):
    """The 32-bit view saturates, the 64-bit one does not; a reset through one view
    leaves the other."""
    t1, t3 = net.ca("t1"), net.ca("t3")
    net.eng.add(t1, t3)
    net.run(1.0)  # ~50 GB: far past 2^32 words
    c = t1.flush()
    assert c.view()["PortXmitData"] == 0xFFFFFFFF
    assert c.view_ext()["PortXmitData"] > 0xFFFFFFFF
    c.reset(1 << 12, 0)
    net.run(1e-6)
    assert 0 < t1.flush().view()["PortXmitData"] < c.view_ext()["PortXmitData"]
    assert set(NAMES) >= set(c.view_ext())


def test_max_min_on_a_hand_worked_example():
    """Links A and B carry 10 each.  f0 crosses A; f1 crosses A and B; f2, f3 cross B;
    f4 crosses A with a limit of 1.  Water filling: f4 freezes at its limit 1; B's share
    10/3 is the lowest: f1, f2, f3 get 10/3; A has 10 - 1 - 10/3 = 17/3 left for f0."""
    flow_links = [[0], [0, 1], [1], [1], [0]]
    ptr = np.cumsum([0] + [len(x) for x in flow_links])
    links = np.array([x for row in flow_links for x in row])
    order = np.argsort(links, kind="stable")
    owner = np.repeat(np.arange(5), np.diff(ptr))
    link_ptr = np.concatenate(([0], np.cumsum(np.bincount(links, minlength=2))))
    rate = maxmin(
        ptr,
        links,
        link_ptr,
        owner[order],
        capacity=np.array([10.0, 10.0]),
        weight=np.ones(5),
        limit=np.array([np.inf, np.inf, np.inf, np.inf, 1.0]),
        active=np.ones(5, dtype=bool),
    )
    assert rate == pytest.approx([17 / 3, 10 / 3, 10 / 3, 10 / 3, 1.0], rel=1e-12)
    # f1 gone: B shared by two (5 each); A by f0 and f4 (limit 1): f0 gets 9
    active = np.array([True, False, True, True, True])
    rate = maxmin(
        ptr,
        links,
        link_ptr,
        owner[order],
        np.array([10.0, 10.0]),
        np.ones(5),
        np.array([np.inf] * 4 + [1.0]),
        active,
    )
    assert rate == pytest.approx([9, 0, 5, 5, 1], rel=1e-12)
    # weights: a flow whose packets take twice the room gets half as much rate
    rate = maxmin(
        ptr,
        links,
        link_ptr,
        owner[order],
        np.array([10.0, 10.0]),
        np.array([1, 1, 2, 1, 1.0]),
        np.full(5, np.inf),
        np.ones(5, dtype=bool),
    )
    # B: f1 + 2 f2 + f3 = 10 at level 2.5; A: f0 + f4 = 10 - 2.5 -> 3.75 each
    assert rate == pytest.approx([3.75, 2.5, 2.5, 2.5, 3.75], rel=1e-12)


@pytest.mark.realtools
def test_real_perfquery_reads_the_words_a_flow_moved(real_tools, tmp_path):
    """The fabric served in-process, routes filled in process, one flow of known size
    under the virtual clock: the real ``perfquery -x`` at the leaf's uplink and at the
    receiving HCA reads exactly the words the flow moved."""
    import re

    from helpers import run_tool, served

    cl = cluster()
    with served(cl) as srv:
        sim = srv.sim
        minhop.fill(sim)
        clock = VirtualClock()
        eng = TrafficEngine(sim, clock)
        src = sim.port_of(cl.fabric.find("t1 mlx5_0").port(1))
        dst = sim.port_of(cl.fabric.find("t3 mlx5_0").port(1))
        hops = path(src, dst)
        size = 123_456_789
        eng.add(src, dst, bytes=size)
        clock.advance(1.0)
        eng.advance()
        assert eng.flows()[0].state == "done"
        pkts, wds = words(size)
        leaf_up = hops[1][0]  # the leaf's port towards the spine

        def perfquery(host: str, *args: str) -> dict[str, int]:
            r = run_tool(srv.name, host, ["perfquery", "-x", *args], tmp_path)
            assert r.returncode == 0, r.stderr[-2000:]
            return {k: int(v) for k, v in re.findall(r"^(\w+):\.+(\d+)$", r.stdout, re.M)}

        # a port the query's own MAD does not cross: exact
        leaf_lid = leaf_up.node.ports[0].lid
        got = perfquery("t1", str(leaf_lid), str(leaf_up.num))
        assert (got["PortXmitData"], got["PortXmitPkts"]) == (wds, pkts)
        assert got["PortRcvData"] == 0
        # the HCA the flow went to, asked from there (a query of its own LID does not
        # leave the port): exact too, in the 64-bit and the 32-bit view
        got = perfquery("t3")
        assert (got["PortRcvData"], got["PortRcvPkts"], got["PortXmitData"]) == (wds, pkts, 0)
        assert got["PortUnicastRcvPkts"] == pkts
        r = run_tool(srv.name, "t3", ["perfquery"], tmp_path)
        assert re.search(rf"^PortRcvData:\.+{wds}$", r.stdout, re.M), r.stdout
