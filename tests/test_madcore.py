"""The native MAD core against the Python reference path, in-process: two servers of
the same fabric, one with ``FABRICLAB_MAD_CORE=python``, are sent the same datagrams
from the same port; their answers must be byte-identical, and their statistics, the
MADs counted on every port and the ports' counters the same.  The native server must
also have answered the common Gets itself (its Python path not called for them)."""

from __future__ import annotations

import logging
import random
import socket
from dataclasses import asdict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from simclient import dr_smp, lid_mad

from fabriclab.ib import simwire
from fabriclab.ib.enums import PhysState
from fabriclab.ib.mad.consts import Attr, Method
from fabriclab.ib.mad.layouts import PORT_INFO
from fabriclab.model.build import build
from fabriclab.sim.fabric import minhop, portinfo
from fabriclab.sim.wire.client import Client
from fabriclab.sim.wire.native import ENV
from fabriclab.sim.wire.server import FabricServer
from fabriclab.spec.load import load_spec

LAB = build(load_spec("lab"))
W1 = "sched-worker1 mlx5_0"
LEAF = "MF0;LAB-IBLEAF-01:MQM9701/U1"
GETS = (
    Attr.NODE_INFO,
    Attr.NODE_DESC,
    Attr.PORT_INFO,
    Attr.SWITCH_INFO,
    Attr.LINEAR_FDB,
    Attr.PKEY_TABLE,
)


class Side:
    """One server, unbound, with a client attached at ``desc`` through a socket pair."""

    def __init__(self, core: str, monkeypatch, desc: str = W1, routed: bool = False):
        monkeypatch.setenv(ENV, core)
        self.srv = FabricServer(LAB.fabric, "unused")
        assert self.srv.mad_core == core
        if routed:
            minhop.fill(self.srv.sim)
        ours, self.peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        ours.setblocking(False)
        self.peer.setblocking(False)
        node = self.srv.sim.node_of(LAB.fabric.find(desc))
        port = node.ports[0 if node.is_switch else 1]
        self.cl = Client(7, 1007, port, 0, False, desc, ours)
        self.srv.transport.attach(self.cl)
        self.python_calls = 0
        reference = self.srv.dispatch.reference

        def counted(cl, n):
            self.python_calls += 1
            reference(cl, n)

        self.srv.dispatch.reference = counted  # type: ignore[method-assign]
        if self.srv.transport.pump is not None:  # the pump was bound to the original
            self.srv.transport.pump = lambda cl: _pump(self.srv, counted, cl)

    def ask(self, raw: bytes) -> list[bytes]:
        self.peer.send(raw)
        self.srv.transport.receive(self.cl)
        out = []
        while True:
            try:
                out.append(self.peer.recv(4096))
            except BlockingIOError:
                return out

    def ports(self):
        return [p for n in self.srv.sim.nodes for p in n.ports if p is not None]

    def state(self):
        f = self.srv.sim.flat
        return (
            asdict(self.srv.stats),
            list(f.mad_in),
            list(f.mad_out),
            [(p.counters.raw, p.counters.details) for p in self.ports()],
        )

    def close(self):
        self.srv.close()
        self.peer.close()


def _pump(srv, python, cl):
    from fabriclab.sim.wire import native

    native.pump(srv.dispatch.native, srv.transport, python, srv.dispatch.routed, cl)


@pytest.fixture
def pair(monkeypatch):
    made = []

    def make(desc: str = W1, routed: bool = False):
        n = Side("native", monkeypatch, desc, routed)
        p = Side("python", monkeypatch, desc, routed)
        made.extend((n, p))
        return n, p

    yield make
    for s in made:
        s.close()


def same(n: Side, p: Side, raw: bytes) -> list[bytes]:
    """Send ``raw`` to both; the answers and the state after must be the same."""
    a, b = n.ask(raw), p.ask(raw)
    assert a == b
    assert n.state() == p.state()
    return a


def dr(attr: int, path: list[int], mod: int = 0, method: int = 1, data: bytes = b"") -> bytes:
    return simwire.request(0xFFFF, 0, dr_smp(attr, path, mod=mod, method=method, data=data))


