"""fabriclab's host library over TCP, seen from inside a process by small C programs the
tests compile: the relay thread of a umad or issm device (sim/host/hostlib/relay.c)
ends when the device is closed, a forked child shares the device but none of the
relay's own descriptors, and the private tree directory (unpack.c, privdir.c) is
rewritten in place when asked again."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tcpstub import TcpStub, entry
from test_hostlib import answer_smp, run

from fabriclab.ib import hostwire
from fabriclab.sim.host.hostlib import library_path

HOSTLIB = Path(library_path()).parent
D, F, L = hostwire.ENTRY_DIR, hostwire.ENTRY_FILE, hostwire.ENTRY_SYMLINK


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
