"""fabriclab's host library over TCP, seen from inside a process by small C programs the
tests compile: a umad or issm device is the TCP stream itself (sim/host/hostlib/
stream.c), with no thread of the library's and no descriptor beside it, closed with
the device; a forked child shares the device as it is; packets read off the stream
whole however they come (cut by stalls, a long message's pieces), a lying length failing
the device, under AddressSanitizer too; and the private tree directory (unpack.c,
privdir.c) is rewritten in place when asked again."""

from __future__ import annotations

import errno
import os
import re
import select
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hostlib_build import asan_build
from tcpstub import LENGTH, TcpStub, entry
from test_hostlib import Conn, answer_smp, run
from test_hostlib_frames import FRAME, LONG, _lines, _message, _more, probe

from fabriclab.ib import hostwire
from fabriclab.sim.host.hostlib import library_path

HOSTLIB = Path(library_path()).parent
D, F, L = hostwire.ENTRY_DIR, hostwire.ENTRY_FILE, hostwire.ENTRY_SYMLINK


__all__ = ["probe"]  # the frames probe, a fixture of test_hostlib_frames.py


@pytest.fixture
def stub():
    """A server end over TCP for the devices alone (no tree is asked for)."""
    s = TcpStub(None, answer_smp)
    yield s
    s.close()


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


def test_a_device_over_tcp_starts_no_thread_and_its_close_ends_the_stream(stub, tmp_path):
    src, exe = tmp_path / "probe.c", tmp_path / "probe"
    src.write_text(_PROBE)
    subprocess.run(["gcc", "-O1", "-o", str(exe), str(src)], check=True, timeout=60)
    p = subprocess.Popen(
        [str(exe)], env=stub.env(), cwd=tmp_path, text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert p.stdout is not None and p.stdin is not None
        assert p.stdout.readline() == "issm 1\n"  # the probe alone: no thread of the library
        assert stub.issm_open.wait(10) and not stub.issm_closed.is_set()
        p.stdin.write("\n")
        p.stdin.flush()
        out, err = p.communicate(timeout=30)
    finally:
        p.kill()
    assert p.returncode == 0, err
    assert out == "before 1 most 1 after 1\n"  # no thread for any open device
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
    if (pid == 0) { /* the device's fd and the pipe: nothing of the library's beside */
        printf("child fds %d\n", count("/proc/self/fd") - fds);
        fflush(stdout);
        char c;
        close(pipefd[1]);
        return read(pipefd[0], &c, 1) < 0; /* until the parent says go */
    }
    close(pipefd[0]);
    close(fd); /* the child still holds the device */
    struct timespec pause = {0, 200000000};
    nanosleep(&pause, NULL); /* a wait that must see nothing happen */
    printf("parent closed %d\n", count("/proc/self/task"));
    close(pipefd[1]);
    waitpid(pid, NULL, 0);
    printf("child gone %d\n", settle(1));
    return 0;
}
"""


def test_a_forked_child_shares_the_device_and_nothing_else_of_the_librarys(stub, tmp_path):
    src, exe = tmp_path / "fork.c", tmp_path / "fork"
    src.write_text(_FORK)
    subprocess.run(["gcc", "-O1", "-o", str(exe), str(src)], check=True, timeout=60)
    r = run([str(exe)], stub.env(), tmp_path)
    assert r.returncode == 0, r.stderr
    # the child: the device and the pipe's two ends; no thread in either process
    assert r.stdout == "child fds 3\nparent closed 1\nchild gone 1\n", r.stdout + r.stderr


# --- packets read off the stream -------------------------------------------------------


def _cut(data: bytes, at: list[int], stall: float):
    """An answer that writes ``data`` on the stream in pieces cut at the offsets ``at``,
    with a pause of ``stall`` seconds before each piece after the first."""

    def answer(conn: Conn, msg: bytes) -> list[bytes]:
        def go() -> None:
            bounds = [0, *at, len(data)]
            for i in range(len(bounds) - 1):
                if i:
                    time.sleep(stall)  # the stall is what is tested
                conn.sock.sendall(data[bounds[i] : bounds[i + 1]])

        threading.Thread(target=go, daemon=True).start()
        return []

    return answer


def _packet(data: bytes) -> bytes:
    return LENGTH.pack(len(data)) + data


def _recv(stub: TcpStub, probe: str, size: int, tmp_path) -> tuple[dict, str]:
    try:
        r = run([probe, "recv", str(size)], stub.env(), tmp_path, timeout=40)
    finally:
        stub.close()
    assert r.returncode == 0, r.stdout + r.stderr
    return _lines(r.stdout), r.stderr


@pytest.mark.parametrize("stall", [0.3, 6.5])
def test_a_packet_cut_by_a_stall_reads_whole(probe, tmp_path, stall):
    """A packet whose length and body come in pieces, with pauses shorter and longer
    than the library waits inside one read (WAIT_MS): the non-blocking reader gets EAGAIN
    meanwhile and then the whole message, never a piece taken for a length."""
    msg = _packet(_message(256 + 64))
    stub = TcpStub(None, _cut(msg, [2, 40], stall))
    got, err = _recv(stub, probe, 4096, tmp_path)
    assert got["got"][:2] == [str(256 + 64), "1"], got
    assert int(got["got"][2]) >= 2000 * stall
    assert "fabriclab:" not in err


def test_a_long_message_in_packets_reads_whole(probe, tmp_path):
    """A message of two frames, each its own packet, the second cut mid-way."""
    msg = _message(LONG)
    data = _packet(_more(msg[:FRAME], LONG)) + _packet(msg[FRAME:])
    stub = TcpStub(None, _cut(data, [FRAME + 4 + 100], 0.3))
    got, err = _recv(stub, probe, LONG, tmp_path)
    assert got["got"][:2] == [str(LONG), "1"], got
    assert "fabriclab:" not in err


def test_a_lying_length_fails_the_device_as_the_kernels(probe, tmp_path):
    """A length past a frame: one line, then POLLERR, and read and write EIO."""
    stub = TcpStub(None, _cut(LENGTH.pack(FRAME + 1) + b"\0" * 64, [], 0))
    got, err = _recv(stub, probe, 4096, tmp_path)
    assert got["err"][0] == str(errno.EIO) and int(got["err"][1]) < 3000, got
    assert err == (
        f"fabriclab: the fabric server '{stub.name}' sent a packet of {FRAME + 1} bytes "
        f"(the protocol allows 1 to {FRAME}): its device is closed\n"
    )
    assert got["poll"][:2] == ["1", hex(select.POLLERR)], got
    assert got["read"] == ["-1", str(errno.EIO)]
    assert got["write"] == ["-1", str(errno.EIO)]


def test_the_stream_reads_clean_under_asan(probe, tmp_path, tmp_path_factory):
    """The packets above (cut by stalls, a long message in two, a lying length) through
    the library built with AddressSanitizer and UBSan: the same answers, no report."""
    lib = asan_build(tmp_path_factory)
    msg = _message(LONG)
    cases = [
        (_cut(_packet(_message(256 + 64)), [2, 40], 0.3), 4096, "got"),
        (_cut(_packet(_more(msg[:FRAME], LONG)) + _packet(msg[FRAME:]), [FRAME + 104], 0.3),
         LONG, "got"),
        (_cut(LENGTH.pack(FRAME + 1) + b"\0" * 64, [], 0), 4096, "err"),
    ]  # fmt: skip
    for answer, size, want in cases:
        stub = TcpStub(None, answer)
        try:
            r = run([probe, "recv", str(size)], lib.env(stub.env()), tmp_path, timeout=40)
        finally:
            stub.close()
        assert r.returncode == 0, r.stdout + r.stderr
        assert want in _lines(r.stdout), r.stdout
        assert lib.found() == "" and "runtime error:" not in r.stderr, r.stderr + lib.found()


_UNPACK = r"""
#include "hostlib.h"