def lid(attr: int, dlid: int, mod: int = 0) -> bytes:
    return simwire.request(dlid, 0, lid_mad(0x01, attr, mod=mod))


def mods(attr: int) -> list[int]:
    if attr == Attr.PORT_INFO:
        return [0, 1, 2, 5, 40, 64, 65, 255]
    if attr == Attr.LINEAR_FDB:
        return [0, 1, 2, 767, 768, 0xFFFFFFFF]
    if attr == Attr.PKEY_TABLE:
        return [0, 1, 1 << 16, 5 << 16, 5 << 16 | 1, 65 << 16, 0xFFFF]
    return [0]


def test_directed_gets_are_answered_natively_and_alike(pair):
    n, p = pair()
    paths = [[], [1], [1, 1], [1, 5], [1, 9], [1, 9, 1], [1, 9, 2, 5], [1, 12, 1, 2]]
    for path in paths:
        for attr in GETS:
            for mod in mods(attr):
                same(n, p, dr(attr, path, mod))
    # every PortInfo, NodeInfo, SwitchInfo is cached after its first read: asked again,
    # the native core answers every one of them itself
    before = n.python_calls
    for path in paths:
        for attr in (Attr.NODE_INFO, Attr.NODE_DESC, Attr.PORT_INFO, Attr.PKEY_TABLE):
            same(n, p, dr(attr, path, 1 if attr == Attr.PORT_INFO else 0))
    for path in ([1], [1, 9], [1, 12, 1]):  # the switches'
        for attr in (Attr.SWITCH_INFO, Attr.LINEAR_FDB):
            same(n, p, dr(attr, path))
    assert n.python_calls == before
    assert n.srv.stats.answered > 100


def test_bad_directed_routes_go_to_python_alike(pair):
    n, p = pair()
    for path in ([2], [1, 0], [1, 99], [1, 5, 2], [1, 33], [1, 9, 1, 9, 1, 9] * 10, [1] * 64):
        same(n, p, dr(Attr.NODE_INFO, path))
    # a link down: counted discards, the same on both
    for s in (n, p):
        leaf = s.srv.sim.node_of(LAB.fabric.find(LEAF))
        port = leaf.ports[9]
        if port is not None:
            port.phys = PhysState.POLLING
            port.changed()
        s.srv.router.forget()
    for path in ([1, 9], [1, 9, 1], [1, 10, 1], [1, 5]):
        same(n, p, dr(Attr.PORT_INFO, path))


def test_lid_routed_gets_alike(pair):
    n, p = pair(routed=True)
    lids = sorted({q.lid for q in n.ports() if q.is_endport and q.lid})
    for dlid in [*lids, 0xFFFF, 0, 7, 0xBFFF]:
        for attr in GETS:
            for mod in mods(attr)[:3]:
                same(n, p, lid(attr, dlid, mod))
    before = n.python_calls
    for dlid in lids:
        same(n, p, lid(Attr.NODE_DESC, dlid))
    assert n.python_calls == before


def test_lft_holes_and_sets_in_between(pair):
    n, p = pair(routed=True)
    lids = sorted({q.lid for q in n.ports() if q.is_endport and q.lid})
    for s in (n, p):  # a hole in every switch's table: the LIDs of block 1 unrouted
        for node in s.srv.sim.nodes:
            if node.sw is not None and len(node.sw.lft) > 64:
                node.sw.write_lft_block(1, b"\xff" * 64)
        s.srv.router.forget()
    for dlid in lids:
        same(n, p, lid(Attr.NODE_INFO, dlid))
        same(n, p, lid(Attr.LINEAR_FDB, dlid, 1))
    # a Set (the Python path) between Gets: PortInfo's LID moves, LFT blocks are written
    pi = bytearray(n.srv.sim.node_of(LAB.fabric.find(LEAF)).ports[0].port_info())
    same(n, p, dr(Attr.PORT_INFO, [1], 0, Method.SET, PORT_INFO.splice(bytes(pi), "Lid", 777)))
    same(n, p, dr(Attr.LINEAR_FDB, [1], 12, Method.SET, bytes(range(64))))
    for attr in GETS:
        same(n, p, dr(attr, [1], 12 if attr == Attr.LINEAR_FDB else 0))
    for dlid in [777, *lids]:
        same(n, p, lid(Attr.PORT_INFO, dlid))


