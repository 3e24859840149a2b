"""The host protocol over TCP (``up --host-listen``), spoken to from Python over loopback
as the host library speaks it: the token, then the same packets as on the unix socket,
framed; a tray's tree as an archive; wrong tokens, addresses outside --allow and
malformed streams refused with the server serving on; the archive's rules; the token
file."""

from __future__ import annotations

import errno
import os
import socket
import stat
import struct
import threading

import pytest
from helpers import served, wait_for

from fabriclab.errors import InputError
from fabriclab.ib import hostwire, treearchive, umad
from fabriclab.model.build import build
from fabriclab.sim.fabric import minhop
from fabriclab.sim.wire.hostlink import HostLink
from fabriclab.sim.wire.hosttcp import (
    LOOPBACK,
    HostTcp,
    make_token,
    parse_allow,
    parse_host_listen,
)
from fabriclab.spec.load import load_spec

TRAY = "sched-worker1"
TOKEN = "ab" * 32
TOKEN_BYTES = TOKEN.encode()
LEN = struct.Struct("<I")


@pytest.fixture(scope="module")
def fabric(tmp_path_factory):
    cluster = build(load_spec("lab"))
    with served(cluster, serve=False) as srv:
        minhop.fill(srv.sim)
        link = HostLink(
            srv.transport, srv.sim, cluster, tmp_path_factory.mktemp("trees"), srv.set_issm
        )
        link.bind()
        tcp = HostTcp(link, "labtcp", ("127.0.0.1", 0), LOOPBACK, TOKEN)
        tcp.bind()
        up = threading.Event()
        t = threading.Thread(target=srv.serve_forever, kwargs={"ready": up.set}, daemon=True)
        t.start()
        assert up.wait(30)
        try:
            yield srv, cluster, tcp
        finally:
            srv.stop()
            t.join(10)
            tcp.close()
            link.close()


def _packet(s: socket.socket) -> bytes:
    head = _exactly(s, 4)
    return _exactly(s, LEN.unpack(head)[0])