const char *server_name = "probe", *tray_name = "t";
char remote_host[256] = "h", remote_port[8] = "1";

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
    cc = ["gcc", "-O1", "-pthread", "-fexceptions", f"-I{HOSTLIB}", "-o", str(exe), str(src)]
    c_files = [str(HOSTLIB / f) for f in ("unpack.c", "privdir.c", "libc.c")]
    subprocess.run([*cc, *c_files, "-ldl"], check=True)
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


_CUT = """
import os, subprocess, sys, time
sys.path[:0] = [sys.argv[1]]
from tcpstub import TcpStub
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
stub = TcpStub(None)
prog = '''
import os, select, time
fd = os.open("/dev/infiniband/umad0", os.O_RDWR)
print("open", flush=True)
t0 = time.monotonic()
select.select([fd], [], [], 90)
try:
    os.read(fd, 320)
except OSError as e:
    print(e.strerror, time.monotonic() - t0 < 45)
'''
p = subprocess.Popen([sys.executable, "-c", prog], env=stub.env(), text=True,
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
assert p.stdout.readline() == "open\\n"
subprocess.run(["ip", "link", "set", "lo", "down"], check=True)  # the network is cut
out, err = p.communicate(timeout=120)
print(out + err, end="")
"""


def test_a_server_cut_off_without_a_reset_goes_away_within_the_keepalive(tmp_path):
    """In a network namespace of its own, the tool's loopback goes down under an open
    device: no reset ever comes, and TCP keepalive (10 s idle, 3 probes 5 s apart)
    ends the device as a server that exits does."""
    r = subprocess.run(
        ["unshare", "-n", sys.executable, "-c", _CUT, str(Path(__file__).parent)],
        capture_output=True, text=True, timeout=150, cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "Input/output error True", r.stdout
    assert re.fullmatch(r"fabriclab: the fabric server '\S+' went away", lines[1]), r.stdout