def test_a_port_that_drops_leaves_every_mad_to_python(pair):
    n, p = pair()
    for s in (n, p):
        s.srv.dispatch.drops[s.cl.port] = lambda attr: attr == Attr.NODE_INFO
    before = n.python_calls
    same(n, p, dr(Attr.NODE_DESC, []))
    same(n, p, dr(Attr.NODE_INFO, []))
    assert n.python_calls == before + 2


def _valid_requests() -> list[bytes]:
    out = []
    for attr in GETS:
        out.append(dr(attr, [1, 9, 1], 1))
        out.append(lid(attr, 100, 1))
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    base=st.sampled_from(_valid_requests()),
    edits=st.lists(st.tuples(st.integers(0, 300), st.integers(0, 255)), max_size=6),
    cut=st.integers(0, 300),
)
def test_mutated_and_garbage_datagrams_alike(monkeypatch_session, base, edits, cut):
    n, p = monkeypatch_session
    raw = bytearray(base)
    for at, v in edits:
        if at < len(raw):
            raw[at] = v
    if cut < 280:  # some datagrams cut short or made longer
        raw = raw[:cut] if cut % 2 else raw + bytes(cut)
    same(n, p, bytes(raw))


@pytest.fixture(scope="module")
def monkeypatch_session():
    mp = pytest.MonkeyPatch()
    n = Side("native", mp, routed=True)
    p = Side("python", mp, routed=True)
    yield n, p
    n.close()
    p.close()
    mp.undo()


def test_random_walks_alike(pair):
    n, p = pair(routed=True)
    rng = random.Random(22)
    for _ in range(400):
        path = [1] + [
            rng.choice([0, 1, 2, 5, 9, 10, 12, 13, 33, 65, 200]) for _ in range(rng.randrange(4))
        ]
        attr = rng.choice(GETS)
        same(n, p, dr(attr, path, rng.choice(mods(attr))))


def test_odd_lids_and_lmcs_alike(pair):
    """LIDs and LMCs Python may hold that no SM would set: the core hands them back."""
    n, p = pair(routed=True)
    lids = sorted({q.lid for q in n.ports() if q.is_endport and q.lid})
    for lid_, lmc in ((100, 7), (104, 63), (-5, 0), (1 << 40, 2), (100, -1)):
        for s in (n, p):
            for q in s.ports():
                if q.is_endport and q.lid == lids[1]:
                    q.lid, q.lmc = lid_, lmc
            s.cl.port.lmc = lmc if lmc >= 0 else 0
            s.srv.router.forget()
        for dlid in [*lids[:4], 100, 101, 104, 167]:
            same(n, p, lid(Attr.NODE_INFO, dlid))
            same(n, p, dr(Attr.PORT_INFO, [1], 5))
        for s in (n, p):
            for q in s.ports():
                if q.is_endport and q.lid == lid_:
                    q.lid, q.lmc = lids[1], 0


@pytest.mark.parametrize(
    "value, debug, core",
    [
        (None, False, "native"),
        ("native", False, "native"),
        ("python", False, "python"),
        (" Python ", False, "python"),
        ("fast", False, "native"),
        ("native", True, "python"),  # -vv traces every MAD: the Python path's
    ],
)
def test_the_switch(monkeypatch, value, debug, core):
    if value is None:
        monkeypatch.delenv(ENV, raising=False)
    else:
        monkeypatch.setenv(ENV, value)
    sim_log = logging.getLogger("fabriclab.sim")
    level = sim_log.level
    sim_log.setLevel(logging.DEBUG if debug else logging.WARNING)  # (clears its cache)
    try:
        srv = FabricServer(LAB.fabric, "unused")
        assert srv.mad_core == core
        assert (srv.dispatch.native is not None) == (core == "native")
        assert (srv.transport.pump is not None) == (core == "native")
        srv.close()
    finally:
        sim_log.setLevel(level)


