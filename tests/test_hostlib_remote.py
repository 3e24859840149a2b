"""fabriclab's host library over TCP (FABRICLAB_HOST_ADDR: sim/host/hostlib/remote.c,
stream.c, unpack.c): the real ibstat and smpquery on a tray whose fabric server is a TCP
address, against a small server end written for the test on loopback (the protocol of
ib/hostwire.py, each packet behind its length, AUTH before HELLO, TREE's archive): the
tray's tree unpacked into a private directory, the umad device the stream itself, and
what a wrong token, a hostile server and a server going away do to the tools."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from tcpstub import LENGTH, TcpStub, entry
from test_hostlib import NODE_GUID, TRAY, Conn, answer_smp, run, tree  # noqa: F401

from fabriclab.ib import hostwire, umad
from fabriclab.sim.host.hostlib import library_path

HOSTLIB = Path(library_path()).parent


def test_the_tcp_constants_are_the_protocols():
    text = (HOSTLIB / "hostwire.h").read_text()
    d = {m[0]: m[1] for m in re.findall(r"^#define (FL_\w+) (\S+)", text, re.M)}
    assert int(d["FL_LENGTH_SIZE"]) == LENGTH.size
    assert int(d["FL_TOKEN_SIZE"]) == hostwire.TOKEN_SIZE == len(secrets.token_hex(32))
    assert "FL_TREE_MAX (16 * 1024 * 1024)" in text and hostwire.TREE_MAX == 16 << 20
    assert int(d["FL_ENTRY_SIZE"]) == hostwire.ENTRY.size
    assert int(d["FL_ENTRY_DIR"]) == hostwire.ENTRY_DIR
    assert int(d["FL_ENTRY_FILE"]) == hostwire.ENTRY_FILE
    assert int(d["FL_ENTRY_SYMLINK"]) == hostwire.ENTRY_SYMLINK
    assert int(d["FL_ENTRY_PATH_MAX"]) == hostwire.ENTRY_PATH_MAX


@pytest.fixture
def stub(tree):  # noqa: F811
    s = TcpStub(tree, answer_smp)
    yield s
    s.close()


def lines(stderr: str) -> list[str]:
    return [x for x in stderr.splitlines() if x.startswith("fabriclab:")]


# --- the tools over TCP -----------------------------------------------------------------


def test_real_ibstat_sees_the_trays_devices_from_the_unpacked_tree(stub, tree, tmp_path):  # noqa: F811
    r = run(["ibstat", "-l"], stub.env(), tmp_path)
    assert (r.returncode, r.stdout, r.stderr) == (0, "mlx5_0\nmlx5_1\nmlx5_2\nmlx5_3\n", "")
    r = run(["ibstat"], stub.env(), tmp_path)
    assert r.returncode == 0, r.stderr
    assert re.findall(r"^CA '(\S+)'", r.stdout, re.M) == [f"mlx5_{i}" for i in range(4)]
    assert r.stdout.count("\t\tRate: 400\n") == 4
    lid = (tree / "class/infiniband/mlx5_2/ports/1/lid").read_text().strip()
    block = r.stdout.split("CA 'mlx5_2'")[1].split("CA 'mlx5_3'")[0]
    assert f"\t\tBase lid: {int(lid, 16)}\n" in block
    # the tree is a private directory (0700, under TMPDIR) while the process lives,
    # and goes with it
    prog = (
        "import os\n"
        "print(*sorted(os.listdir('/sys/class/infiniband')))\n"
        "t = os.environ['TMPDIR']\n"
        "(d,) = os.listdir(t)\n"
        "print(d.startswith('fabriclab-tree-'), oct(os.stat(f'{t}/{d}').st_mode & 0o777))\n"
    )
    r = run([sys.executable, "-c", prog], stub.env(), tmp_path)
    assert r.stdout == "mlx5_0 mlx5_1 mlx5_2 mlx5_3\nTrue 0o700\n", r.stderr
    assert os.listdir(stub.tmp) == [] and os.listdir(tmp_path) == []
    # ibstatus, a dash script (cd, a glob, a cat per file): its commands take the tree
    # dash fetched instead of each fetching its own
    before = len(stub.tree_pids)
    r = run(["ibstatus"], stub.env(), tmp_path)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert re.findall(r"^Infiniband device '(\S+)' port 1 status:", r.stdout, re.M) == [
        f"mlx5_{i}" for i in range(4)
    ]
    assert r.stdout.count("rate:\t\t 400 Gb/sec (4X NDR)\n") == 4
    assert len(stub.tree_pids) == before + 1
    # dash ends with _exit (no destructor): its directory stays until the next one made
    # there sweeps it (its process is gone)
    assert [p.split("-")[3] for p in os.listdir(stub.tmp)] in ([], [str(stub.tree_pids[-1])])
    r = run(["ibstat", "-l"], stub.env(), tmp_path)
    assert r.returncode == 0 and os.listdir(stub.tmp) == [], r.stderr


def test_real_smpquery_gets_its_answer_through_the_stream(stub, tmp_path):
    r = run(["smpquery", "-C", "mlx5_1", "-D", "nodeinfo", "0"], stub.env(), tmp_path)
    assert r.returncode == 0, r.stderr
    assert re.search(rf"^Guid:\.+0x{NODE_GUID:016x}$", r.stdout, re.M)
    assert re.search(rf"^PortGuid:\.+0x{NODE_GUID + 1:016x}$", r.stdout, re.M)
    assert [c.index for c in stub.conns][-1] == 1  # umad1: mlx5_1's port
    sent = [c for c in stub.conns if c.got][-1].got[-1]
    assert struct.unpack_from("<I", sent)[0] == (
        int.from_bytes(sent[umad.HDR_SIZE + 8 : umad.HDR_SIZE + 16], "big") >> 32
    )  # the request went through whole: hi_tid = the agent, as on the unix socket
    assert r.stderr == "" and os.listdir(stub.tmp) == []


def test_a_wrong_token_or_a_bad_setting_is_one_line(stub, tmp_path):
    wrong = tmp_path.parent / f"{tmp_path.name}-wrong"
    wrong.write_text(secrets.token_hex(32) + "\n")
    r = run(["ibstat", "mlx5_0"], stub.env(FABRICLAB_HOST_TOKEN_FILE=str(wrong)), tmp_path)
    assert r.returncode != 0 and "'mlx5_0' IB device can't be found" in r.stderr
    assert lines(r.stderr) == [f"fabriclab: wrong token for fabric '{stub.name}'"]
    wrong.write_text("not a token\n")
    r = run(["ibstat", "-l"], stub.env(FABRICLAB_HOST_TOKEN_FILE=str(wrong)), tmp_path)
    assert lines(r.stderr) == [
        f"fabriclab: the token file {wrong} does not hold a fabric's token (64 hex characters)"
    ]
    wrong.unlink()
    gone = str(wrong)
    r = run(["ibstat", "-l"], stub.env(FABRICLAB_HOST_TOKEN_FILE=gone), tmp_path)
    assert lines(r.stderr) == [
        f"fabriclab: cannot read the token file {gone}: No such file or directory"
    ]
    r = run(["ibstat", "-l"], stub.env(FABRICLAB_HOST_ADDR="127.0.0.1"), tmp_path)
    assert lines(r.stderr) == [
        "fabriclab: FABRICLAB_HOST_ADDR '127.0.0.1' is not HOST:PORT (or [IPv6]:PORT)"
    ]
    with socket.socket() as free:  # a port nobody listens on
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    r = run(["ibstat", "-l"], stub.env(FABRICLAB_HOST_ADDR=f"127.0.0.1:{port}"), tmp_path)
    assert lines(r.stderr) == [
        f"fabriclab: cannot reach the fabric server '{stub.name}' at 127.0.0.1:{port}: "
        "Connection refused"
    ]
    r = run(["ibstat", "-l"], stub.env("no-such-tray"), tmp_path)
    assert lines(r.stderr) == ["fabriclab: no-such-tray: no such tray"]
    assert r.stdout == "" and os.listdir(stub.tmp) == []


def test_an_ipv6_literal_and_a_name_reach_the_server(tree, tmp_path):  # noqa: F811
    stub = TcpStub(tree, host="::1")
    try:
        r = run(["ibstat", "-l"], stub.env(), tmp_path)
        assert (r.stdout, r.stderr) == ("mlx5_0\nmlx5_1\nmlx5_2\nmlx5_3\n", "")
    finally:
        stub.close()
    stub = TcpStub(tree)  # a name, resolved by getaddrinfo
    try:
        r = run(["ibstat", "-l"], stub.env(FABRICLAB_HOST_ADDR=f"localhost:{stub.port}"), tmp_path)
        assert (r.stdout, r.stderr) == ("mlx5_0\nmlx5_1\nmlx5_2\nmlx5_3\n", "")
    finally:
        stub.close()


def test_a_server_that_does_not_answer_fails_within_the_wait(stub, tmp_path):
    """A full backlog (the kernel drops the SYN) and a listener that never answers: the
    tool ends after the library's 5 s (WAIT_MS), with one line."""
    full = socket.create_server(("127.0.0.1", 0), backlog=0)
    mute = socket.create_server(("127.0.0.1", 0), backlog=8)
    queued = []
    try:
        for _ in range(4):  # more than the backlog holds
            c = socket.socket()
            c.setblocking(False)
            c.connect_ex(full.getsockname())
            queued.append(c)
        for server, want in (
            (full, "cannot reach the fabric server '{}' at {}: Connection timed out"),
            (mute, "the fabric server '{}' did not answer"),
        ):
            addr = f"127.0.0.1:{server.getsockname()[1]}"
            t0 = time.monotonic()
            r = run(["ibstat", "-l"], stub.env(FABRICLAB_HOST_ADDR=addr), tmp_path)
            assert 4 < time.monotonic() - t0 < 9
            assert lines(r.stderr) == ["fabriclab: " + want.format(stub.name, addr)]
    finally:
        for s in [full, mute, *queued]:
            s.close()


