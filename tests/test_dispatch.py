"""The fabric server's per-MAD path in-process, on the lab fabric: a server that is not
bound, clients attached through socket pairs, datagrams received and answered exactly
as the epoll loop does it (Transport.receive), without a real tool."""

from __future__ import annotations

import socket

import pytest
from simclient import dr_smp, lid_mad

from fabriclab.ib import simwire
from fabriclab.ib.caps import CAP_IS_SM
from fabriclab.ib.enums import PhysState, PortState
from fabriclab.ib.mad.consts import (
    STATUS_METHOD_ATTR_UNSUPPORTED,
    TRAP_CAPABILITY_MASK_CHANGE,
    TRAP_LINK_STATE_CHANGE,
    Attr,
    Method,
)
from fabriclab.ib.mad.layouts import (
    DR_SMP_HEADER,
    MAD_HEADER,
    NODE_INFO,
    NOTICE,
    PORT_INFO,
    SWITCH_INFO,
)
from fabriclab.model.build import build
from fabriclab.sim.wire.client import Client
from fabriclab.sim.wire.server import FabricServer
from fabriclab.spec.load import load_spec

LAB = build(load_spec("lab"))
LEAF = "MF0;LAB-IBLEAF-01:MQM9701/U1"
W1, W2 = "sched-worker1 mlx5_0", "sched-worker2 mlx5_0"  # LIDs 100 and 104 (leaf port 5)


class Lab:
    """An unbound server of the lab fabric and its clients (socket pairs)."""

    def __init__(self):
        self.srv = FabricServer(LAB.fabric, "unused")
        self.peers: list[socket.socket] = []

    def port(self, desc: str, num: int | None = None):
        node = self.srv.sim.node_of(LAB.fabric.find(desc))
        return node.ports[num if num is not None else (0 if node.is_switch else 1)]

    def attach(self, desc: str, *, issm: bool = False, qp: int = 0) -> tuple[Client, socket.socket]:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        ours.setblocking(False)
        theirs.settimeout(0)
        transport = self.srv.transport
        cid = len(transport.clients)
        cl = Client(cid, 1000 + cid, self.port(desc), qp, False, desc, ours)
        transport.attach(cl)
        if issm:
            self.srv.set_issm(cl, True)
        self.peers.append(theirs)
        return cl, theirs

    def ask(
        self, cl: Client, peer: socket.socket, mad: bytes, dlid: int = 0xFFFF, dqp: int = 0
    ) -> None:
        peer.send(simwire.request(dlid, 0, mad.ljust(256, b"\0"), dqp=dqp))
        self.srv.transport.receive(cl)

    def close(self):
        self.srv.close()
        for p in self.peers:
            p.close()


def answer(peer: socket.socket):
    """The next datagram for ``peer``: (dlid, slid, dqp, sqp, sim status, MAD)."""
    dlid, slid, dqp, sqp, status, _length, mad = simwire.REQUEST.unpack(peer.recv(4096))
    return dlid, slid, dqp, sqp, status, mad


def nothing_for(peer: socket.socket) -> bool:
    try:
        peer.recv(4096)
    except BlockingIOError:
        return True
    return False


@pytest.fixture()
def lab():
    f = Lab()
    yield f
    f.close()


def _route(lab: Lab) -> None:
    """The leaf's forwarding table: every CA LID out its port."""
    leaf = lab.port(LEAF).node.sw
    leaf.write_lft_block(
        1, bytes(0xFF if not 100 <= 64 + i <= 107 else 64 + i - 99 for i in range(64))
    )
    leaf.lft_top = 107