def test_a_switchs_nodeinfo_cached_through_every_port_is_as_encoded():
    """The first NodeInfo read of a switch fills every port's (LocalPortNum patched), for
    the core to answer: each as if encoded through that port first."""
    from fabriclab.sim.fabric.state import SimFabric

    sim = SimFabric(LAB.fabric)
    leaf = sim.node_of(LAB.fabric.find(LEAF))
    leaf.node_info(3)
    for p in leaf.ports:
        if p is not None:
            fresh = SimFabric(LAB.fabric).node_of(LAB.fabric.find(LEAF))
            assert leaf.node_info(p.num) == fresh.node_info(p.num)
            assert leaf.flat.ni_valid[p._r]


def test_a_failure_inside_costs_one_mad_alike(pair):
    """Processing that raises (here the statistics broken on purpose) is a timeout for
    the tool and a malformed MAD counted, on both paths; the server goes on."""
    n, p = pair()
    for s in (n, p):
        s.srv.stats.classes = []  # type: ignore[assignment]
    same(n, p, dr(Attr.NODE_DESC, [1]))
    assert n.srv.stats.malformed == 1 and n.srv.stats.timed_out == 1
    for s in (n, p):
        s.srv.stats.classes = {}
    same(n, p, dr(Attr.NODE_DESC, [1]))
    assert n.srv.stats.answered == 1


def test_a_portinfo_that_cannot_be_encoded_costs_one_mad_alike(pair):
    """A port whose PortInfo fails to encode (a value broken on purpose): the core's
    encoding on demand fails, the MAD goes to Python, which fails the same way; the
    next read, the value mended, is answered."""
    n, p = pair()
    for s in (n, p):
        s.cl.port.resp_time = "broken"  # type: ignore[assignment]
    same(n, p, dr(Attr.PORT_INFO, []))
    assert n.srv.stats.malformed == 1 and n.srv.stats.timed_out == 1
    for s in (n, p):
        s.cl.port.resp_time = 16
    assert same(n, p, dr(Attr.PORT_INFO, []))
    assert n.srv.stats.answered == 1


def test_encoded_ahead_the_first_reads_are_answered_natively(pair):
    # what the server does before it serves (the native core): a discovery's first
    # NodeInfo and PortInfo reads need no Python encoding
    n, p = pair()
    fresh, _ = pair()
    f = n.srv.sim.flat
    rows = [p._r for p in n.ports()]
    assert not any(f.pi_valid[r] for r in rows)
    steps = list(n.srv.sim.encode_ahead(step=10))
    assert steps[-1] == len(rows) and len(steps) > len(rows) // 80  # a step at a time
    assert all(f.pi_valid[r] and f.ni_valid[r] for r in rows)
    # the attributes of the Gets the native core routed for Python to answer
    to_python: dict = {n: [], fresh: []}
    for side in to_python:
        routed = side.srv.dispatch.routed

        def counted(cl, row, side=side, routed=routed):
            at = simwire.REQUEST_MAD + 16
            to_python[side].append(int.from_bytes(side.srv.transport.buf[at : at + 2], "big"))
            routed(cl, row)

        side.srv.dispatch.routed = counted  # type: ignore[method-assign]
    paths = [[], [1], [1, 5], [1, 9], [1, 9, 1], [1, 9, 2, 5], [1, 12, 1, 2]]
    for path in paths:
        for attr, mod in ((Attr.NODE_INFO, 0), (Attr.PORT_INFO, 0), (Attr.PORT_INFO, 1)):
            same(n, p, dr(attr, path, mod))
            fresh.ask(dr(attr, path, mod))
    assert to_python[n] == [] and n.python_calls == 0
    # the fresh one's first NodeInfo reads Python encoded; its PortInfo the core had
    # encoded when it needed it (Core.set_rules' encode_pi), and answered
    assert to_python[fresh] and set(to_python[fresh]) == {Attr.NODE_INFO}
    assert n.srv.stats == fresh.srv.stats
    assert sum(f.pi_valid) == len(rows)


