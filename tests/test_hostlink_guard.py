"""What the host protocol's server end refuses, spoken to from Python in-process: a
HELLO naming another pid, another process changing the agents of a umad connection
or taking a class the subnet manager serves on its port, unfinished long messages past
their bound in total (their memory given back), the waiting connections' places
(per uid, the owner's always found), and, behind the socket file's own mode, a uid
not admitted closed at accept and an admitted one held to its half of the clients
(another uid reaching the socket through a file made open for the test)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path

import pytest
import test_hostlink as hl
from helpers import served, wait_for

from fabriclab.ib import hostwire, umad
from fabriclab.model.build import build
from fabriclab.sim.fabric import minhop
from fabriclab.sim.wire import hostgate, umadsock
from fabriclab.sim.wire.admission import Policy
from fabriclab.sim.wire.hostlink import HostLink
from fabriclab.spec.load import load_spec

TRAY = "gb-r01-t01"
ATTACK = Path(__file__).with_name("hostattack.py")
SA_CLASS, SA_VERSION = 0x03, 2
SA_METHODS = (1 << 0x01) | (1 << 0x02) | (1 << 0x12) | (1 << 0x14) | (1 << 0x15)
NOBODY, STRANGER = 65534, 65533  # an admitted other uid, and one not admitted
PYTHON = "/usr/bin/python3"  # another uid cannot reach a virtual environment under /root


@contextmanager
def _hostlink(trees: Path, path: Path | None = None, **kw):
    """A fabric served in this process on a thread, with its host link (bound at
    ``path``, else beside ``trees``) known to test_hostlink's connect helper."""
    cluster = build(load_spec("gb200-su"))
    with served(cluster, serve=False, **kw) as srv:
        minhop.fill(srv.sim)
        link = HostLink(srv.transport, srv.sim, cluster, trees, srv.set_issm, path=path)
        link.bind()
        hl._SOCKETS[srv.name] = str(link.path)
        up = threading.Event()
        t = threading.Thread(target=srv.serve_forever, kwargs={"ready": up.set}, daemon=True)
        t.start()
        assert up.wait(30)
        try:
            yield srv, link
        finally:
            srv.stop()
            t.join(10)
            link.close()
            hl._SOCKETS.pop(srv.name, None)


@pytest.fixture(scope="module")
def fabric(tmp_path_factory):
    with _hostlink(tmp_path_factory.mktemp("trees")) as got:
        yield got


def test_a_hello_naming_another_pid_is_refused(fabric):
    srv, _link = fabric
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(10)
    s.connect(hl._SOCKETS[srv.name])
    s.send(
        hostwire.HELLO.pack(
            hostwire.MAGIC, 1, hostwire.KIND_UMAD, os.getppid(), 0, 0, 0, TRAY.encode()
        )
    )
    _m, err, _t, _v = hostwire.REPLY.unpack_from(r := s.recv(8192))
    s.close()
    assert err == errno.EPERM, r
    assert f"claims pid {os.getppid()}" in r[hostwire.REPLY.size :].decode()


