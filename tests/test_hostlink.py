"""The server end of the host protocol, spoken to from Python as the host library
speaks it: a tray's /sys tree, MADs over an open umad file, agents registered per port
(a vendor-class request between two trays, refused double registrations), whole RMPP
messages in pieces, the kernel's timeout read, issm, and bad frames that cost nothing."""

from __future__ import annotations

import errno
import os
import socket
import threading
import time
from contextlib import contextmanager

import pytest
from helpers import served, wait_for

from fabriclab.ib import hostwire, umad
from fabriclab.ib.caps import CAP_IS_SM
from fabriclab.model.build import build
from fabriclab.sim.fabric import minhop
from fabriclab.sim.wire.hostlink import HostLink
from fabriclab.spec.load import load_spec

TRAY_A, TRAY_B = "gb-r01-t01", "gb-r02-t05"
_SOCKETS: dict[str, str] = {}  # each fabric's host socket, by its name
PING_CLASS, OPENIB_OUI = 0x32, 0x001405  # ibping's (infiniband-diags ibping.c, libibmad)


@pytest.fixture(scope="module")
def fabric(tmp_path_factory):
    cluster = build(load_spec("gb200-su"))
    with served(cluster, serve=False) as srv:
        minhop.fill(srv.sim)
        link = HostLink(
            srv.transport, srv.sim, cluster, tmp_path_factory.mktemp("trees"), srv.set_issm
        )
        link.bind()
        _SOCKETS[srv.name] = str(link.path)
        up = threading.Event()
        t = threading.Thread(target=srv.serve_forever, kwargs={"ready": up.set}, daemon=True)
        t.start()
        assert up.wait(30)
        try:
            yield srv, cluster, link
        finally:
            srv.stop()
            t.join(10)
            link.close()


def _connect(srv, kind, tray="", index=0, token=0, extra=b""):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(10)
    s.connect(_SOCKETS[srv.name])
    hello = hostwire.HELLO.pack(
        hostwire.MAGIC, 1, kind, os.getpid(), index, token, 0, tray.encode()
    )
    s.send(hello + extra)
    r = s.recv(8192)
    _magic, err, tok, value = hostwire.REPLY.unpack_from(r)
    return s, err, tok, value, r[hostwire.REPLY.size :].decode()


@contextmanager
def _umad(srv, tray, index=0):
    s, err, tok, lid, text = _connect(srv, hostwire.KIND_UMAD, tray, index)
    assert err == 0, text
    try:
        yield s, tok, lid
    finally:
        s.close()


def _register(srv, token, aid, mclass, version, methods, oui=0, rmpp=0):
    req = umad.REG_REQ2.pack(
        aid, 1, mclass, version, 0, 0, methods.to_bytes(16, "little"), oui, rmpp
    )
    s, err, _t, _v, text = _connect(srv, hostwire.KIND_REGISTER, token=token, extra=req)
    s.close()
    return err, text


def _mad(mclass, version, method, tid, attr=0, oui=0, size=256):
    m = bytearray(size)
    m[0:4] = bytes([1, mclass, version, method])
    m[8:16] = tid.to_bytes(8, "big")
    m[16:18] = attr.to_bytes(2, "big")
    if oui:
        m[37:40] = oui.to_bytes(3, "big")
    return m


def _hdr(aid, dlid, qpn, timeout_ms=0, retries=0, length=0):
    return umad.HDR.pack(
        aid,
        0,
        timeout_ms,
        retries,
        length,
        qpn.to_bytes(4, "big"),
        (0x80010000 if qpn else 0).to_bytes(4, "big"),
        dlid.to_bytes(2, "big"),
        *[0] * 6,
        b"",
        b"\0" * 4,
        0,
    )


def _send_long(s, message: bytes) -> None:
    """A message longer than a frame, as the library sends it: the first frame marked
    MORE, then the rest in frames."""
    first = bytearray(message[: hostwire.FRAME_MAX])
    first[4:8] = hostwire.MORE.to_bytes(4, "little")
    s.send(first)
    for i in range(hostwire.FRAME_MAX, len(message), hostwire.FRAME_MAX):
        s.send(message[i : i + hostwire.FRAME_MAX])


def _read(s):
    """One message: its header fields and bytes (reassembled from pieces)."""
    first = s.recv(hostwire.FRAME_MAX)
    h = dict(zip(umad.HDR_FIELDS, umad.HDR.unpack_from(first), strict=True))
    msg = bytearray(first)
    if h["status"] & hostwire.MORE:
        while len(msg) < h["length"]:
            msg += s.recv(hostwire.FRAME_MAX)
    return h, bytes(msg)