def _exactly(s: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        got = s.recv(n - len(out))
        if not got:
            raise ConnectionResetError("closed")
        out += got
    return bytes(out)


def _send(s: socket.socket, data: bytes) -> None:
    s.sendall(LEN.pack(len(data)) + data)


def _dial(tcp) -> socket.socket:
    s = socket.create_connection(tcp.addr, timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def _connect(tcp, kind, tray=TRAY, index=0, token=0, extra=b"", auth=TOKEN_BYTES):
    s = _dial(tcp)
    hello = hostwire.HELLO.pack(
        hostwire.MAGIC, 1, kind, os.getpid(), index, token, 0, tray.encode()
    )
    s.sendall(LEN.pack(len(auth)) + auth + LEN.pack(len(hello + extra)) + hello + extra)
    r = _packet(s)
    _magic, err, tok, value = hostwire.REPLY.unpack_from(r)
    return s, err, tok, value, r[hostwire.REPLY.size :].decode()


def _closed(s: socket.socket) -> bool:
    """Whether the server closed ``s`` (reading what it said first)."""
    s.settimeout(10)
    try:
        while s.recv(4096):
            pass
    except ConnectionResetError:
        pass
    return True


def _smp(lid: int, tid: int) -> bytes:
    hdr = umad.HDR.pack(
        0, 0, 100, 0, 0, b"\0\0\0\0", b"\0" * 4, lid.to_bytes(2, "big"),
        *[0] * 6, b"", b"\0" * 4, 0,
    )  # fmt: skip
    mad = bytearray(256)
    mad[0:4] = bytes([1, 0x01, 1, 0x01])
    mad[8:16] = tid.to_bytes(8, "big")
    mad[16:18] = (0x11).to_bytes(2, "big")  # NodeInfo
    return hdr + bytes(mad)


def _serves(tcp, cluster) -> None:
    """A NodeInfo over TCP is answered with the HCA's PortGUID."""
    s, err, _tok, lid, text = _connect(tcp, hostwire.KIND_UMAD, TRAY, 2)
    try:
        assert err == 0, text
        _send(s, _smp(lid, 0x77))
        msg = _packet(s)
    finally:
        s.close()
    h = dict(zip(umad.HDR_FIELDS, umad.HDR.unpack_from(msg), strict=True))
    assert h["status"] == 0 and len(msg) == 320
    assert int.from_bytes(msg[64 + 12 : 64 + 16], "big") == 0x77
    guid = cluster.tray(TRAY).hcas[2].ports[1].guid
    assert int.from_bytes(msg[64 + 64 + 12 : 64 + 64 + 20], "big") == guid


def test_a_tool_with_the_token_gets_mads_answered_and_registers_agents(fabric):
    srv, cluster, tcp = fabric
    _serves(tcp, cluster)
    s, err, tok, _lid, text = _connect(tcp, hostwire.KIND_UMAD, TRAY, 0)
    assert err == 0, text
    req = umad.REG_REQ2.pack(0, 1, 0x32, 1, 0, 0, (2).to_bytes(16, "little"), 0x001405, 0)
    r, err, _t, _v, text = _connect(tcp, hostwire.KIND_REGISTER, token=tok, extra=req)
    r.close()
    assert err == 0, text
    assert srv.clients[tok].agents and srv.clients[tok].host == "tcp 127.0.0.1"
    s.close()
    wait_for(lambda: tok not in srv.clients, 5, "the closed connection detached", interval=0.01)


def test_the_tree_comes_as_an_archive_of_the_trays_devices(fabric, tmp_path):
    _srv, _cluster, tcp = fabric
    s, err, _tok, size, text = _connect(tcp, hostwire.KIND_TREE)
    assert err == 0 and text == "" and 0 < size <= hostwire.TREE_MAX
    data = bytearray()
    while len(data) < size:
        data += _packet(s)
    s.close()
    entries = treearchive.unpack(bytes(data))
    paths = {e.path: e for e in entries}
    devs = sorted(p.split("/")[2] for p in paths if p.count("/") == 2 and
                  p.startswith("class/infiniband/"))  # fmt: skip
    assert devs == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    assert paths["class/infiniband_mad/umad2/ibdev"].data == b"mlx5_2\n"


def test_a_wrong_token_and_an_address_outside_allow_are_refused_in_one_line(fabric):
    _srv, cluster, tcp = fabric
    s, err, _t, _v, text = _connect(tcp, hostwire.KIND_UMAD, auth=b"cd" * 32)
    assert err == errno.EACCES and text == "wrong token for fabric 'labtcp'"
    assert _closed(s)
    s, err, _t, _v, text = _connect(tcp, hostwire.KIND_UMAD, auth=b"short")
    assert err == errno.EACCES and text == "wrong token for fabric 'labtcp'"
    s.close()
    saved = tcp.networks
    tcp.networks = parse_allow(["10.9.0.0/16"])
    try:
        s = _dial(tcp)  # refused at accept, before it says anything
        _magic, err, _t, _v = hostwire.REPLY.unpack_from(r := _packet(s))
        text = r[hostwire.REPLY.size :].decode()
        assert _closed(s)
    finally:
        tcp.networks = saved
    assert err == errno.EACCES
    assert text == "127.0.0.1 is not allowed to attach to fabric 'labtcp' (up --allow)"
    _serves(tcp, cluster)


@pytest.mark.parametrize(
    "stream",
    [
        LEN.pack(0),  # an empty packet
        LEN.pack(hostwire.FRAME_MAX + 1) + b"x" * 100,  # longer than a frame
        LEN.pack(0xFFFFFFFF),  # 4 GiB
        LEN.pack(64) + TOKEN.encode() + LEN.pack(1 << 30),  # a huge HELLO after the token
    ],
    ids=["empty", "over-frame", "4GiB", "huge-hello"],
)
def test_bad_lengths_close_the_connection_and_the_server_serves_on(fabric, stream):
    _srv, cluster, tcp = fabric
    s = _dial(tcp)
    s.sendall(stream)
    assert _closed(s)
    s.close()
    _serves(tcp, cluster)


def test_bad_lengths_on_an_open_umad_file_detach_it_and_clients_dying_mid_packet_cost_nothing(
    fabric,
):
    srv, cluster, tcp = fabric
    s, err, tok, lid, _text = _connect(tcp, hostwire.KIND_UMAD, TRAY, 1)
    assert err == 0
    s.sendall(LEN.pack(hostwire.FRAME_MAX + 1))
    assert _closed(s)
    wait_for(lambda: tok not in srv.clients, 5, "the lying connection detached", interval=0.01)
    # dying mid-packet: in the token, in the HELLO, and in a MAD
    for part in (
        LEN.pack(64) + TOKEN.encode()[:10],
        LEN.pack(64) + TOKEN.encode() + LEN.pack(88) + bytes(20),
    ):
        d = _dial(tcp)
        d.sendall(part)
        d.close()
    s, err, tok, lid, _text = _connect(tcp, hostwire.KIND_UMAD, TRAY, 3)
    s.sendall(LEN.pack(320) + _smp(lid, 5)[:100])
    s.close()
    wait_for(lambda: tok not in srv.clients, 5, "the dead tool detached", interval=0.01)
    # many connections that say nothing, from another address and this one: a good one
    # is served (the others' quota is theirs; this address's oldest silent one makes way)
    quiet = []
    try:
        for _ in range(40):
            q = socket.socket()
            q.bind(("127.0.0.2", 0))
            q.connect(tcp.addr)
            quiet.append(q)
        _serves(tcp, cluster)
        quiet += [_dial(tcp) for _ in range(40)]
        _serves(tcp, cluster)
    finally:
        for q in quiet:
            q.close()
    _serves(tcp, cluster)


def test_an_issm_connection_over_tcp_holds_the_ports_sm_bit(fabric):
    srv, cluster, tcp = fabric
    port = cluster.tray(TRAY).hcas[1].ports[1]
    sp = srv.sim.port_of(port)
    s, err, *_ = _connect(tcp, hostwire.KIND_ISSM, TRAY, 1)
    assert err == 0
    wait_for(lambda: sp.cap_mask & 0x2, 5, "IsSM set", interval=0.01)
    s.close()
    wait_for(lambda: not sp.cap_mask & 0x2, 5, "IsSM cleared", interval=0.01)


# --- the archive ----------------------------------------------------------------------


def _entry(kind: int, path: str, data: bytes = b"") -> bytes:
    p = path.encode()
    return hostwire.ENTRY.pack(kind, 0, len(p), len(data)) + p + data


def test_an_archive_packs_a_directory_and_reads_back(tmp_path):
    (tmp_path / "class/infiniband").mkdir(parents=True)
    (tmp_path / "devices/pci0/mlx5_0").mkdir(parents=True)
    (tmp_path / "devices/pci0/mlx5_0/node_guid").write_text("0001:0002:0003:0004\n")
    os.symlink("../../devices/pci0/mlx5_0", tmp_path / "class/infiniband/mlx5_0")
    entries = treearchive.unpack(treearchive.pack(tmp_path))
    assert [(e.kind, e.path) for e in entries] == [
        (hostwire.ENTRY_DIR, "class"),
        (hostwire.ENTRY_DIR, "class/infiniband"),
        (hostwire.ENTRY_SYMLINK, "class/infiniband/mlx5_0"),
        (hostwire.ENTRY_DIR, "devices"),
        (hostwire.ENTRY_DIR, "devices/pci0"),
        (hostwire.ENTRY_DIR, "devices/pci0/mlx5_0"),
        (hostwire.ENTRY_FILE, "devices/pci0/mlx5_0/node_guid"),
    ]
    assert entries[2].data == b"../../devices/pci0/mlx5_0"
    with pytest.raises(treearchive.TreeError, match="larger than 100 bytes"):
        treearchive.pack(tmp_path, limit=100)


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (_entry(1, "a/b"), "before its directory"),
        (_entry(1, "/etc"), "not a relative path"),
        (_entry(1, "a") + _entry(1, "a/../b"), "'..' component"),
        (_entry(1, "a") + _entry(2, "a/./f"), "'.' or '..'"),
        (_entry(2, "f\0x"), "not a relative path"),
        (_entry(3, "l", b"../outside"), "leaves the tree"),
        (_entry(1, "a") + _entry(3, "a/l", b"../../x"), "leaves the tree"),
        (_entry(3, "l", b"/etc/passwd"), "leaves the tree"),
        (_entry(4, "x"), "entry type 4"),
        (_entry(1, "d", b"x"), "with data"),
        (_entry(2, "f", b"abc")[:-1], "run past the archive"),
        (b"\2\0\1", "truncated entry header"),
        (hostwire.ENTRY.pack(2, 0, 2000, 0) + b"x" * 2000, "run past"),
    ],
)
def test_an_archive_that_breaks_a_rule_is_refused(data, why):
    with pytest.raises(treearchive.TreeError, match=why):
        treearchive.unpack(data)
    assert treearchive.unpack(_entry(1, "a") + _entry(3, "a/l", b"../b"))  # stays inside