def test_a_directed_route_smp_is_answered_in_place(lab):
    cl, peer = lab.attach(W1)
    lab.ask(cl, peer, dr_smp(Attr.NODE_INFO, [1], tid=0x1234))
    _dlid, _slid, _dqp, _sqp, status, mad = answer(peer)
    assert status == 0
    h = DR_SMP_HEADER.unpack(mad)
    assert h["Method"] | h["R"] << 7 == Method.GET_RESPONSE
    assert (h["D"], h["Status"]) == (1, 0)
    assert h["TransactionID"] == (cl.id << 48) | 0x1234  # the requester noted in the TID
    ni = NODE_INFO.unpack(mad[64:128])
    assert ni["NodeType"] == 2 and ni["LocalPort"] == 1  # the leaf, entered by its port 1
    assert list(mad[192:195]) == [1, 1, 0]  # the return path
    assert lab.srv.stats.answered == 1


def test_a_set_through_a_directed_route_changes_the_fabric(lab):
    cl, peer = lab.attach(W1)
    si = lab.port(LEAF).node.sw.switch_info()
    lab.ask(
        cl,
        peer,
        dr_smp(
            Attr.SWITCH_INFO,
            [1],
            method=Method.SET,
            data=SWITCH_INFO.pack({"LinearFdbTop": 300}, base=si),
        ),
    )
    assert SWITCH_INFO.unpack(answer(peer)[5][64:128])["LinearFdbTop"] == 300
    assert lab.port(LEAF).node.sw.lft_top == 300


def test_lid_routed_requests(lab):
    """A PMA query to the client's own LID, and an SMP to another CA through the LFT;
    the answer comes back with the addresses swapped."""
    _route(lab)
    cl, peer = lab.attach(W1)
    lab.ask(cl, peer, lid_mad(0x04, Attr.PORT_COUNTERS), dlid=100, dqp=1)
    dlid, slid, dqp, sqp, status, mad = answer(peer)
    assert (dlid, slid, dqp, sqp, status) == (100, 100, 0, 1, 0)
    lab.ask(cl, peer, lid_mad(0x01, Attr.PORT_INFO), dlid=104)
    dlid, slid, _, _, status, mad = answer(peer)
    assert (dlid, slid, status) == (100, 104, 0)
    assert PORT_INFO.get(mad[64:128], "Lid") == 104


def test_nobody_to_answer(lab):
    """A Get of a class no agent serves is answered "unsupported"; anything else, or a
    route that leads nowhere, comes back as a timeout."""
    cl, peer = lab.attach(W1)
    lab.ask(cl, peer, lid_mad(0x0A, 0x10), dlid=100)
    *_, status, mad = answer(peer)
    assert status == 0 and MAD_HEADER.unpack(mad)["Status"] == STATUS_METHOD_ATTR_UNSUPPORTED
    lab.ask(cl, peer, lid_mad(0x0A, 0x10, method=Method.SEND), dlid=100)
    assert answer(peer)[4] == simwire.SIM_STATUS_TIMEOUT
    lab.ask(cl, peer, dr_smp(Attr.NODE_INFO, [1, 40]))  # leaf port 40 is not cabled
    assert answer(peer)[4] == simwire.SIM_STATUS_TIMEOUT
    lab.ask(cl, peer, lid_mad(0x01, Attr.NODE_INFO), dlid=104)  # no forwarding table yet
    assert answer(peer)[4] == simwire.SIM_STATUS_TIMEOUT
    assert (lab.srv.stats.timed_out, lab.srv.stats.dropped) == (3, 0)


def test_malformed_datagrams_are_dropped(lab):
    cl, peer = lab.attach(W1)
    peer.send(b"short")
    lab.srv.transport.receive(cl)
    bad = bytearray(dr_smp(Attr.NODE_INFO, [1]))
    bad[0] = 2  # base version
    lab.ask(cl, peer, bytes(bad))
    assert nothing_for(peer) and lab.srv.stats.malformed == 2