def test_the_server_encodes_ahead_while_idle(monkeypatch):
    """Serving, the server encodes every port ahead in the loop's idle time, a step at
    a time, and goes on to wait for MADs (no busy loop) once done."""
    from helpers import served, wait_for

    monkeypatch.setenv(ENV, "native")
    with served(LAB) as srv:
        f = srv.sim.flat
        rows = [p._r for n in srv.sim.nodes for p in n.ports if p is not None]
        wait_for(lambda: all(f.pi_valid[r] and f.ni_valid[r] for r in rows), 10, "encoded")
        wait_for(lambda: srv.transport.spare_time is None, 10, "idle work done")


def test_work_in_spare_time_that_fails_costs_that_work_not_the_fabric(monkeypatch, caplog):
    from helpers import served, wait_for
    from simclient import SimClient

    monkeypatch.setenv(ENV, "native")
    with served(LAB) as srv:
        wait_for(lambda: srv.transport.spare_time is None, 10, "encoded ahead")

        def broken() -> bool:
            raise RuntimeError("a bug")

        srv.transport.spare_time = broken
        wait_for(lambda: srv.transport.spare_time is None, 10, "the failed work dropped")
        with SimClient(srv.name, "sched-worker1") as c:  # the loop still serves
            c.data.settimeout(10)
            status, reply = c.request(dr_smp(Attr.NODE_INFO, [1]))
            assert status == 0 and reply[3] == 0x81  # answered: GetResp
    assert "spare time failed" in caplog.text


def test_the_loop_polls_for_the_time_asked_and_never_past_a_timeout(monkeypatch, caplog):
    """``FABRICLAB_MAD_SPIN_US``: read once, a bad value warned about; the native wait
    answers what comes while it polls and returns at its timeout; with no time to wait
    (the loop's spare-time work pending) it never polls."""
    import time

    from fabriclab.sim.wire import native

    for value, want in (("", native.SPIN_US), ("0", 0), ("10000", 10_000)):
        monkeypatch.setenv(native.SPIN_ENV, value)
        assert native.spin_us() == want
    for bad in ("fast", "-1", "10001", "1.5"):
        monkeypatch.setenv(native.SPIN_ENV, bad)
        assert native.spin_us() == native.SPIN_US
        assert f"{native.SPIN_ENV}={bad} is not a whole number" in caplog.text
    monkeypatch.setenv(native.SPIN_ENV, "10000")
    side = Side("native", monkeypatch)
    loop = side.srv.transport.native_loop
    assert loop is not None and loop.spin_us == 10_000
    epfd = side.srv.transport._epoll.fileno()
    with pytest.raises(ValueError, match="spin_us must be 0 to 10000"):
        side.srv.dispatch.native.serve(epfd, 0, 10_001)
    for _ in side.srv.sim.encode_ahead():  # so that the core answers it natively
        pass
    get = dr(Attr.NODE_INFO, [1])
    side.peer.send(get)
    t = time.monotonic()
    assert loop.poll(epfd, 0.05) == []  # answered in C; nothing for Python
    assert time.monotonic() - t >= 0.05
    assert side.peer.recv(4096)[simwire.REQUEST_MAD + 3] == 0x81  # the GetResp
    # polling after that answer: what arrives meanwhile is answered too
    side.peer.send(get)
    assert loop.poll(epfd, 0.05) == []
    assert side.peer.recv(4096)[simwire.REQUEST_MAD + 3] == 0x81
    # a zero timeout is a look, not a wait: no polling for 10 ms
    took = []
    for _ in range(5):
        t = time.monotonic()
        loop.poll(epfd, 0.0)
        took.append(time.monotonic() - t)
    assert min(took) < 0.005, took