# --- what up is given -------------------------------------------------------------------


def test_the_token_file_is_the_owners_alone_and_fresh_each_time(tmp_path, monkeypatch):
    monkeypatch.setenv("FABRICLAB_STATE_DIR", str(tmp_path))
    path = tmp_path / "f.token"
    a = make_token(path)
    assert len(a) == hostwire.TOKEN_SIZE and int(a, 16) >= 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.read_text() == a + "\n"
    assert make_token(path) != a


def test_host_listen_and_allow_are_parsed_or_refused_in_one_line():
    assert parse_host_listen("0") == ("127.0.0.1", 0)
    assert parse_host_listen("10.1.2.3:7000") == ("10.1.2.3", 7000)
    assert parse_host_listen("[::1]:9") == ("::1", 9)
    assert parse_allow(None) == LOOPBACK
    assert [str(n) for n in parse_allow(["10.0.0.0/24,192.168.5.0/24", "fd00::/8"])] == [
        "10.0.0.0/24",
        "192.168.5.0/24",
        "fd00::/8",
    ]
    for bad, opt in (("x:y", "--host-listen"), ("70000", "--host-listen")):
        with pytest.raises(InputError, match=opt):
            parse_host_listen(bad)
    with pytest.raises(InputError, match=r"10\.0\.0/33"):
        parse_allow(["10.0.0/33"])


