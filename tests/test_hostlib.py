"""fabriclab's host library (sim/host/hostlib/*.c), built by the package's build and
preloaded into the real infiniband-diags tools and into Python programs driving
libibumad: its constants, the tray's /sys tree it redirects to, the umad device it
serves over the host protocol (ib/hostwire.py), and how it fails.  The server end here
is a small one written for the test, speaking the protocol over a real socket."""

from __future__ import annotations

import errno
import itertools
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import debian13
import pytest
from helpers import served

from fabriclab.ib import hostwire, simwire, umad
from fabriclab.model.build import build
from fabriclab.sim.fabric import minhop
from fabriclab.sim.host import sysfs
from fabriclab.sim.host.hostlib import library_path
from fabriclab.sim.live import admin_requests
from fabriclab.sim.live.api import LiveFabric
from fabriclab.sim.live.clock import VirtualClock
from fabriclab.sim.live.traffic.engine import TrafficEngine
from fabriclab.spec.load import load_spec

TRAY = "gb-r01-t01"
HOSTLIB = Path(library_path()).parent
_names = itertools.count()
Answer = Callable[["Conn", bytes], list[bytes]]


def _sources() -> list[Path]:
    """The host library's C sources and headers."""
    return sorted([*HOSTLIB.glob("*.c"), *HOSTLIB.glob("*.h")])


def test_the_library_is_built_from_the_current_source():
    so = Path(library_path())
    sources = _sources()
    assert {"hostlib.h", "hostwire.h"} <= {p.name for p in sources}, sources
    for src in sources:
        assert so.stat().st_mtime >= src.stat().st_mtime, (
            f"{so} is older than {src.name}: rebuild it with `pip install -e .`"
        )


def _defines() -> dict[str, int | str]:
    out: dict[str, int | str] = {}
    for m in re.finditer(
        r"^#define (\w+) (.+?)\s*(?:/\*.*)?$", (HOSTLIB / "hostwire.h").read_text(), re.M
    ):
        name, value = m.groups()
        value = re.sub(r"(0x[0-9A-Fa-f]+|\d+)u\b", r"\1", value)
        if value.startswith('"'):
            out[name] = value.strip('"')
            continue
        out[name] = eval(value, {}, dict(out))  # integer expressions of earlier defines
    return out


def test_the_c_constants_are_the_protocols_and_the_kernels():
    d = _defines()
    assert d["FL_MAGIC"] == hostwire.MAGIC and d["FL_VERSION"] == hostwire.VERSION
    for kind, name in hostwire.KINDS.items():
        assert d[f"FL_KIND_{name.upper()}"] == kind
    assert d["FL_TRAY_MAX"] == hostwire.TRAY_MAX
    assert d["FL_HELLO_SIZE"] == hostwire.HELLO.size
    assert d["FL_REPLY_SIZE"] == hostwire.REPLY.size
    assert d["FL_TEXT_MAX"] == hostwire.TEXT_MAX
    assert d["FL_FRAME_MAX"] == hostwire.FRAME_MAX and d["FL_MORE"] == hostwire.MORE
    assert d["FL_MESSAGE_MAX"] == hostwire.MESSAGE_MAX
    assert d["FL_SOCKET_KIND"] == hostwire.SOCKET_KIND
    for name, value in d.items():  # the rest (FL_TREE_MAX, ...): the module's of the name
        if name.startswith("FL_") and hasattr(hostwire, name[3:]):
            assert value == getattr(hostwire, name[3:]), name
    pairs = {
        "ABI_VERSION": umad.ABI_VERSION,
        "MAX_AGENTS": umad.MAX_AGENTS,
        "MAX_CLASS_VERSION": umad.MAX_CLASS_VERSION,
        "HDR_SIZE": umad.HDR_SIZE,
        "STATUS_AT": umad.STATUS_AT,
        "LENGTH_AT": umad.LENGTH_AT,
        "QPN_AT": umad.QPN_AT,
        "LID_AT": umad.LID_AT,
        "REG_REQ_SIZE": umad.REG_REQ.size,
        "REG_REQ2_SIZE": umad.REG_REQ2.size,
        "USER_RMPP": umad.USER_RMPP,
        "REGISTER_AGENT": umad.REGISTER_AGENT,
        "UNREGISTER_AGENT": umad.UNREGISTER_AGENT,
        "ENABLE_PKEY": umad.ENABLE_PKEY,
        "REGISTER_AGENT2": umad.REGISTER_AGENT2,
        "ETIMEDOUT": umad.ETIMEDOUT,
        "MAD_HDR": umad.MAD_HDR,
        "TIMEOUT_SIZE": umad.TIMEOUT_SIZE,
        "MIN_WRITE": umad.MIN_WRITE,
        "RMPP_FLAGS_AT": umad.RMPP_FLAGS_AT,
        "RMPP_ACTIVE": umad.RMPP_ACTIVE,
    }
    for name, value in pairs.items():
        assert d[f"UMAD_{name}"] == value, name
    # the RMPP classes and the response rule, as the library's sources write them
    src = "".join(p.read_text() for p in _sources())
    rule = re.search(
        r"return c == 0x03 \|\| c == 0x06 \|\| c == 0x10 \|\| c == 0x12 \|\| "
        r"\(c >= 0x30 && c <= 0x4F\);",
        src,
    )
    assert rule and umad.RMPP_CLASSES == {0x03, 0x06, 0x10, 0x12, *range(0x30, 0x50)}