def _ports_state(s: Side):
    """Every port's PortInfo values (as kept and as encoded), the switches' forwarding
    tables and the routes' generation."""
    f, cols = s.srv.sim.flat, len(portinfo.STORED)
    gen = s.srv.sim.generation
    return (
        [None if t is None else bytes(t) for t in f.lfts],
        sorted(sw._i for sw in gen.switches),
        [
            (p.lid, p.lmc, int(p.state), int(p.phys), list(f.setv[p._r * cols : (p._r + 1) * cols]))
            for p in s.ports()
        ],
        [bytes(p.port_info()) for p in s.ports()],
        gen.value,
        sorted(p._r for p in gen.ports),
    )


def _set_counted(s: Side) -> list[int]:
    """How many MADs the Python SMA answered for ``s`` (a list, to read later)."""
    calls = [0]
    routed = s.srv.dispatch.routed

    def counted(cl, row):
        calls[0] += 1
        routed(cl, row)

    s.srv.dispatch.routed = counted  # type: ignore[method-assign]
    return calls


def _pi_set(n: Side, p: Side, path: list[int], mod: int, **fields) -> bytes:
    """A PortInfo Set through ``path`` of the port ``mod`` names: its PortInfo as both
    read it, LinkState and PortPhysicalState 0 (no change), then ``fields``."""
    got = same(n, p, dr(Attr.PORT_INFO, path, mod))
    data = got[0][simwire.REQUEST_MAD + 64 : simwire.REQUEST_MAD + 128]
    values = {"LinkState": 0, "PhysLinkState": 0, **fields}
    for name, v in values.items():
        data = PORT_INFO.splice(data, name, v)
    return dr(Attr.PORT_INFO, path, mod, Method.SET, data)


def test_portinfo_sets_are_carried_out_natively_and_alike(pair):
    """The PortInfo Sets an SM sends - its values, then Armed, then Active - carried out
    by the native core as the Python SMA does (answers, every port's values and PortInfo,
    the routes' generation); what needs the link's state machine or is refused, by
    Python, alike."""
    n, p = pair()
    sma_calls = _set_counted(n)
    leaf = [1]  # the worker's leaf switch; a modifier names its port
    for path, mod in ((leaf, 0), (leaf, 1), (leaf, 5), ([], 0), ([], 1)):
        same(n, p, dr(Attr.PORT_INFO, path, mod))  # read (and encoded) first
    assert _ports_state(n) == _ports_state(p)
    before = sma_calls[0]
    sets = [
        (leaf, 0, {"Lid": 40, "SMLid": 40, "LMC": 0, "Mkey": 0xDEADBEEF_00000001}),
        (leaf, 1, {"NeighborMTU": 5, "OperVLs": 3, "HoqLife": 7, "LinkSpeedEnabled": 0xF}),
        (leaf, 1, {"LinkWidthEnabled": 0xFF, "LinkSpeedExtEnabled": 31, "VLHighLimit": 4}),
        (leaf, 1, {"PartEnforceInb": 0, "PartEnforceOutb": 0, "FilterRawInb": 1}),
        (leaf, 5, {"LocalPhysErr": 8, "OverrunErr": 8, "GidPrefix": 0xFE80_0000_0000_0001}),
        ([], 0, {"Lid": 41, "SMLid": 40, "SubnetTimeout": 18, "ClientReregister": 1}),
        ([], 1, {"LinkWidthEnabled": 1, "LinkSpeedEnabled": 0, "MkeyLeasePeriod": 9}),
        ([], 1, {"LinkState": 3}),  # Armed: the link's other end is Init
        (leaf, 1, {"LinkState": 3}),
        ([], 1, {"LinkState": 4}),  # Active: the other end is Armed
        (leaf, 1, {"LinkState": 4}),
        (leaf, 1, {"LinkState": 4, "SMSL": 2}),  # Active again: no change of state
    ]
    for path, mod, fields in sets:
        same(n, p, _pi_set(n, p, path, mod, **fields))
        assert _ports_state(n) == _ports_state(p), (path, mod, fields)
    assert sma_calls[0] == before  # every one carried out natively
    refused_or_python = [
        (leaf, 5, {"LinkState": 4}),  # Active from Init: refused
        (leaf, 5, {"NeighborMTU": 7}),  # above MtuCap: refused
        (leaf, 5, {"OperVLs": 15}),  # above VLCap: refused
        (leaf, 5, {"LinkState": 9}),  # no such state: refused
        ([], 2, {}),  # another port of a CA: refused
        (leaf, 77, {}),  # no such port
        (leaf, 5, {"PhysLinkState": 3}),  # Disabled: the link goes down (events)
        (leaf, 5, {"PhysLinkState": 2}),  # Polling: it comes back
        (leaf, 1, {"LinkState": 1}),  # Down: the link retrains
    ]
    for path, mod, fields in refused_or_python:
        raw = _pi_set(n, p, path, mod, **fields)
        before = sma_calls[0]
        same(n, p, raw)
        assert _ports_state(n) == _ports_state(p), (path, mod, fields)
        assert sma_calls[0] == before + 1, (path, mod, fields)  # the Python SMA's


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    target=st.sampled_from([([1], 0), ([1], 1), ([1], 3), ([], 0), ([], 1), ([1], 2)]),
    data=st.binary(min_size=64, max_size=64),
    state=st.sampled_from([0, 0, 0, 1, 2, 3, 4, 5]),
    phys=st.sampled_from([0, 0, 0, 0, 2, 3, 4]),
)
def test_random_portinfo_sets_alike(set_pair, target, data, state, phys):
    n, p = set_pair
    path, mod = target
    data = PORT_INFO.splice(PORT_INFO.splice(data, "LinkState", state), "PhysLinkState", phys)
    for raw in (dr(Attr.PORT_INFO, path, mod), dr(Attr.PORT_INFO, path, mod, Method.SET, data)):
        same(n, p, raw)
    assert _ports_state(n) == _ports_state(p)


