"""fabriclab's host library over TCP (FABRICLAB_HOST_ADDR: sim/host/hostlib/remote.c,
relay.c, unpack.c): the real ibstat and smpquery on a tray whose fabric server is a TCP
address, against a small server end written for the test on loopback (the protocol of
ib/hostwire.py, each packet behind its length, AUTH before HELLO, TREE's archive): the
tray's tree unpacked into a private directory, the umad device relayed by a thread, and
what a wrong token, a hostile server and a server going away do to the tools."""

from __future__ import annotations

import os
import re
import secrets
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import served
from tcpstub import LENGTH, TcpStub, entry
from test_hostlib import NODE_GUID, TRAY, Conn, answer_smp, run

from fabriclab.ib import hostwire, umad
from fabriclab.model.build import build
from fabriclab.sim.fabric import minhop
from fabriclab.sim.host import sysfs
from fabriclab.sim.host.hostlib import library_path
from fabriclab.sim.live import admin_requests
from fabriclab.sim.live.api import LiveFabric
from fabriclab.sim.live.clock import VirtualClock
from fabriclab.sim.live.traffic.engine import TrafficEngine
from fabriclab.spec.load import load_spec

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
    s = TcpStub(tree, answer_smp)
    yield s
    s.close()


def lines(stderr: str) -> list[str]:
    return [x for x in stderr.splitlines() if x.startswith("fabriclab:")]


# --- the tools over TCP -----------------------------------------------------------------


def test_real_ibstat_sees_the_trays_devices_from_the_unpacked_tree(stub, tree, tmp_path):
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


def test_real_smpquery_gets_its_answer_through_the_relay(stub, tmp_path):
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


def test_an_ipv6_literal_and_a_name_reach_the_server(tree, tmp_path):
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
def test_a_hostile_server_gives_a_clear_line_and_no_write_outside(tree, tmp_path, case):
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


# --- the server going, the relay ending ------------------------------------------------


def test_the_server_going_away_fails_the_tool_at_once(tree, tmp_path):
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


def test_a_lying_length_on_the_device_closes_it_with_a_line(tree, tmp_path):
    stub = TcpStub(tree, answer_smp, lie=True)
    t0 = time.monotonic()
    try:
        argv = ["smpquery", "-C", "mlx5_1", "-D", "-t", "20000", "nodeinfo", "0"]
        r = run(argv, stub.env(), tmp_path)
    finally:
        stub.close()
    assert time.monotonic() - t0 < 10 and r.returncode != 0
    assert lines(r.stderr) == [
        f"fabriclab: the fabric server '{stub.name}' sent a packet of "
        f"{hostwire.FRAME_MAX + 1} bytes (the protocol allows 1 to {hostwire.FRAME_MAX}): "
        "its device is closed",
        f"fabriclab: the fabric server '{stub.name}' went away",
    ]


_PROBE = r"""
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static int tasks(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/task");
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* waits (at most 5 s) until this process has `want` threads */
static int settle(int want)
{
    struct timespec tick = {0, 10000000};
    for (int i = 0; i < 500 && tasks() != want; i++)
        nanosleep(&tick, NULL);
    return tasks();
}

int main(void)
{
    int before = tasks(), most = 0;
    for (int i = 0; i < 20; i++) {
        int fd = open("/dev/infiniband/umad0", O_RDWR);
        if (fd < 0)
            return perror("open umad0"), 1;
        int n = tasks();
        most = n > most ? n : most;
        close(fd);
        settle(before);
    }
    int issm = open("/dev/infiniband/issm0", O_RDWR);
    if (issm < 0)
        return perror("open issm0"), 1;
    printf("issm %d\n", tasks());
    fflush(stdout);
    getchar(); /* the test sees the server hold IsSM, then says go on */
    close(issm);
    printf("before %d most %d after %d\n", before, most, settle(before));
    return 0;
}
"""


