"""The host protocol (the socket file ``<state dir>/<name>.host``) against 'fabriclab
up', as another uid (setpriv) and as misbehaving tools: another uid's connects, refused
or admitted with --allow-user, are turned away by the kernel and the owner's ibstat
works throughout; another process of the owner's uid cannot remove OpenSM's agents or
take the SA class on its port (saquery keeps answering); unfinished long messages are
refused past their bound and the server's memory comes back when they close.  What
the server itself checks behind the file's mode is in test_hostlink_guard.py."""

from __future__ import annotations

import json
import os
import select
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fabric_server import fabric_up
from helpers import wait_for

from fabriclab.ib import hostwire, umad

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
    """The fabric's host socket, as its record gives it."""
    path = f.instance().host_socket
    assert path, "no host socket in the fabric's record"
    return path


@contextmanager
def _attack(*args: str, other_uid: bool = True) -> Iterator[subprocess.Popen]:
    """hostattack.py as uid 65534 (its source given on the command line: that uid may
    not read the tree), or else as a process of this uid; standard input closed ends
    it."""
    argv = [*AS_NOBODY, PYTHON, "-c", ATTACK.read_text()] if other_uid else [
        sys.executable, str(ATTACK)]  # fmt: skip
    p = subprocess.Popen(
        [*argv, *args],
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
def test_another_uids_connects_are_refused_by_the_kernel_and_the_owners_tools_get_through(
    real_tools, as_other_uid, tmp_path, allowed
):
    """uid 65534 tries to hold 300 connections to the host socket that never say
    HELLO: the socket file (0600, in the 0700 state directory) keeps it out whether or
    not it is admitted (EACCES, or ENOENT), none of its connects reach the server, and
    root's ibstat through the host library works 8 times of 8."""
    extra = ["--allow-user", str(NOBODY)] if allowed else []
    with fabric_up("lab", tmp_path, extra=extra) as f:
        with _attack("silent", _address(f), "300") as p:
            assert _line(p).strip() in ("refused EACCES", "refused ENOENT")
            for i in range(8):
                t0 = time.monotonic()
                r = _exec(f, SM_TRAY, "ibstat")
                assert r.returncode == 0, f"ibstat {i + 1} of 8: {r.stderr[-2000:]}"
                assert "CA type" in r.stdout
                assert time.monotonic() - t0 < 30, f"ibstat {i + 1} took too long"
            assert p.poll() is None, "the attacker stopped early"
            assert p.stdin is not None
            p.stdin.close()
            assert _line(p).strip() == "held at most 0"
        log = (Path(f.env["FABRICLAB_STATE_DIR"]) / f"{f.name}.log").read_text()
        assert f"uid {NOBODY}" not in log  # the server never saw it


def test_another_process_of_the_owners_uid_cannot_remove_opensms_agents_or_take_the_sa_class(
    real_tools, tmp_path
):
    """A raw client of the owner's uid (its own process, not OpenSM's) opens a umad file
    on OpenSM's port, tries to unregister every agent of connections 0-63 and to
    register the SA class there one method at a time: the server grants none of it,
    and root's saquery answers from both trays while the client holds its connection."""
    with fabric_up("lab", tmp_path, sm=True, sm_at=SM_TRAY) as f:
        wait_for(lambda: "SUBNET UP" in f.opensm_log(), 60, "OpenSM's first SUBNET UP")
        assert _exec(f, OTHER_TRAY, "saquery").returncode == 0
        with _attack("hijack", _address(f), SM_TRAY, other_uid=False) as p:
            got = json.loads(_line(p))
            assert got == {"umad": 0, "unregistered": [], "registered": []}, got
            for tray in (OTHER_TRAY, SM_TRAY):
                r = _exec(f, tray, "saquery")
                assert r.returncode == 0, f"saquery on {tray}: {r.stderr[-2000:]}"
                assert r.stdout.count("NodeRecord dump:") == len(f.cluster.fabric.nodes)


def _rss(pid: int) -> int:
    """Process ``pid``'s resident memory in bytes (VmRSS, proc(5))."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def _unfinished(address: str, tray: str, want: int) -> socket.socket | None:
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
    """40 umad connections of the owner, through the socket file, each send all but the
    last piece of a 16 MiB message: those past 64 MiB in all are closed (a line in the
    log), the server's resident memory grows by less than 100 MiB, and falls back when
    the connections close."""
    with fabric_up("lab", tmp_path) as f:
        pid = f.instance().pid
        assert _exec(f, SM_TRAY, "ibstat").returncode == 0
        base = _rss(pid)
        address = _address(f)
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