# --- a small server end of the host protocol ------------------------------------------


class Conn:
    """One umad connection the stub accepted."""

    def __init__(self, sock: socket.socket, token: int, index: int):
        self.sock, self.token, self.index = sock, token, index
        self.got: list[bytes] = []  # the messages written to it, whole


class Stub:
    """The server end of the host protocol for one tray: TREE names ``root``; a UMAD
    connection's messages go to ``answer``, whose frames are sent back; REGISTER and
    UNREGISTER are recorded; one ISSM holder at a time.  It listens at ``<name>.host``
    in a directory of its own, or in ``where`` = (host path, the path the tools see)."""

    def __init__(
        self,
        root: Path | None,
        answer: Answer | None = None,
        where: tuple[Path, str] | None = None,
    ):
        self.name = f"flhl{os.getpid()}x{next(_names)}"
        self.root, self.answer = root, answer
        self.conns: list[Conn] = []
        self.registered: list[tuple[int, bytes]] = []
        self.unregistered: list[tuple[int, int]] = []
        self.issm: socket.socket | None = None
        self.socks: list[socket.socket] = []
        self.own_dir = where is None
        self.dir = Path(tempfile.mkdtemp(prefix="flhl")) if where is None else where[0]
        self.path = self.dir / f"{self.name}.{hostwire.SOCKET_KIND}"
        self.seen = str(self.path) if where is None else f"{where[1]}/{self.path.name}"
        self.lsock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.lsock.bind(str(self.path))
        self.lsock.listen(16)
        threading.Thread(target=self._accept, daemon=True).start()

    def env(self, tray: str = TRAY) -> dict[str, str]:
        return {
            **os.environ,
            "LD_PRELOAD": library_path(),
            "FABRICLAB_SOCKNAME": self.name,
            "FABRICLAB_HOST_SOCKET": self.seen,
            "FABRICLAB_TRAY": tray,
        }

    def close(self) -> None:
        """The server goes: every connection and the listening socket close."""
        for s in [self.lsock, *self.socks]:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        self.path.unlink(missing_ok=True)
        if self.own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            self.socks.append(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _reply(self, c: socket.socket, err: int = 0, token: int = 0, text: str = "") -> None:
        c.send(hostwire.REPLY.pack(hostwire.MAGIC, err, token, 0) + text.encode())

    def _serve(self, c: socket.socket) -> None:
        raw = c.recv(hostwire.HELLO.size + umad.REG_REQ2.size + 1)
        magic, version, kind, _pid, index, token, _r, tray = hostwire.HELLO.unpack_from(raw)
        assert magic == hostwire.MAGIC and version == hostwire.VERSION
        tray = simwire.cstring(tray)
        if tray != TRAY:
            self._reply(c, errno.ENODEV, text=f"{tray}: no such tray in this fabric")
        elif kind == hostwire.KIND_TREE:
            self._reply(c, text=str(self.root))
        elif kind == hostwire.KIND_REGISTER:
            self.registered.append((token, raw[hostwire.HELLO.size :]))
            self._reply(c, token=token)
        elif kind == hostwire.KIND_UNREGISTER:
            self.unregistered.append((token, index))
            self._reply(c, token=token)
        elif kind == hostwire.KIND_ISSM:
            if self.issm is not None:
                self._reply(c, errno.EBUSY, text="an SM holds it")
            else:
                self.issm = c
                self._reply(c)
                c.recv(1)  # until it closes
                self.issm = None
        elif kind == hostwire.KIND_UMAD:
            conn = Conn(c, len(self.conns) + 1, index)
            self.conns.append(conn)
            self._reply(c, token=conn.token)
            self._mads(conn)
        c.close()

    def _mads(self, conn: Conn) -> None:
        while True:
            try:
                frame = conn.sock.recv(hostwire.FRAME_MAX)
            except OSError:
                return
            if not frame:
                return
            status = struct.unpack_from("<I", frame, umad.STATUS_AT)[0]
            length = struct.unpack_from("<I", frame, umad.LENGTH_AT)[0]
            if status & hostwire.MORE:
                while len(frame) < length:
                    frame += conn.sock.recv(hostwire.FRAME_MAX)
            conn.got.append(frame)
            for out in self.answer(conn, frame) if self.answer else []:
                send_message(conn.sock, out)


def send_message(s: socket.socket, msg: bytes) -> None:
    """A message as the server sends it: in pieces when longer than a frame."""
    if len(msg) <= hostwire.FRAME_MAX:
        s.send(msg)
        return
    first = bytearray(msg[: hostwire.FRAME_MAX])
    status = struct.unpack_from("<I", first, umad.STATUS_AT)[0] | hostwire.MORE
    struct.pack_into("<I", first, umad.STATUS_AT, status)
    s.send(first)
    for at in range(hostwire.FRAME_MAX, len(msg), hostwire.FRAME_MAX):
        # pacing, not a wait: the pieces are sent apart so that the reader sees the
        # first one alone and must wait for the rest, which is what is tested
        time.sleep(0.05)
        s.send(msg[at : at + hostwire.FRAME_MAX])


def header(agent: int, length: int, qpn: int = 1, lid: int = 0xFFFF, status: int = 0) -> bytes:
    """An ib_user_mad header as the kernel's receive path fills it."""
    return umad.HDR.pack(
        agent, status, 0, 0, length, qpn.to_bytes(4, "big"), b"\0" * 4, lid.to_bytes(2, "big"),
        0, 0, 0, 0, 0, 0, b"", b"", 0,
    )  # fmt: skip


def tid_of(msg: bytes) -> int:
    return int.from_bytes(msg[umad.HDR_SIZE + 8 : umad.HDR_SIZE + 16], "big")


NODE_GUID = 0x5C25_7303_00D0_DC72


def answer_smp(conn: Conn, msg: bytes) -> list[bytes]:
    """A directed-route SubnGet(NodeInfo) answered as the HCA's SMA would."""
    mad = bytearray(msg[umad.HDR_SIZE : umad.HDR_SIZE + 256].ljust(256, b"\0"))
    if mad[1] != 0x81 or mad[3] != 0x01:
        return []
    mad[3] = 0x81  # GetResp
    mad[4] |= 0x80  # the D bit: a response on the way back
    info = struct.pack(">BBBBQQQHHIB3s", 1, 1, 1, 1, NODE_GUID, NODE_GUID, NODE_GUID + 1,
                       128, 0x1021, 0, 1, b"\x00\x02\xc9")  # fmt: skip
    mad[64 : 64 + len(info)] = info
    return [header((tid_of(msg) >> 32) & 0xFFFF, umad.HDR_SIZE + 256, qpn=0) + bytes(mad)]


# --- the tray's tree ------------------------------------------------------------------


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """A gb200-su tray's /sys root, written by fabriclab.sim.host.sysfs from a live fabric."""
    cluster = build(load_spec("gb200-su"))
    root = tmp_path_factory.mktemp("tree") / "sys"
    with served(cluster, serve=False) as srv:
        minhop.fill(srv.sim)
        clock = VirtualClock()
        live = LiveFabric(srv, cluster, clock, traffic=TrafficEngine(srv.sim, clock))
        sysfs.keep_live(
            lambda: admin_requests.answer(live, {"op": "tray", "host": TRAY}), root, 1, once=True
        )
    return root


@pytest.fixture
def stub(tree):
    s = Stub(tree, answer_smp)
    yield s
    s.close()


def run(argv: list[str], env: dict, cwd: Path, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_real_ibstat_and_ibstatus_see_the_trays_four_devices(stub, tree, tmp_path):
    env = stub.env()
    r = run(["ibstat", "-l"], env, tmp_path)
    assert (r.returncode, r.stdout, r.stderr) == (0, "mlx5_0\nmlx5_1\nmlx5_2\nmlx5_3\n", "")
    r = run(["ibstat"], env, tmp_path)
    assert r.returncode == 0, r.stderr
    assert re.findall(r"^CA '(\S+)'", r.stdout, re.M) == [f"mlx5_{i}" for i in range(4)]
    assert r.stdout.count("\tCA type: MT4129\n") == 4
    assert r.stdout.count("\t\tRate: 400\n") == 4
    assert r.stdout.count("\t\tLink layer: InfiniBand\n") == 4
    lid = (tree / "class/infiniband/mlx5_2/ports/1/lid").read_text().strip()
    block = r.stdout.split("CA 'mlx5_2'")[1].split("CA 'mlx5_3'")[0]
    assert f"\t\tBase lid: {int(lid, 16)}\n" in block
    # ibstatus is a dash script: cd, a glob, [ -d ], [ -r ] and cat all see the tree
    r = run(["ibstatus"], env, tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.findall(r"^Infiniband device '(\S+)' port 1 status:", r.stdout, re.M) == [
        f"mlx5_{i}" for i in range(4)
    ]
    assert r.stdout.count("rate:\t\t 400 Gb/sec (4X NDR)\n") == 4
    assert r.stdout.count("link_layer:\t InfiniBand\n") == 4
    assert os.listdir(tmp_path) == []  # nothing written where the tools ran


def test_without_the_socket_name_nothing_is_redirected(stub, tmp_path):
    env = {**os.environ, "LD_PRELOAD": library_path(), "FABRICLAB_TRAY": TRAY}
    env.pop("FABRICLAB_SOCKNAME", None)
    r = run(["ibstat", "-l"], env, tmp_path)
    assert "mlx5_" not in r.stdout and "fabriclab" not in r.stderr
    name = [sys.executable, "-c", "import socket; print(socket.gethostname())"]
    assert run(name, env, tmp_path).stdout == f"{socket.gethostname()}\n"
    assert run(name, stub.env(), tmp_path).stdout == f"{TRAY}\n"  # on the tray: its name


def test_no_server_or_an_unknown_tray_is_one_line_and_the_tools_own_error(stub, tmp_path):
    gone = tmp_path / "gone.host"
    env = {**stub.env(), "FABRICLAB_SOCKNAME": "nobody", "FABRICLAB_HOST_SOCKET": str(gone)}
    r = run(["ibstat", "mlx5_0"], env, tmp_path)
    assert r.returncode != 0 and "'mlx5_0' IB device can't be found" in r.stderr
    lines = [x for x in r.stderr.splitlines() if x.startswith("fabriclab:")]
    assert lines == [
        f"fabriclab: cannot reach the fabric server 'nobody' at {gone}: No such file or directory"
    ]
    r = run(["ibstat", "mlx5_0"], stub.env("no-such-tray"), tmp_path)
    assert r.returncode != 0 and "'mlx5_0' IB device can't be found" in r.stderr
    assert r.stderr.count("fabriclab: no-such-tray: no such tray in this fabric\n") == 1
    r = run(["ibstatus"], stub.env("no-such-tray"), tmp_path)  # its cd says 2>/dev/null
    assert r.returncode != 0 and r.stdout == "Fatal error:  No devices\n"


# --- the umad device --------------------------------------------------------------------


def test_real_smpquery_gets_its_answer_through_the_umad_device(stub, tmp_path):
    r = run(["smpquery", "-C", "mlx5_1", "-D", "nodeinfo", "0"], stub.env(), tmp_path)
    assert r.returncode == 0, r.stderr
    assert re.search(rf"^Guid:\.+0x{NODE_GUID:016x}$", r.stdout, re.M)
    assert re.search(rf"^PortGuid:\.+0x{NODE_GUID + 1:016x}$", r.stdout, re.M)
    assert [c.index for c in stub.conns][-1] == 1  # umad1: mlx5_1's port (infiniband_mad)
    # no CA named: libibumad takes the first one readdir lists with an active port, which
    # (sysfs lists in kernfs order) is mlx5_0, whatever order the tree's file system keeps
    r = run(["smpquery", "-D", "nodeinfo", "0"], stub.env(), tmp_path)
    assert r.returncode == 0, r.stderr
    assert [c.index for c in stub.conns][-1] == 0
    ls = [sys.executable, "-c", "import os; print(*os.listdir('/sys/class/infiniband'))"]
    assert run(ls, stub.env(), tmp_path).stdout == "mlx5_0 mlx5_3 mlx5_1 mlx5_2\n"
    # rdma-core 56 opens the device twice (an SMI and a GSI file: mad_rpc_open_port2);
    # the SMP went out on one of them
    sent = [c for c in stub.conns if c.got][-1].got[-1]
    assert (tid_of(sent) >> 32) == struct.unpack_from("<I", sent)[0]  # hi_tid = the agent
    assert os.listdir(tmp_path) == []


_PROGRAM = r"""
import ctypes, errno, fcntl, os, struct, sys
um = ctypes.CDLL("libibumad.so.3", use_errno=True)
libc = ctypes.CDLL(None, use_errno=True)
libc.read.restype = libc.write.restype = ctypes.c_ssize_t
assert um.umad_init() == 0
fd = um.umad_open_port(b"mlx5_1", 1)
assert fd >= 0, fd

def err(r):
    return (r, ctypes.get_errno())

buf = ctypes.create_string_buffer(64 + 256)
# the kernel's checks: no agent, a short write, a short read, nothing to read yet
print("noagent", err(libc.write(fd, buf, 64 + 256)))
sa = um.umad_register(fd, 0x03, 2, 1, None)  # saquery's registration: no methods
mask = (ctypes.c_uint32 * 4)(1 << 0x12, 0, 0, 0)  # GetTable
srv = um.umad_register(fd, 0x32, 1, 0, mask)  # with methods: told to the server
print("agents", sa, srv)
print("short", err(libc.write(fd, buf, 99)))
print("long", err(libc.write(fd, ctypes.create_string_buffer(64 + 257), 64 + 257)))
libc.ioctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p]
print("pkey", err(libc.ioctl(fd, 0x1B03, None)))
# REGISTER_AGENT2: an unknown flag is EINVAL with the known ones written back
req2 = bytearray(struct.pack("<IIBBHIQQIB3x", 0, 1, 0x32, 1, 0, 2, 0, 0, 0x001405, 0))
arg = (ctypes.c_char * 40).from_buffer(req2)
print("flags", err(libc.ioctl(fd, 0xC0281B04, ctypes.addressof(arg))), req2[12])
struct.pack_into("<IQQ", req2, 12, 0, 1 << 0x01, 0)  # Get, no flags
print("reg2", libc.ioctl(fd, 0xC0281B04, ctypes.addressof(arg)), req2[0])
print("shortread", err(libc.read(fd, buf, 63)))
print("empty", err(libc.read(fd, buf, 64 + 256)))
# an SA GetTable whose answer is longer than a frame: ENOSPC, then the whole of it
mad = bytearray(256)
mad[0:4] = bytes([1, 0x03, 2, 0x12])
mad[8:16] = (0xFFFF_FFFF_0000_0042).to_bytes(8, "big")
buf[64:320] = bytes(mad)
um.umad_set_addr(buf, 1, 1, 0, 0x80010000)
print("send", um.umad_send(fd, sa, buf, 256, 1000, 0))
length = ctypes.c_int(256)
print("recv1", um.umad_recv(fd, buf, ctypes.byref(length), 5000), length.value)
big = ctypes.create_string_buffer(64 + length.value)
length2 = ctypes.c_int(length.value)
print("recv2", um.umad_recv(fd, big, ctypes.byref(length2), 5000), length2.value)
data = big.raw[64 + 56 : 64 + length2.value]
print("data", data == bytes(i % 251 for i in range(len(data))))
print("hdrlen", struct.unpack_from("<I", big.raw, 16)[0])
print("unreg", um.umad_unregister(fd, srv), um.umad_unregister(fd, srv))
um.umad_close_port(fd)
"""

TABLE = 70000  # bytes of records: more than one frame


def answer_table(conn: Conn, msg: bytes) -> list[bytes]:
    mad = bytearray(msg[umad.HDR_SIZE : umad.HDR_SIZE + 56])
    mad[3] = 0x92  # GetTableResp
    total = umad.HDR_SIZE + 56 + TABLE
    body = bytes(mad) + bytes(i % 251 for i in range(TABLE))
    return [header(struct.unpack_from("<I", msg)[0], total) + body]


def test_the_kernels_umad_semantics_and_a_message_longer_than_a_frame(tree, tmp_path):
    stub = Stub(tree, answer_table)
    try:
        r = run([sys.executable, "-c", _PROGRAM], stub.env(), tmp_path)
    finally:
        stub.close()
    assert r.returncode == 0, r.stderr
    got = dict(line.split(" ", 1) for line in r.stdout.splitlines())
    assert got["noagent"] == f"(-1, {errno.EINVAL})"
    assert got["agents"] == "0 1"
    assert got["short"] == f"(-1, {errno.EINVAL})"  # < hdr + IB_MGMT_RMPP_HDR
    assert got["long"] == f"(-1, {errno.EINVAL})"  # agent 0's non-RMPP MAD > 256
    assert got["pkey"] == f"(-1, {errno.EINVAL})"  # after the first registration
    assert got["flags"] == f"(-1, {errno.EINVAL}) 1"  # IB_USER_MAD_USER_RMPP
    assert got["reg2"] == "0 2"  # the agent id written back
    assert got["shortread"] == f"(-1, {errno.EINVAL})"
    assert got["empty"] == f"(-1, {errno.EAGAIN})"  # libibumad opens O_NONBLOCK
    assert got["send"] == "0"
    assert got["recv1"] == f"-{errno.ENOSPC} {56 + TABLE}"  # umad_recv: the size needed
    assert got["recv2"] == f"0 {56 + TABLE}"
    assert got["data"] == "True"
    assert got["hdrlen"] == str(umad.HDR_SIZE + 56 + TABLE)
    assert got["unreg"] == "0 -1"  # umad_unregister returns the ioctl's -1
    # the registration with methods went to the server, the one without did not
    assert len(stub.registered) == 2
    token = stub.registered[0][0]
    for (_, req), want in zip(stub.registered, ((1, 1 << 0x12), (2, 1 << 0x01)), strict=True):
        aid, qpn, mclass, version, _res, flags, mask, oui, rmpp = umad.REG_REQ2.unpack_from(req)
        assert (aid, qpn, mclass, version, flags, oui, rmpp) == (
            want[0],
            1,
            0x32,
            1,
            0,
            0x001405,
            0,
        )
        assert int.from_bytes(mask, "little") == want[1]
    assert stub.unregistered == [(token, 1)]
    # the request reached the server with hi_tid = agent 0, the low half the tool's
    assert tid_of(stub.conns[0].got[0]) == 0x0000_0000_0000_0042


def test_the_server_going_away_fails_the_tool_at_once(tree, tmp_path):
    def vanish(conn: Conn, msg: bytes) -> list[bytes]:
        threading.Timer(0.2, stub.close).start()
        return []

    stub = Stub(tree, vanish)
    t0 = time.monotonic()
    r = run(
        ["smpquery", "-C", "mlx5_1", "-D", "-t", "20000", "nodeinfo", "0"], stub.env(), tmp_path
    )
    assert time.monotonic() - t0 < 10  # not the 20 s timeout: the read failed
    assert r.returncode != 0
    assert r.stderr.count(f"fabriclab: the fabric server '{stub.name}' went away\n") == 1
    assert os.listdir(tmp_path) == []


def test_issm_is_held_by_one_opener(stub, tmp_path):
    prog = (
        "import os, errno\n"
        "a = os.open('/dev/infiniband/issm0', os.O_RDWR | os.O_NONBLOCK)\n"
        "try:\n"
        "    os.open('/dev/infiniband/issm0', os.O_RDWR | os.O_NONBLOCK)\n"
        "except OSError as e:\n"
        "    print(errno.errorcode[e.errno])\n"
        "os.close(a)\n"
    )
    r = run([sys.executable, "-c", prog], stub.env(), tmp_path)
    assert (r.returncode, r.stdout.strip()) == (0, "EAGAIN"), r.stderr


def test_rdma_core_56_tools_through_the_library(tree, tmp_path):
    """Debian 13's libibumad 56 (which opens two umad files per tool, and reads every CA
    several times) through the same library: in the Debian 13 root on an older system,
    the system's own tools on Debian 13."""
    if debian13.needed():
        host, inside = debian13.scratch("hostlib")
        shutil.copytree(tree, host / "sys")
        shutil.copy(library_path(), host / "lib.so")
        stub = Stub(Path(inside) / "sys", answer_smp, where=(host, inside))
        env = {**stub.env(), "LD_PRELOAD": f"{inside}/lib.so"}
        keep = ("LD_PRELOAD", "FABRICLAB_SOCKNAME", "FABRICLAB_HOST_SOCKET", "FABRICLAB_TRAY")
        env = {k: env[k] for k in keep}

        def tool(*argv: str) -> subprocess.CompletedProcess:
            return debian13.run(argv, env=env, cwd=inside, timeout=60)

        workdir = host
    else:
        stub = Stub(tree, answer_smp)

        def tool(*argv: str) -> subprocess.CompletedProcess:
            return run(list(argv), stub.env(), tmp_path)

        workdir = tmp_path
    try:
        before = sorted(os.listdir(workdir))
        r = tool("ibstat", "-l")
        assert (r.returncode, r.stdout) == (0, "mlx5_0\nmlx5_1\nmlx5_2\nmlx5_3\n"), r.stderr
        r = tool("ibstat", "mlx5_3")
        assert r.returncode == 0 and "\t\tRate: 400\n" in r.stdout, r.stderr
        r = tool("smpquery", "-C", "mlx5_2", "-D", "nodeinfo", "0")
        assert r.returncode == 0, r.stderr
        assert re.search(rf"^Guid:\.+0x{NODE_GUID:016x}$", r.stdout, re.M)
        assert [c.index for c in stub.conns][-1] == 2
        assert sorted(os.listdir(workdir)) == before
    finally:
        stub.close()