def test_a_tray_tree_is_written_for_its_name_and_an_unknown_tray_is_refused(fabric):
    srv, _cluster, _link = fabric
    s, err, _t, _v, root = _connect(srv, hostwire.KIND_TREE, TRAY_A)
    s.close()
    assert err == 0
    devs = sorted(os.listdir(f"{root}/class/infiniband"))
    assert devs == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    assert open(f"{root}/class/infiniband_mad/umad2/ibdev").read() == "mlx5_2\n"
    s, err, _t, _v, text = _connect(srv, hostwire.KIND_TREE, "no-such-tray")
    s.close()
    assert err == errno.ENODEV and "no-such-tray: no such tray in this fabric" in text
    s, err, _t, _v, text = _connect(srv, hostwire.KIND_UMAD, TRAY_A, 4)
    s.close()
    assert err == errno.ENODEV and "has no umad4" in text


def test_an_smp_is_answered_by_the_node_with_the_kernels_read(fabric):
    srv, cluster, _link = fabric
    tray = cluster.tray(TRAY_A)
    with _umad(srv, TRAY_A, 2) as (s, _tok, lid):
        assert lid == tray.hcas[2].ports[1].lid
        s.send(_hdr(3, lid, 0, timeout_ms=100) + _mad(0x01, 1, 0x01, 0x0003_1234_5678, attr=0x11))
        h, msg = _read(s)
    assert h["id"] == 3 and h["status"] == 0 and h["length"] == 320 and len(msg) == 320
    mad = msg[64:]
    assert mad[3] == 0x81 and int.from_bytes(mad[12:16], "big") == 0x1234_5678
    # NodeInfo's PortGUID (14.2.5.3): the HCA's
    assert int.from_bytes(mad[64 + 12 : 64 + 20], "big") == tray.hcas[2].ports[1].guid


def test_a_vendor_request_reaches_the_agent_registered_for_it_on_another_tray(fabric):
    srv, _cluster, _link = fabric
    with _umad(srv, TRAY_A, 0) as (a, tok_a, lid_a), _umad(srv, TRAY_B, 1) as (b, tok_b, lid_b):
        everything = (1 << 128) - 1
        assert _register(srv, tok_a, 0, PING_CLASS, 1, everything, OPENIB_OUI) == (0, "")
        # the same methods on another port: free; again on that port: the kernel's
        # "already in use"
        assert _register(srv, tok_b, 0, PING_CLASS, 1, everything, OPENIB_OUI)[0] == 0
        with _umad(srv, TRAY_A, 0) as (_a2, tok_a2, _l):
            assert _register(srv, tok_a2, 0, PING_CLASS, 1, 1 << 1, OPENIB_OUI)[0] == errno.EINVAL
        b.send(
            _hdr(0, lid_a, 1, 1000)
            + _mad(PING_CLASS, 1, 0x01, 0x0000_0000_0000_0042, oui=OPENIB_OUI)
        )
        h, msg = _read(a)
        assert h["id"] == 0 and h["lid"] == lid_b.to_bytes(2, "big") and h["qpn"] == b"\0\0\0\1"
        resp = bytearray(msg[64:])
        resp[3] = 0x81
        resp[40:50] = b"pong here\0"
        a.send(_hdr(0, lid_b, 1) + resp)
        h, msg = _read(b)
        assert h["status"] == 0 and msg[64 + 40 : 64 + 49] == b"pong here"
        assert int.from_bytes(msg[64 + 12 : 64 + 16], "big") == 0x42


def test_a_request_nobody_answers_comes_back_as_the_kernels_timeout_read(fabric):
    srv, _cluster, _link = fabric
    with _umad(srv, TRAY_A, 1) as (a, tok_a, lid_a), _umad(srv, TRAY_B, 0) as (b, _tb, _lb):
        assert _register(srv, tok_a, 0, PING_CLASS, 1, 1 << 1, OPENIB_OUI)[0] == 0
        t0 = time.monotonic()
        b.send(
            _hdr(5, lid_a, 1, timeout_ms=200, retries=1)
            + _mad(PING_CLASS, 1, 0x01, (5 << 32) | 0x77, oui=OPENIB_OUI)
        )
        _read(a)  # delivered, never answered
        h, msg = _read(b)
        waited = time.monotonic() - t0
    assert h["status"] == umad.ETIMEDOUT and len(msg) == umad.TIMEOUT_SIZE
    assert h["id"] == 5 and 0.35 < waited < 5  # 200 ms, tried twice
    assert int.from_bytes(msg[64 + 12 : 64 + 16], "big") == 0x77


def test_an_unregistered_class_is_answered_unsupported(fabric):
    srv, _cluster, _link = fabric
    with _umad(srv, TRAY_A, 3) as (a, _t, _l), _umad(srv, TRAY_B, 3) as (_b, _tb, lid_b):
        a.send(_hdr(0, lid_b, 1, 100) + _mad(0x0A, 1, 0x01, 0x99))
        h, msg = _read(a)
    assert h["status"] == 0 and int.from_bytes(msg[64 + 4 : 64 + 6], "big") == 0x000C