def test_another_process_cannot_change_an_sms_agents_or_take_its_class(fabric):
    """This process plays the SM on TRAY's first port (issm held, the SA class
    registered); another process of the same uid tries every connection's agents and
    every SA method one at a time, and gets none of them."""
    srv, _link = fabric
    issm, err, *_ = hl._connect(srv, hostwire.KIND_ISSM, TRAY, 0)
    assert err == 0
    try:
        with hl._umad(srv, TRAY, 0) as (_s, token, _lid):
            assert hl._register(srv, token, 0, SA_CLASS, SA_VERSION, SA_METHODS) == (0, "")
            r = subprocess.run(
                [sys.executable, str(ATTACK), "hijack", hl._SOCKETS[srv.name], TRAY],
                input="",
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert r.returncode == 0, r.stderr
            got = json.loads(r.stdout)
            assert got == {"umad": 0, "unregistered": [], "registered": []}, got
            cl = srv.transport.clients[token]
            assert cl.agents is not None and list(cl.agents) == [0]
            # the SM's own process still may: unregister and register again
            s, e, *_ = hl._connect(srv, hostwire.KIND_UNREGISTER, index=0, token=token)
            s.close()
            assert e == 0
            assert hl._register(srv, token, 1, SA_CLASS, SA_VERSION, SA_METHODS) == (0, "")
    finally:
        issm.close()


def _start_long(srv, want: int, tokens: list | None = None) -> socket.socket | None:
    """A umad connection whose first frame begins a message of ``want`` bytes (its
    token added to ``tokens``); None when the server closed it."""
    s, err, token, *_ = hl._connect(srv, hostwire.KIND_UMAD, TRAY, 0)
    assert err == 0
    if tokens is not None:
        tokens.append(token)
    first = bytearray(hl._hdr(0, 1, 1, length=want) + bytes(hostwire.FRAME_MAX - umad.HDR_SIZE))
    first[4:8] = hostwire.MORE.to_bytes(4, "little")
    first[64 + 1] = SA_CLASS
    try:
        s.send(first)
        s.send(bytes(hostwire.FRAME_MAX))
        s.settimeout(0.5)
        if s.recv(16) == b"":
            s.close()
            return None
    except TimeoutError:
        return s
    except OSError:
        s.close()
        return None
    return s


def test_unfinished_messages_are_bounded_in_total_and_given_back(fabric):
    srv, link = fabric
    """Six tools each begin a 16 MiB message (the longest taken): four fit in the 64 MiB
    that unfinished messages may hold together, the other two are closed."""
    held, refused = [], 0
    for _ in range(6):
        s = _start_long(srv, 16 << 20)
        if s is None:
            refused += 1
        else:
            held.append(s)
    assert (len(held), refused) == (4, 2)
    assert link.mads.unfinished == umadsock.UNFINISHED_MAX == 64 << 20
    for s in held:
        s.close()
    wait_for(lambda: link.mads.unfinished == 0, 10, "the unfinished messages given back")
    assert not link.mads.partials


def _pair(uid: int) -> tuple[socket.socket, hostgate.Peer]:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    b.close()
    return a, hostgate.Peer(1000 + uid, uid, uid)


def test_waiting_connections_are_bounded_per_uid_and_the_owner_always_gets_a_place():
    owner = 4242
    p = hostgate.Pending(owner=owner, total=8, per_uid=3)
    socks, oks = [], []
    for uid in (7, 7, 7, 7, 8, 8, 8, 9, 9, 10):
        s, peer = _pair(uid)
        socks.append(s)
        ok, evicted = p.admit(s, peer)
        assert evicted is None
        oks.append(ok)
    assert oks == [True] * 3 + [False] + [True] * 5 + [False]  # 4th of uid 7; 9th in all
    assert (p.of_uid(7), p.of_uid(8), p.of_uid(9), len(p)) == (3, 3, 2, 8)
    oldest = next(iter(p.by_fd.values()))
    for uid in (owner, 0):
        s, peer = _pair(uid)
        socks.append(s)
        ok, evicted = p.admit(s, peer)
        assert ok and evicted is not None and evicted.peer.uid != uid
    assert oldest.sock.fileno() not in p.by_fd and len(p) == 8
    assert p.silent(float("inf")) and not p.silent(0.0)
    for s in socks:
        s.close()


def test_the_owners_long_message_makes_room_by_closing_another_users(fabric):
    """Four tools of another uid (white-box: their clients' uid changed) hold the 64
    MiB; the owner's message of 16 MiB closes the oldest of them and is taken."""
    srv, link = fabric
    tokens: list[int] = []
    held = [_start_long(srv, 16 << 20, tokens) for _ in range(4)]
    assert all(held) and link.mads.unfinished == 64 << 20
    for t in tokens:
        srv.transport.clients[t].sender = ("uid", 65534)
    try:
        mine = _start_long(srv, 16 << 20)
        assert mine is not None
        assert tokens[0] not in srv.transport.clients
        assert all(t in srv.transport.clients for t in tokens[1:])
        assert link.mads.unfinished == 64 << 20
        mine.close()
    finally:
        for s in held:
            if s is not None:
                s.close()
    wait_for(lambda: link.mads.unfinished == 0, 10, "the unfinished messages given back")


@pytest.fixture
def open_fabric(tmp_path):
    """A fabric that admits NOBODY, with 8 clients in all, its host socket a file any
    uid may reach (mode 0777 in a 0777 directory outside the 0700 test tree: the real
    one is 0600 in the 0700 state directory, which the kernel keeps other uids out of),
    so that what the server itself checks is seen."""
    if os.geteuid() != 0 or not shutil.which("setpriv") or not os.access(PYTHON, os.X_OK):
        pytest.skip("runs a second uid: needs root, setpriv and the system's python3")
    where = Path(tempfile.mkdtemp(prefix="flguard"))
    where.chmod(0o777)
    policy = Policy(uids=frozenset({os.geteuid(), NOBODY}), max_clients=8)
    try:
        with _hostlink(tmp_path / "trees", where / "fabric.host", policy=policy) as got:
            got[1].path.chmod(0o777)
            yield got
    finally:
        shutil.rmtree(where, ignore_errors=True)


def _setpriv(uid: int) -> list[str]:
    return ["setpriv", "--reuid", str(uid), "--regid", str(uid), "--clear-groups"]


def _as(uid: int, *args: str) -> subprocess.Popen:
    """hostattack.py as ``uid`` (its source on the command line: that uid may not read
    the tree); standard input closed ends it."""
    return subprocess.Popen(
        [*_setpriv(uid), PYTHON, "-c", ATTACK.read_text(), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_uid_not_admitted_is_told_and_closed_at_accept(open_fabric):
    """A connection of a uid the server does not admit, which says nothing, gets the
    refusal and the hang-up at once: it never waits for a HELLO or takes a place."""
    srv, link = open_fabric
    p = _as(STRANGER, "quiet", str(link.path))
    out, err = p.communicate(input="", timeout=60)
    assert p.returncode == 0, err
    got = json.loads(out)
    assert got == {
        "connect": None,
        "reply": [errno.EACCES, f"uid {STRANGER} may not attach (up --allow-user)"],
        "closed": True,
    }, got
    assert len(link._pending) == 0
    s, e, *_ = hl._connect(srv, hostwire.KIND_UMAD, TRAY, 0)  # the owner's still served
    s.close()
    assert e == 0


def test_an_admitted_uid_holds_half_the_clients_and_the_owners_tools_still_attach(
    open_fabric,
):
    """With 8 clients in all, NOBODY (admitted) asks for 8 open umad files: it gets the
    per-sender half, 4, and the owner still opens two more."""
    srv, link = open_fabric
    assert srv.transport.per_sender == 4
    p = _as(NOBODY, "umads", str(link.path), TRAY, "8")
    try:
        assert p.stdout is not None
        line = p.stdout.readline()
        assert line.strip() == "granted 4", (line, p.stderr.read() if p.stderr else "")
        mine = []
        for index in (0, 1):
            s, e, _t, _v, text = hl._connect(srv, hostwire.KIND_UMAD, TRAY, index)
            mine.append(s)
            assert e == 0, text
        for s in mine:
            s.close()
    finally:
        p.communicate(input="", timeout=60)
