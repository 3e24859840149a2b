"""fabriclab's host library holding the server to the protocol's sizes and to time: a
frame or message longer than the protocol allows, or one that lies about its size,
fails the umad device (EIO, then POLLERR, one line) instead of a huge allocation or a
misread; a server that does not take the connection, a signal in the middle of a wait,
a registration's round trip, a server that goes away and a long message that stalls
half-way each end as the kernel's umad file would.  A small C probe
(hostlib_frames_probe.c), compiled here, drives the library against the stub server of
test_hostlib.py or a socket the test holds."""

from __future__ import annotations

import errno
import os
import select
import socket
import struct
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest
from test_hostlib import HOSTLIB, TRAY, Conn, Stub, header, run, tree

from fabriclab.ib import hostwire, umad
from fabriclab.sim.host.hostlib import library_path
from fabriclab.sim.wire.umadsock import UmadSocket

__all__ = ["tree"]  # the stub's /sys tree, a fixture of test_hostlib.py

FRAME = hostwire.FRAME_MAX
POLLERR = select.POLLERR


@pytest.fixture(scope="module")
def probe(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("probe") / "probe"
    src = Path(__file__).with_name("hostlib_frames_probe.c")
    subprocess.run(
        ["gcc", "-O1", "-Wall", "-Werror", "-pthread", f"-I{HOSTLIB}", "-o", str(out), str(src)],
        check=True,
    )
    return str(out)


def _pattern(n: int) -> bytes:
    return bytes(i % 251 for i in range(n))


def _message(n: int) -> bytes:
    """A message of ``n`` bytes to agent 0: the header, then the probe's pattern."""
    return header(0, n) + _pattern(n - umad.HDR_SIZE)


def _more(first: bytes, length: int) -> bytes:
    """A long message's first frame: MORE in its status, ``length`` in all."""
    f = bytearray(first)
    struct.pack_into("<I", f, umad.STATUS_AT, hostwire.MORE)
    struct.pack_into("<I", f, umad.LENGTH_AT, length)
    return bytes(f)


def _raw(frames: list[bytes], stall: float = 0.0, stall_after: int = 1):
    """An answer that sends ``frames`` as they are (not as send_message would), with a
    pause of ``stall`` seconds after the first ``stall_after`` of them."""

    def answer(conn: Conn, msg: bytes) -> list[bytes]:
        def go() -> None:
            for i, f in enumerate(frames):
                if stall and i == stall_after:
                    time.sleep(stall)  # the stall is what is tested
                conn.sock.send(f)

        threading.Thread(target=go, daemon=True).start()
        return []

    return answer


def _lines(text: str) -> dict[str, list[str]]:
    return {line.split()[0]: line.split()[1:] for line in text.splitlines() if line}


def _recv(stub: Stub, probe: str, size: int, tmp_path: Path) -> tuple[dict, str]:
    r = run([probe, "recv", str(size)], stub.env(), tmp_path, timeout=40)
    assert r.returncode == 0, r.stdout + r.stderr
    return _lines(r.stdout), r.stderr


LONG = umad.HDR_SIZE + 70000  # a message of two frames
BIG = umad.HDR_SIZE + 2 * FRAME  # a reader's buffer that takes any frame whole
LIES = {
    "4 GiB in a long message's header": [_more(_message(FRAME), 0xFFFF_FFFF)],
    "past the message bound": [_more(_message(FRAME), hostwire.MESSAGE_MAX + 1)],
    "a length shorter than the frame": [_more(_message(FRAME), 1000)],
    "a frame longer than FRAME_MAX": [_message(FRAME + 1000)],
    "a single frame's length that lies": [
        _message(umad.HDR_SIZE + 256)[: umad.LENGTH_AT]
        + struct.pack("<I", 100000)
        + _message(umad.HDR_SIZE + 256)[umad.LENGTH_AT + 4 :]
    ],
    "a piece that overruns the message": [
        _more(_message(LONG)[:FRAME], LONG),
        _message(LONG)[FRAME:] + b"\xee" * 100,
    ],
    "a piece shorter than the protocol's": [
        _more(_message(LONG)[:FRAME], LONG),
        _message(LONG)[FRAME : FRAME + 1000],
        _message(LONG)[FRAME + 1000 :],
    ],
    "a frame shorter than a header": [b"\x01" * 10],
}


@pytest.mark.parametrize("lie", LIES)
def test_a_frame_that_lies_fails_the_device_with_one_line(tree, probe, tmp_path, lie):
    stub = Stub(tree, _raw(LIES[lie]))
    try:
        got, err = _recv(stub, probe, BIG, tmp_path)
    finally:
        stub.close()
    assert got["err"][0] == str(errno.EIO), got
    assert int(got["err"][1]) < 3000  # at once: no wait for pieces that never come
    lines = [x for x in err.splitlines() if x.startswith("fabriclab:")]
    assert len(lines) == 1 and lines[0].startswith(
        f"fabriclab: the fabric server '{stub.name}' sent "
    ), err
    assert lines[0].endswith(": the umad device fails"), err
    # the device stays failed as the kernel's whose port went away: POLLERR at once,
    # read and write EIO
    assert got["poll"][:2] == ["1", hex(POLLERR)] and int(got["poll"][2]) < 1000, got
    assert got["read"] == ["-1", str(errno.EIO)]
    assert got["write"] == ["-1", str(errno.EIO)]


def test_a_message_at_the_bounds_reads_whole(tree, probe, tmp_path):
    """The honest long message, sent as the server does, still reads whole."""
    stub = Stub(tree, lambda conn, msg: [_message(LONG)])
    try:
        got, err = _recv(stub, probe, LONG, tmp_path)
    finally:
        stub.close()
    assert got["got"][:2] == [str(LONG), "1"], got
    assert "fabriclab:" not in err


def test_a_stall_mid_message_keeps_the_partial(tree, probe, tmp_path):
    """The server sends a long message's first piece, then nothing for longer than the
    library waits inside one read, then the rest: the reader gets EAGAIN meanwhile and
    then the whole message, never the rest read as a message of its own."""
    msg = _message(LONG)
    frames = [_more(msg[:FRAME], LONG), msg[FRAME:]]
    stub = Stub(tree, _raw(frames, stall=6.5))
    try:
        got, err = _recv(stub, probe, LONG, tmp_path)
    finally:
        stub.close()
    assert got["got"][:2] == [str(LONG), "1"], got
    assert int(got["got"][2]) >= 6000
    assert "fabriclab:" not in err


def test_the_server_going_away_is_pollerr_and_eio_as_the_kernels(tree, probe, tmp_path):
    """user_mad.c for a port that went away: poll EPOLLERR alone, read and write EIO."""

    stub = _vanishing(tree)
    got, err = _recv(stub, probe, BIG, tmp_path)
    assert got["err"][0] == str(errno.EIO), got
    # the poll that saw it go said POLLERR at once; this one, a second report, comes
    # DEAD_PACE_MS after that one (poll.c), well within its own 3 s
    assert got["poll"][:2] == ["1", hex(POLLERR)] and int(got["poll"][2]) < 1500, got
    assert got["read"] == ["-1", str(errno.EIO)]
    assert got["write"] == ["-1", str(errno.EIO)]
    assert err.count(f"fabriclab: the fabric server '{stub.name}' went away\n") == 1, err
    assert err.count("fabriclab:") == 1, err


def _vanishing(tree: Path) -> Stub:
    """The stub, gone 0.2 s after the first MAD a umad connection writes."""

    def vanish(conn: Conn, msg: bytes) -> list[bytes]:
        threading.Timer(0.2, stub.close).start()
        return []

    stub = Stub(tree, vanish)
    return stub


@pytest.mark.parametrize("how", ["poll", "select", "epoll", "read"])
def test_a_receiver_looping_on_a_dead_device_does_not_spin(tree, probe, tmp_path, how):
    """A receiver with no timeout on a device whose server went away (OpenSM's
    umad_receiver: poll, read, "ERR 5404", again; the same with select or epoll_wait; or
    a blocking read alone): the first failure comes at once with the line, then the
    library paces the reports (DEAD_PACE_MS, 1 s), each still saying the device failed
    (POLLERR, EPOLLERR, readable), so 3 s of the loop wake it a few times, not
    thousands."""
    stub = _vanishing(tree)
    r = run([probe, "dead", how], stub.env(), tmp_path, timeout=40)
    assert r.returncode == 0, r.stdout + r.stderr
    first, polls, reads, other = map(int, _lines(r.stdout)["dead"])
    assert 0 <= first < 3000 and other == 0, r.stdout
    assert reads <= 5 and polls <= 5, r.stdout
    assert reads >= 2 and polls >= (0 if how == "read" else 2), r.stdout  # still told
    assert r.stderr == f"fabriclab: the fabric server '{stub.name}' went away\n", r.stderr


class SlowStub(Stub):
    """The stub, answering the HELLOs of ``delays``' kinds that many seconds late (and
    touching ``mark`` when a REGISTER arrives)."""

    def __init__(self, root: Path, delays: dict[int, float], mark: Path | None = None):
        self.delays, self.mark = delays, mark
        self.local = threading.local()
        super().__init__(root)

    def _serve(self, c: socket.socket) -> None:
        raw = c.recv(hostwire.HELLO.size, socket.MSG_PEEK)
        self.local.kind = hostwire.HELLO.unpack_from(raw)[2]
        if self.local.kind == hostwire.KIND_REGISTER and self.mark is not None:
            self.mark.touch()
        super()._serve(c)

    def _reply(self, c: socket.socket, err: int = 0, token: int = 0, text: str = "") -> None:
        time.sleep(self.delays.get(self.local.kind, 0.0))  # the delay is what is tested
        super()._reply(c, err, token, text)


def test_a_signal_during_the_hello_is_retried_not_a_timeout(tree, probe, tmp_path):
    stub = SlowStub(tree, {hostwire.KIND_UMAD: 1.0})
    try:
        r = run([probe, "open", "sig"], stub.env(), tmp_path, timeout=30)
    finally:
        stub.close()
    got = _lines(r.stdout)
    assert got["open"][:2] == ["0", "0"], r.stdout + r.stderr
    assert int(got["open"][2]) >= 900 and int(got["open"][3]) > 10  # signals came
    assert "fabriclab:" not in r.stderr


def test_a_registration_round_trip_does_not_stall_write(tree, probe, tmp_path):
    mark = tmp_path / "registering"
    stub = SlowStub(tree, {hostwire.KIND_REGISTER: 3.0}, mark)
    try:
        r = run([probe, "register", str(mark)], stub.env(), tmp_path, timeout=30)
    finally:
        stub.close()
    got = _lines(r.stdout)
    size = umad.HDR_SIZE + 256
    # the write went out while the registration waited for the server
    assert got["write"][:2] == [str(size), "0"], r.stdout + r.stderr
    assert int(got["write"][2]) < 1000 and got["write"][3] == "1", r.stdout
    assert got["reg"][0] == "1" and int(got["reg"][1]) >= 2900, r.stdout
    assert len(stub.registered) == 1


@pytest.mark.parametrize("restart", [False, True], ids=["intr", "restart"])
def test_a_signal_ends_a_blocking_issm_open_as_the_kernels(tree, probe, tmp_path, restart):
    """A blocking open of an issm another holds waits as the kernel's ib_umad_sm_open
    does (down_interruptible): a signal whose handler lacks SA_RESTART ends it with
    EINTR at once; with SA_RESTART it goes on and opens when the holder lets go (2 s)."""
    stub = Stub(tree)
    try:
        r = run([probe, "issm", "restart" if restart else "intr"], stub.env(), tmp_path,
                timeout=30)  # fmt: skip
    finally:
        stub.close()
    fd, err, ms, signals = map(int, _lines(r.stdout)["issm"])
    assert signals == 1, r.stdout + r.stderr
    if restart:
        assert (fd, err) == (0, 0) and 1900 <= ms < 5000, r.stdout
    else:
        assert (fd, err) == (-1, errno.EINTR) and 250 <= ms < 1000, r.stdout
    assert "fabriclab:" not in r.stderr, r.stderr


class Deaf(Stub):
    """The stub, never reading what a umad connection writes (a stopped server)."""

    def __init__(self, root: Path):
        self.stop = threading.Event()
        super().__init__(root)

    def _mads(self, conn: Conn) -> None:
        self.stop.wait(60)

    def close(self) -> None:
        self.stop.set()
        super().close()


def test_a_write_the_server_never_takes_fails_in_time_even_blocking(tree, probe, tmp_path):
    """A blocking umad fd whose server stopped reading: once the socket is full, write
    waits at most its 10 s for room, then fails with EIO, as the kernel's write never
    waits on a peer."""
    stub = Deaf(tree)
    try:
        r = run([probe, "flood"], stub.env(), tmp_path, timeout=45)
    finally:
        stub.close()
    k, w, err, last = _lines(r.stdout)["flood"]
    assert (w, err) == ("-1", str(errno.EIO)), r.stdout + r.stderr
    assert int(k) > 1 and 9500 <= int(last) < 15000, r.stdout


def test_a_server_whose_backlog_is_full_is_one_line_not_a_hang(probe, tmp_path):
    """A listening socket that never accepts, its backlog full: open fails within the
    library's wait (5 s) with one clear line."""
    d = Path(tempfile.mkdtemp(prefix="flbl"))
    path = d / f"stuck.{hostwire.SOCKET_KIND}"
    lsock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    lsock.bind(str(path))
    lsock.listen(0)
    held = []
    try:
        for _ in range(64):  # fill the backlog: a connect that would wait says EAGAIN
            c = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            c.setblocking(False)
            held.append(c)
            try:
                c.connect(str(path))
            except BlockingIOError:
                break
        else:
            pytest.fail("the backlog never filled")
        env = {
            **os.environ,
            "LD_PRELOAD": library_path(),
            "FABRICLAB_SOCKNAME": "stuck",
            "FABRICLAB_HOST_SOCKET": str(path),
            "FABRICLAB_TRAY": TRAY,
        }
        t0 = time.monotonic()
        r = run([probe, "open"], env, tmp_path, timeout=20)
        took = time.monotonic() - t0
    finally:
        for s in [lsock, *held]:
            s.close()
        path.unlink(missing_ok=True)
        d.rmdir()
    assert _lines(r.stdout)["open"][:2] == ["-1", str(errno.ETIMEDOUT)], r.stdout
    assert 4.5 < took < 10
    assert r.stderr == (
        f"fabriclab: the fabric server 'stuck' at {path} did not take the connection "
        "within 5 s (its backlog is full: is it stopped?)\n"
    )


def test_a_reply_longer_than_the_protocol_or_of_many_lines(tree, probe, tmp_path):
    class Talker(Stub):
        said = "x" * hostwire.TEXT_MAX

        def _reply(self, c, err=0, token=0, text=""):
            super()._reply(c, errno.ENODEV, token, self.said)

    for said, line in (
        (
            "x" * (hostwire.TEXT_MAX + 1),
            f"the fabric server '{{}}' answered with more than the {hostwire.TEXT_MAX} "
            "bytes of text the protocol allows",
        ),
        ("no such\ntray\x1b[2J here\n", "no such tray [2J here"),
    ):
        stub = Talker(tree)
        stub.said = said
        try:
            r = run([probe, "open"], stub.env(), tmp_path)
        finally:
            stub.close()
        assert _lines(r.stdout)["open"][0] == "-1"
        assert r.stderr == f"fabriclab: {line.format(stub.name)}\n"


def test_the_server_sends_no_message_past_the_bound():
    """The server's end refuses a message longer than MESSAGE_MAX (the library would
    fail the device): it logs and sends nothing."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    u = UmadSocket(socket.AF_UNIX, socket.SOCK_SEQPACKET, fileno=a.detach())
    warned: list[str] = []

    class Log:
        def warning(self, kind: str, msg: str, *args) -> None:
            warned.append(msg % args)

    class Transport:
        rlog = Log()

        def detach(self, client, why: str) -> None:
            warned.append(why)

    class Mads:
        transport = Transport()

    u.mads, u.client = Mads(), None  # type: ignore[assignment]
    u.setblocking(False)
    b.setblocking(False)
    try:
        body = bytearray(hostwire.MESSAGE_MAX + 1)
        assert u._send_long(bytes(body)) == len(body)
        with pytest.raises(BlockingIOError):
            b.recv(FRAME)
        assert len(warned) == 1 and "longer than" in warned[0], warned
    finally:
        u.close()
        b.close()