def test_a_long_rmpp_answer_arrives_whole_in_pieces_with_segment_ones_header(fabric):
    srv, _cluster, _link = fabric
    with _umad(srv, TRAY_A, 0) as (sm, tok, lid_sm), _umad(srv, TRAY_B, 2) as (q, _tq, lid_q):
        assert _register(srv, tok, 1, 0x03, 2, (1 << 0x01) | (1 << 0x12), rmpp=1)[0] == 0
        q.send(_hdr(2, lid_sm, 1, 1000) + _mad(0x03, 2, 0x12, 0x1_0000_0001))
        h, req = _read(sm)
        assert h["id"] == 1
        records, size = 1000, 112
        table = _mad(
            0x03, 2, 0x92, int.from_bytes(req[64 + 8 : 64 + 16], "big"), size=56 + records * size
        )
        table[26] = umad.RMPP_ACTIVE
        table[44:46] = (size // 8).to_bytes(2, "big")
        for i in range(records):
            table[56 + i * size : 56 + i * size + 4] = i.to_bytes(4, "big")
        _send_long(sm, _hdr(1, lid_q, 1, length=64 + len(table)) + bytes(table))
        h, msg = _read(q)
    assert h["length"] == 64 + 56 + records * size == len(msg)
    mad = msg[64:]
    assert mad[25] == umad.RMPP_TYPE_DATA and mad[26] & 0x7 == umad.RMPP_ACTIVE | umad.RMPP_FIRST
    assert int.from_bytes(mad[28:32], "big") == 1  # segment 1
    segs = -(-(records * size) // 200)
    assert int.from_bytes(mad[32:36], "big") == segs * 220 - (segs * 200 - records * size)
    assert [
        int.from_bytes(mad[56 + i * size : 60 + i * size], "big") for i in range(records)
    ] == list(range(records))


def test_bad_frames_cost_nothing_and_issm_is_held_by_one(fabric):
    srv, cluster, _link = fabric
    s, err, *_ = _connect(srv, hostwire.KIND_UMAD, TRAY_A, 0)
    s.close()
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    raw.settimeout(10)
    raw.connect(_SOCKETS[srv.name])
    raw.send(b"hello?")
    assert hostwire.REPLY.unpack_from(raw.recv(4096))[1] == errno.EPROTO
    raw.close()
    malformed = srv.stats.malformed
    with _umad(srv, TRAY_A, 1) as (a, _t, lid):
        a.send(b"\1" * 40)
        a.send(_hdr(0, lid, 0, 100) + bytes(10))  # a header and a stub: too short a MAD
        bad = bytearray(_hdr(0, lid, 0, 100) + _mad(0x01, 1, 0x01, 1, attr=0x11))
        bad[4:8] = hostwire.MORE.to_bytes(4, "little")  # pieces of a message too long
        bad[16:20] = (1 << 30).to_bytes(4, "little")
        a.send(bad)
        a.send(_hdr(0, lid, 0, 100) + _mad(0x01, 1, 0x01, 2, attr=0x11))
        h, msg = _read(a)
        assert h["status"] == 0 and int.from_bytes(msg[64 + 12 : 64 + 16], "big") == 2
    assert srv.stats.malformed >= malformed + 3
    port = cluster.tray(TRAY_B).hcas[0].ports[1]
    sp = srv.sim.port_of(port)
    s1, err, *_ = _connect(srv, hostwire.KIND_ISSM, TRAY_B, 0)
    assert err == 0
    wait_for(lambda: sp.cap_mask & CAP_IS_SM, 5, "IsSM set on the port", interval=0.01)
    s2, err2, *_ = _connect(srv, hostwire.KIND_ISSM, TRAY_B, 0)
    s2.close()
    assert err2 == errno.EBUSY
    s1.close()
    wait_for(lambda: not sp.cap_mask & CAP_IS_SM, 5, "IsSM cleared on the port", interval=0.01)


def test_a_tool_that_takes_no_long_answer_is_detached_and_the_server_goes_on(fabric):
    srv, _cluster, _link = fabric
    with _umad(srv, TRAY_A, 2) as (sm, tok, lid_sm), _umad(srv, TRAY_B, 1) as (q, tq, lid_q):
        assert _register(srv, tok, 2, 0x03, 2, 1 << 0x12, rmpp=1)[0] == 0
        q.send(_hdr(2, lid_sm, 1, 1000) + _mad(0x03, 2, 0x12, 0x2_0000_0001))
        _h, req = _read(sm)
        table = _mad(0x03, 2, 0x92, int.from_bytes(req[64 + 8 : 64 + 16], "big"), size=8 << 20)
        table[26] = umad.RMPP_ACTIVE
        _send_long(sm, _hdr(2, lid_q, 1, length=64 + len(table)) + bytes(table))
        # q reads nothing: within a few seconds it is detached, and the server answers
        wait_for(lambda: tq not in srv.clients, 10, "the tool that reads nothing detached")
        sm.send(_hdr(0, lid_sm, 0, 100) + _mad(0x01, 1, 0x01, 9, attr=0x11))
        h, msg = _read(sm)
        assert h["status"] == 0 and int.from_bytes(msg[64 + 12 : 64 + 16], "big") == 9