D, F, L = hostwire.ENTRY_DIR, hostwire.ENTRY_FILE, hostwire.ENTRY_SYMLINK
TOO_LONG = LENGTH.pack(0xFFFF_FFF0) + b"x" * 64
HOSTILE = {
    "a REPLY of 4 GiB": (
        {"reply": TOO_LONG},
        "sent a packet of 4294967280 bytes where at most 4096 were due: not the host protocol",
    ),
    "a tree of 16 MiB and one byte": (
        {"announce": hostwire.TREE_MAX + 1},
        f"announced a tree of {hostwire.TREE_MAX + 1} bytes (at most {hostwire.TREE_MAX})",
    ),
    "a truncated archive": (
        {"tree": entry(D, "class") * 3, "announce": 100},
        "hung up without an answer",
    ),
    "an entry longer than the archive": (
        {"tree": entry(D, "class") + entry(F, "class/x", b"abc")[:-2]},
        "entry 1 is longer than the archive",
    ),
    "a '..' path": (
        {"tree": entry(D, "class") + entry(F, "class/../../victim/owned", b"x")},
        "entry 1 has a path that is not relative and plain",
    ),
    "an absolute path": (
        {"tree": entry(F, "/victim-abs", b"x")},
        "entry 0 has a path that is not relative and plain",
    ),
    "an absolute symlink": (
        {"tree": entry(D, "class") + entry(L, "class/infiniband", b"/")},
        "entry 1 is a symbolic link that points out of the tree",
    ),
    "a symlink up and out": (
        {"tree": entry(D, "class") + entry(L, "class/infiniband", b"../../victim")},
        "entry 1 is a symbolic link that points out of the tree",
    ),
    "a file through a symlink": (
        {"tree": entry(D, "c") + entry(L, "class", b"c") + entry(F, "class/x", b"x")},
        "entry 2 (class/x) cannot be made: Not a directory",
    ),
    "an unknown entry type": (
        {"tree": entry(9, "class")},
        "entry 0 is of no known type",
    ),
}


