"""The host protocol (``<name>:host``) against 'fabriclab up', as another uid
(setpriv) and as misbehaving tools: silent connections of another uid do not keep the
owner's ibstat out; an admitted user cannot remove OpenSM's agents or take the SA
class on its port (saquery keeps answering); unfinished long messages are refused past
their bound and the server's memory comes back when they close."""

from __future__ import annotations

import json
import os
import select
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fabric_server import fabric_up
from helpers import wait_for

from fabriclab.ib import hostwire, simwire, umad

pytestmark = pytest.mark.realtools

ATTACK = Path(__file__).with_name("hostattack.py")
NOBODY = 65534
AS_NOBODY = ["setpriv", "--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups"]
PYTHON = "/usr/bin/python3"  # another uid cannot reach a virtual environment under /root
SM_TRAY, OTHER_TRAY = "sched-worker1", "sched-worker2"
MIB = 1 << 20


@pytest.fixture
def as_other_uid():
    if os.geteuid() != 0 or not shutil.which("setpriv") or not os.access(PYTHON, os.X_OK):
        pytest.skip("runs a second uid: needs root, setpriv and the system's python3")


def _address(f) -> str:
    return "@" + simwire.sockname(f.name, hostwire.SOCKET_KIND).hex()


@contextmanager
def _attack(*args: str) -> Iterator[subprocess.Popen]:
    """hostattack.py as uid 65534 (its source given on the command line: that uid may
    not read the tree); standard input closed ends it."""
    p = subprocess.Popen(
        [*AS_NOBODY, PYTHON, "-c", ATTACK.read_text(), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield p
    finally:
        assert p.stdin is not None
        p.stdin.close()
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)


def _line(p: subprocess.Popen, timeout: float = 120) -> str:
    assert p.stdout is not None
    ready, _, _ = select.select([p.stdout], [], [], timeout)
    line = p.stdout.readline() if ready else ""
    assert line, f"no line from the attacker in {timeout} s: {p.stderr.read() if p.stderr else ''}"
    return line


def _exec(f, tray: str, *argv: str) -> subprocess.CompletedProcess:
    return f.fabriclab("exec", tray, "--", *argv, timeout=60)


@pytest.mark.parametrize("allowed", [False, True], ids=["refused-uid", "admitted-uid"])
def test_silent_connections_of_another_uid_do_not_keep_the_owners_tools_out(
    real_tools, as_other_uid, tmp_path, allowed
):
    """300 connections of uid 65534 that never say HELLO (each the server closes is
    opened again): refused at accept when the uid is not admitted, at most 16 waiting
    when it is; root's ibstat through the host library works 8 times of 8."""
    extra = ["--allow-user", str(NOBODY)] if allowed else []
    with fabric_up("lab", tmp_path, extra=extra) as f:
        with _attack("silent", _address(f), "300") as p:
            assert _line(p).startswith("ready")
            for i in range(8):
                t0 = time.monotonic()
                r = _exec(f, SM_TRAY, "ibstat")
                assert r.returncode == 0, f"ibstat {i + 1} of 8: {r.stderr[-2000:]}"
                assert "CA type" in r.stdout
                assert time.monotonic() - t0 < 30, f"ibstat {i + 1} took too long"
            assert p.poll() is None, "the attacker stopped early"
        log = (Path(f.env["FABRICLAB_STATE_DIR"]) / f"{f.name}.log").read_text()
        if not allowed:
            assert f"uid {NOBODY}" in log and "may not attach" in log


def test_an_admitted_user_cannot_remove_opensms_agents_or_take_the_sa_class(
    real_tools, as_other_uid, tmp_path
):
    """uid 65534, admitted with --allow-user, opens a umad file on OpenSM's port, tries
    to unregister every agent of connections 0-63 and to register the SA class there
    one method at a time: the server grants none of it, and root's saquery answers
    from both trays while the attacker holds its connection."""
    with fabric_up(
        "lab", tmp_path, sm=True, sm_at=SM_TRAY, extra=["--allow-user", str(NOBODY)]
    ) as f:
        wait_for(lambda: "SUBNET UP" in f.opensm_log(), 60, "OpenSM's first SUBNET UP")
        assert _exec(f, OTHER_TRAY, "saquery").returncode == 0
        with _attack("hijack", _address(f), SM_TRAY) as p:
            got = json.loads(_line(p))
            assert got == {"umad": 0, "unregistered": [], "registered": []}, got
            for tray in (OTHER_TRAY, SM_TRAY):
                r = _exec(f, tray, "saquery")
                assert r.returncode == 0, f"saquery on {tray}: {r.stderr[-2000:]}"
                assert r.stdout.count("NodeRecord dump:") == len(f.cluster.fabric.nodes)


def test_an_admitted_user_holds_half_the_clients_and_the_owners_tools_still_attach(
    real_tools, as_other_uid, tmp_path
):
    """With --max-clients 8, uid 65534 (admitted) asks for 8 open umad files: it gets
    the per-sender half, 4, and root's perfquery (an open umad file) still works."""
    extra = ["--allow-user", str(NOBODY), "--max-clients", "8"]
    with fabric_up("lab", tmp_path, extra=extra) as f:
        with _attack("umads", _address(f), SM_TRAY, "8") as p:
            assert _line(p).strip() == "granted 4"
            for tray in (SM_TRAY, OTHER_TRAY):
                r = _exec(f, tray, "perfquery")
                assert r.returncode == 0 and "PortXmitData" in r.stdout, r.stderr[-2000:]


def _rss(pid: int) -> int:
    """Process ``pid``'s resident memory in bytes (VmRSS, proc(5))."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def _unfinished(address: bytes, tray: str, want: int) -> socket.socket | None:
    """A umad connection holding a message of ``want`` bytes but its last piece; None
    when the server closed it."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(10)
    s.connect(address)
    s.send(hostwire.HELLO.pack(hostwire.MAGIC, 1, hostwire.KIND_UMAD, os.getpid(), 0, 0, 0,
                               tray.encode()))  # fmt: skip
    assert hostwire.REPLY.unpack_from(s.recv(8192))[1] == 0
    first = bytearray(hostwire.FRAME_MAX)
    umad.HDR.pack_into(first, 0, 0, hostwire.MORE, 0, 0, want, b"", b"", b"", *[0] * 6,
                       b"", b"", 0)  # fmt: skip
    first[umad.HDR_SIZE : umad.HDR_SIZE + 4] = bytes([1, 0x03, 2, 0x12])
    piece = bytes(hostwire.FRAME_MAX)
    try:
        s.send(first)
        s.settimeout(0.3)
        try:
            if s.recv(16) == b"":
                raise ConnectionResetError
        except TimeoutError:
            pass
        s.settimeout(10)
        for _ in range(want // hostwire.FRAME_MAX - 2):
            s.send(piece)
    except OSError:
        s.close()
        return None
    return s


def test_unfinished_long_messages_are_refused_past_their_bound_and_memory_comes_back(
    real_tools, tmp_path
):
    """40 umad connections each send all but the last piece of a 16 MiB message: those
    past 64 MiB in all are closed (a line in the log), the server's resident memory
    grows by less than 100 MiB, and falls back when the connections close."""
    with fabric_up("lab", tmp_path) as f:
        pid = f.instance().pid
        assert _exec(f, SM_TRAY, "ibstat").returncode == 0
        base = _rss(pid)
        address = simwire.sockname(f.name, hostwire.SOCKET_KIND)
        held: list[socket.socket] = []
        refused = 0
        try:
            for _ in range(40):
                s = _unfinished(address, SM_TRAY, 16 * MIB)
                if s is None:
                    refused += 1
                else:
                    held.append(s)
            peak = _rss(pid)
            assert peak - base < 100 * MIB, f"VmRSS {base // MIB} MiB -> {peak // MIB} MiB"
            assert len(held) <= 4 and refused >= 36, (len(held), refused)
        finally:
            for s in held:
                s.close()
        wait_for(
            lambda: _rss(pid) - base < 16 * MIB,
            30,
            lambda: f"VmRSS back near {base // MIB} MiB (now {_rss(pid) // MIB} MiB)",
        )
        assert _exec(f, SM_TRAY, "ibstat").returncode == 0
        log = (Path(f.env["FABRICLAB_STATE_DIR"]) / f"{f.name}.log").read_text()
        assert "past 64 MiB; connection closed" in log