@pytest.fixture(scope="module")
def set_pair():
    mp = pytest.MonkeyPatch()
    n = Side("native", mp)
    p = Side("python", mp)
    yield n, p
    n.close()
    p.close()
    mp.undo()


def test_forwarding_table_sets_are_carried_out_natively_and_alike(pair):
    """LinearForwardingTable block Sets (a table grown by them, as an SM's first sweep
    does) carried out by the native core as SimSwitch.write_lft_block does, and routed
    by after; a block beyond LinearFDBCap or a CA's is the Python SMA's, alike."""
    n, p = pair(routed=True)
    sma_calls = _set_counted(n)
    lids = sorted({q.lid for q in n.ports() if q.is_endport and q.lid})
    cap = n.srv.sim.node_of(LAB.fabric.find(LEAF)).sw.caps.linear_fdb_cap
    for block, data in ((0, bytes([1] * 64)), (1, bytes(range(64))), (40, b"\x02" * 64)):
        same(n, p, dr(Attr.LINEAR_FDB, [1], block, Method.SET, data))
        assert _ports_state(n) == _ports_state(p)
        for dlid in [*lids, 40 * 64 + 3]:
            same(n, p, lid(Attr.NODE_INFO, dlid))
            same(n, p, dr(Attr.LINEAR_FDB, [1], block))
    assert sma_calls[0] == 0
    for path, block in (([1], cap // 64), ([], 0)):  # beyond the cap; a CA has none
        same(n, p, dr(Attr.LINEAR_FDB, path, block, Method.SET, bytes(64)))
        assert _ports_state(n) == _ports_state(p)
    assert sma_calls[0] == 2


def test_a_peer_row_out_of_range_leaves_the_set_to_python_alike(pair):
    """A port whose peer row is no row (state Python may hold, never a cabled link):
    the core does not read past its arrays; the Set is the Python path's, which fails
    on it the same way (one MAD)."""
    n, p = pair()
    same(n, p, dr(Attr.PORT_INFO, [], 1))
    for s in (n, p):
        s.srv.sim.flat.peer[s.cl.port._r] = 1 << 30
    same(n, p, _pi_set(n, p, [], 1, LinkState=3))
    assert n.srv.stats.malformed == p.srv.stats.malformed == 1  # a failure costs one MAD