def test_the_relay_thread_ends_when_the_device_is_closed(stub, tmp_path):
    src, exe = tmp_path / "probe.c", tmp_path / "probe"
    src.write_text(_PROBE)
    subprocess.run(["gcc", "-O1", "-o", str(exe), str(src)], check=True, timeout=60)
    p = subprocess.Popen(
        [str(exe)], env=stub.env(), cwd=tmp_path, text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert p.stdout is not None and p.stdin is not None
        assert p.stdout.readline() == "issm 2\n"  # the probe and the issm's relay
        assert stub.issm_open.wait(10) and not stub.issm_closed.is_set()
        p.stdin.write("\n")
        p.stdin.flush()
        out, err = p.communicate(timeout=30)
    finally:
        p.kill()
    assert p.returncode == 0, err
    assert out == "before 1 most 2 after 1\n"  # one relay per open device, none left
    assert stub.issm_closed.wait(10)  # closing the device closed the stream: IsSM gone
    assert len(stub.conns) == 20 and err == ""


_FORK = r"""
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int count(const char *dir)
{
    int n = 0;
    DIR *d = opendir(dir);
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n - (dir[11] == 'f'); /* /proc/self/fd: less opendir's own */
}

static int settle(int want) /* at most 5 s */
{
    struct timespec tick = {0, 10000000};
    for (int i = 0; i < 500 && count("/proc/self/task") != want; i++)
        nanosleep(&tick, NULL);
    return count("/proc/self/task");
}

int main(void)
{
    int fds = count("/proc/self/fd"), fd = open("/dev/infiniband/umad0", O_RDWR);
    if (fd < 0)
        return perror("open umad0"), 1;
    int pipefd[2];
    if (pipe(pipefd))
        return 1;
    pid_t pid = fork();
    if (pid == 0) { /* the device's fd, the pipe: not the relay's own two */
        printf("child fds %d\n", count("/proc/self/fd") - fds);
        fflush(stdout);
        char c;
        close(pipefd[1]);
        return read(pipefd[0], &c, 1) < 0; /* until the parent says go */
    }
    close(pipefd[0]);
    close(fd); /* the child still holds the device: the relay stays */
    struct timespec pause = {0, 200000000};
    nanosleep(&pause, NULL); /* a wait that must see nothing happen */
    printf("parent closed %d\n", count("/proc/self/task"));
    close(pipefd[1]);
    waitpid(pid, NULL, 0);
    printf("child gone %d\n", settle(1));
    return 0;
}
"""


def test_a_forked_child_shares_the_device_and_not_the_relays_own_descriptors(stub, tmp_path):
    src, exe = tmp_path / "fork.c", tmp_path / "fork"
    src.write_text(_FORK)
    subprocess.run(["gcc", "-O1", "-o", str(exe), str(src)], check=True, timeout=60)
    r = run([str(exe)], stub.env(), tmp_path)
    assert r.returncode == 0, r.stderr
    # the child: the device and the pipe's two ends; the parent's relay lives on while
    # the child holds the device, and ends when the child goes
    assert r.stdout == "child fds 3\nparent closed 2\nchild gone 1\n", r.stdout + r.stderr


_UNPACK = r"""
#include "hostlib.h"

const char *server_name = "probe";

/* unpack_tree on each archive file named: what it answers, and the firmware file's
 * content through the tree's link after it */
int main(int argc, char **argv)
{
    static uint8_t buf[1 << 20];
    char text[FL_TEXT_MAX + 1], now[64];
    int keep = -1;
    for (int i = 1; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        size_t n = fread(buf, 1, sizeof buf, f);
        fclose(f);
        int r = unpack_tree(buf, n, text);
        printf("%d %s\n", r, text);
        if (i == 1 && (r || chdir(text)))
            return 1;
        if (i == 1) /* held open across the refresh */
            keep = open("class/infiniband/mlx5_0/fw_ver", O_RDONLY);
        int fd = open("class/infiniband/mlx5_0/fw_ver", O_RDONLY);
        memset(now, 0, sizeof now);
        printf("now %zd %s", read(fd, now, sizeof now - 1), now);
        close(fd);
    }
    memset(now, 0, sizeof now);
    printf("held %zd %s", read(keep, now, sizeof now - 1), now);
    return 0;
}
"""


def test_asking_again_refreshes_the_tree_in_place(tmp_path):
    """unpack.c alone (compiled with the test's main): a second archive rewrites the same
    private directory, each file replaced by a rename (a reader of the old one keeps it);
    links that stay inside the tree are made; a bad archive changes nothing before it."""
    dev = "devices/pci0000:00/0000:00:01.0/infiniband/mlx5_0"
    ok = (
        [entry(D, p) for p in ("class", "class/infiniband", "devices")]
        + [entry(D, "/".join(dev.split("/")[: i + 1])) for i in range(1, 5)]
        + [entry(L, "class/infiniband/mlx5_0", f"../../{dev}".encode())]
    )
    first = [*ok, entry(F, f"{dev}/fw_ver", b"28.39.1002\n")]
    second = [*ok, entry(F, f"{dev}/fw_ver", b"28.40.1000\n"), entry(F, f"{dev}/new", b"x")]
    bad = [entry(F, f"{dev}/fw_ver", b"bad\n"), entry(F, "../out", b"x")]
    names = []
    for i, parts in enumerate((first, second, bad)):
        (tmp_path / f"a{i}").write_bytes(b"".join(parts))
        names.append(str(tmp_path / f"a{i}"))
    src, exe = tmp_path / "unpack.c", tmp_path / "unpack"
    src.write_text(_UNPACK)
    cc = ["gcc", "-O1", "-pthread", f"-I{HOSTLIB}", "-o", str(exe), str(src)]
    subprocess.run([*cc, str(HOSTLIB / "unpack.c"), str(HOSTLIB / "libc.c"), "-ldl"], check=True)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    r = run([str(exe), *names], {**os.environ, "TMPDIR": str(tmp)}, tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout.splitlines()
    private = out[0].split(" ", 1)[1]
    assert out == [
        f"0 {private}",
        "now 11 28.39.1002",
        f"0 {private}",  # the same directory, rewritten
        "now 11 28.40.1000",
        "-1 the fabric server 'probe' sent a tree that is not one: entry 1 has a path that "
        "is not relative and plain (no '.', '..' or '/' first)",
        "now 11 28.40.1000",  # checked whole before anything is written
        "held 11 28.39.1002",  # the first file, open before the refresh, kept whole
    ]
    assert private.startswith(f"{tmp}/fabriclab-tree-")
    assert os.listdir(tmp) == []  # removed when the process that made it exits