def test_a_packet_that_comes_in_pieces_is_read_whole_and_never_past_its_end():
    from fabriclab.sim.wire.hosttcp import _Reader

    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    b.setblocking(False)
    reader, frame = _Reader(), bytearray(hostwire.FRAME_MAX)
    body = bytes(range(200))
    stream = LEN.pack(len(body)) + body + LEN.pack(3) + b"abc"
    try:
        for piece in (stream[:2], stream[2:5], stream[5:100]):
            a.sendall(piece)
            with pytest.raises(BlockingIOError):
                reader.read(b, frame)
        a.sendall(stream[100:])
        assert reader.read(b, frame) == 200 and frame[:200] == body
        assert reader.read(b, frame) == 3 and frame[:3] == b"abc"
        with pytest.raises(BlockingIOError):
            reader.read(b, frame)
        a.sendall(LEN.pack(hostwire.FRAME_MAX + 1))
        with pytest.raises(ConnectionAbortedError):
            reader.read(b, frame)
    finally:
        a.close()
        b.close()


def test_a_connection_that_never_says_what_it_is_is_closed(fabric):
    """One that sends nothing, and one that stops after its token: each closed after
    the few seconds a connection has to say what it is (hostgate.HELLO_WAIT)."""
    _srv, cluster, tcp = fabric
    mute, half = _dial(tcp), _dial(tcp)
    half.sendall(LEN.pack(64) + TOKEN_BYTES)
    for s in (mute, half):
        s.settimeout(20)
        assert s.recv(1) == b""  # closed by the server, nothing said
        s.close()
    _serves(tcp, cluster)