@pytest.mark.parametrize("case", HOSTILE)
def test_a_hostile_server_gives_a_clear_line_and_no_write_outside(tree, tmp_path, case):  # noqa: F811
    kw, want = HOSTILE[case]
    stub = TcpStub(tree, **kw)
    victim = stub.tmp / "victim"
    victim.mkdir()
    try:
        t0 = time.monotonic()
        r = run(["ibstat", "-l"], stub.env(), tmp_path)
    finally:
        stub.close()
    assert time.monotonic() - t0 < 15
    assert "mlx5" not in r.stdout
    (line,) = lines(r.stderr)
    assert want in line, line
    assert line.startswith("fabriclab: ")
    assert os.listdir(stub.tmp) == ["victim"] and os.listdir(victim) == []
    assert not Path("/victim-abs").exists() and os.listdir(tmp_path) == []


# --- the server going, the device ending -----------------------------------------------


def test_the_server_going_away_fails_the_tool_at_once(tree, tmp_path):  # noqa: F811
    def vanish(conn: Conn, msg: bytes) -> list[bytes]:
        threading.Timer(0.2, stub.close).start()
        return []

    stub = TcpStub(tree, vanish)
    t0 = time.monotonic()
    argv = ["smpquery", "-C", "mlx5_1", "-D", "-t", "20000", "nodeinfo", "0"]
    r = run(argv, stub.env(), tmp_path)
    assert time.monotonic() - t0 < 10  # not the 20 s timeout: the read failed
    assert r.returncode != 0
    assert lines(r.stderr) == [f"fabriclab: the fabric server '{stub.name}' went away"]