def test_sa_queries_go_to_the_sm_and_its_answers_come_back(lab):
    """A request to the SM's LID on QP1 (an SA query) goes to the SM client at that
    port; the SM's response finds the requester by the TransactionID."""
    _route(lab)
    for node in lab.srv.sim.nodes:  # anything but an SMP needs ACTIVE links
        for p in node.ports:
            if p is not None and p.up:
                p.state = PortState.ACTIVE
    sm, sm_peer = lab.attach(W2, issm=True)
    tool, tool_peer = lab.attach(W1)
    lab.ask(tool, tool_peer, lid_mad(0x03, 0x11, tid=7), dlid=104, dqp=1)
    dlid, slid, dqp, _sqp, _status, query = answer(sm_peer)
    assert (dlid, slid, dqp) == (104, 100, 1)
    tid = MAD_HEADER.unpack(query)["TransactionID"]
    assert tid >> 48 == tool.id
    reply = MAD_HEADER.pack({"Method": Method.GET_RESPONSE & 0x7F, "R": 1}, base=query) + query[24:]
    lab.ask(sm, sm_peer, reply, dlid=100, dqp=1)
    assert MAD_HEADER.unpack(answer(tool_peer)[5])["TransactionID"] == tid
    assert lab.srv.stats.forwarded == 2


def test_an_sm_attaching_shows_in_capability_mask_and_a_trap(lab):
    """IsSM follows the SM client; a port that reports capability changes sends trap
    144 to its master SM."""
    _route(lab)
    _master, master_peer = lab.attach(W1, issm=True)
    w2 = lab.port(W2)
    w2.smlid = 100
    second, _ = lab.attach(W2, issm=True)
    assert w2.cap_mask & CAP_IS_SM and PORT_INFO.get(w2.port_info(), "CapMask") & CAP_IS_SM
    dlid, slid, *_, mad = answer(master_peer)
    assert (dlid, slid) == (100, 104)
    h = MAD_HEADER.unpack(mad)
    assert (h["Method"], h["AttributeID"]) == (Method.TRAP, Attr.NOTICE)
    n = NOTICE.unpack(mad[64:128])
    assert (n["NoticeTrapNumber"], n["NoticeIssuerLID"], n["NoticeType"]) == (
        TRAP_CAPABILITY_MASK_CHANGE,
        104,
        4,
    )
    assert n["NoticeDataTrap144CapMask"] == w2.cap_mask
    lab.srv.transport.detach(second, "test")
    assert not w2.cap_mask & CAP_IS_SM


def test_a_link_taken_down_is_reported_by_the_switch(lab):
    """PhysLinkState Disabled through the SMA: both ends go down, LinkDownedCounter
    counts on both, the switch reports a port change and sends trap 128."""
    _route(lab)
    sm, sm_peer = lab.attach(W1, issm=True)
    leaf0 = lab.port(LEAF)
    leaf0.smlid = 100
    leaf0.node.sw.state_change = 0
    pi = PORT_INFO.pack(
        {"LinkState": 0, "PhysLinkState": PhysState.DISABLED}, base=lab.port(LEAF, 5).port_info()
    )
    lab.ask(sm, sm_peer, dr_smp(Attr.PORT_INFO, [1], method=Method.SET, mod=5, data=pi))
    traps = [answer(sm_peer), answer(sm_peer)]
    assert NOTICE.unpack(traps[0][5][64:128])["NoticeTrapNumber"] == TRAP_LINK_STATE_CHANGE
    assert NOTICE.unpack(traps[0][5][64:128])["NoticeDataLID"] == 2
    assert DR_SMP_HEADER.unpack(traps[1][5])["Method"] | 0x80 == Method.GET_RESPONSE
    leaf5, w2 = lab.port(LEAF, 5), lab.port(W2)
    assert (leaf5.phys, leaf5.state) == (PhysState.DISABLED, PortState.DOWN)
    assert (w2.phys, w2.state) == (PhysState.POLLING, PortState.DOWN)
    assert leaf5.flush().view()["LinkDownedCounter"] == w2.flush().view()["LinkDownedCounter"] == 1
    assert leaf0.node.sw.state_change == 1
    # the route through that link is gone
    lab.ask(sm, sm_peer, dr_smp(Attr.NODE_INFO, [1, 5]))
    assert answer(sm_peer)[4] == simwire.SIM_STATUS_TIMEOUT