def test_a_lying_length_on_the_device_closes_it_with_a_line(tree, tmp_path):  # noqa: F811
    stub = TcpStub(tree, answer_smp, lie=True)
    t0 = time.monotonic()
    try:
        argv = ["smpquery", "-C", "mlx5_1", "-D", "-t", "20000", "nodeinfo", "0"]
        r = run(argv, stub.env(), tmp_path)
    finally:
        stub.close()
    assert time.monotonic() - t0 < 10 and r.returncode != 0
    assert lines(r.stderr) == [  # the first cause only, as for a lie on the socket file
        f"fabriclab: the fabric server '{stub.name}' sent a packet of "
        f"{hostwire.FRAME_MAX + 1} bytes (the protocol allows 1 to {hostwire.FRAME_MAX}): "
        "its device is closed",
    ]


def test_a_long_lived_process_sees_the_tree_refreshed_in_place(tree, tmp_path):  # noqa: F811
    """tree.c asks again while a process uses the tree (after 10 s when the server names
    no keep-fresh time, as over TCP): the archive is unpacked again into the same
    directory, so the process reads the new values at the same paths."""
    root = tmp_path / "sys"
    shutil.copytree(tree, root)
    state = root / "class/infiniband/mlx5_0/ports/1/state"
    stub = TcpStub(root)
    prog = (
        "import os, sys, time\n"
        "p = '/sys/class/infiniband/mlx5_0/ports/1/state'\n"
        "first = open(p).read()\n"
        "where = os.path.realpath('/sys/class/infiniband')\n"
        "print(first.strip(), flush=True)\n"
        "sys.stdin.readline()  # the server's tree changes meanwhile\n"
        "end = time.monotonic() + 40\n"
        "while open(p).read() == first and time.monotonic() < end:\n"
        "    time.sleep(0.2)  # polling a file for a change, bounded by the deadline\n"
        "print(open(p).read().strip(), os.path.realpath('/sys/class/infiniband') == where)\n"
    )
    p = subprocess.Popen(
        [sys.executable, "-c", prog], env=stub.env(), cwd=tmp_path, text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert p.stdout is not None and p.stdin is not None
        assert p.stdout.readline() == state.read_text()
        state.chmod(0o644)
        state.write_text("1: DOWN\n")
        p.stdin.write("\n")
        p.stdin.flush()
        out, err = p.communicate(timeout=60)
    finally:
        p.kill()
        stub.close()
    assert (out, err) == ("1: DOWN True\n", "")
    assert len(stub.tree_pids) >= 2 and os.listdir(stub.tmp) == []
