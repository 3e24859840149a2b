"""What the host library covers beyond libibumad's own calls (sim/host/hostlib): a tree
kept fresh for a process that reads it now and then, paths written another way
(relative, "//", "..", a directory fd), realpath and canonicalize_file_name,
fdopendir and rewinddir, stat and access of /dev/infiniband/umadN, select and epoll on a
umad file with a message pending in the library, and uname's node name.  Small programs
(Python under the preload, or C compiled here against nothing but libc) ask; the stub
server of test_hostlib.py, or a real fabric, answers."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from fabric_server import fabric_up
from helpers import wait_for
from test_hostlib import TRAY, Stub, answer_smp, answer_table, run, tree  # noqa: F401

from fabriclab.sim.run import tools

KERNFS = ["mlx5_0", "mlx5_3", "mlx5_1", "mlx5_2"]  # sysfs's order of the tray's CAs


@pytest.fixture
def stub(tree):  # noqa: F811
    s = Stub(tree, answer_smp)
    yield s
    s.close()


def _py(stub: Stub, prog: str, tmp_path: Path) -> list[str]:
    r = run([sys.executable, "-c", prog], stub.env(), tmp_path)
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def _c(source: str, tmp_path: Path) -> Path:
    """A C program compiled here (libc only: the library comes by LD_PRELOAD)."""
    src, exe = tmp_path / "probe.c", tmp_path / "probe"
    src.write_text(source)
    r = subprocess.run(["gcc", "-O1", "-Wall", "-o", str(exe), str(src)], capture_output=True,
                       text=True)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return exe


def test_paths_written_another_way_reach_the_tree(stub, tmp_path):
    prog = (
        "import os\n"
        "for p in ('//sys/class/infiniband', '/sys/class/../class/infiniband',\n"
        "          '/sys/./class//infiniband/', '/sys/class/infiniband_mad/../infiniband'):\n"
        "    print(p, *os.listdir(p))\n"
        "os.chdir('/sys')\n"
        "print('rel', *os.listdir('class/infiniband'))\n"
        "print('up', os.path.samefile('/sys/class/infiniband/../../block', '/sys/block'))\n"
        "print('relread', open('class/infiniband/mlx5_2/ports/1/rate').read().strip())\n"
        "print('relstat', os.path.isdir('./class/infiniband_mad/umad3'))\n"
        "d = os.open('/sys', os.O_RDONLY | os.O_DIRECTORY)\n"
        "fd = os.open('class/infiniband/mlx5_1/node_type', os.O_RDONLY, dir_fd=d)\n"
        "print('dirfd', os.read(fd, 100).decode().strip())\n"
        "print('dirfdstat', os.stat('class/infiniband/mlx5_3', dir_fd=d).st_nlink > 1)\n"
        "os.chdir('/')\n"
        "print('dev', os.path.exists('dev/infiniband/umad0'), os.path.exists('dev//infiniband/umad9'))\n"
    )
    got = _py(stub, prog, tmp_path)
    for line in got[:4]:
        assert line.split(" ", 1)[1] == " ".join(KERNFS), got
    assert got[4:] == [
        "rel " + " ".join(KERNFS),
        "up True",
        "relread 400 Gb/sec (4X NDR)",
        "relstat True",
        "dirfd 1: CA",
        "dirfdstat True",
        "dev True False",
    ]


_REALPATH = r"""
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
static void show(const char *p, char *got) { printf("%s -> %s %d\n", p, got ? got : "NULL", got ? 0 : errno); }
int main(void)
{
    char buf[PATH_MAX];
    show("a", realpath("/sys/class/infiniband/mlx5_0/ports/1/../1", buf));
    show("b", canonicalize_file_name("/sys/class/infiniband_mad/umad2/"));
    show("c", realpath("/dev/infiniband/umad1", NULL));
    show("d", realpath("/dev/./infiniband/issm3", buf));
    errno = 0;
    show("e", realpath("/dev/infiniband/umad9", buf));
    if (chdir("/sys/class/infiniband/mlx5_1") != 0)
        return 1;
    show("f", realpath("ports/1", buf));
    show("g", getcwd(buf, sizeof buf));
    char *cwd = get_current_dir_name();
    show("h", cwd);
    free(cwd);
    return 0;
}
"""


def test_realpath_and_canonicalize_file_name_resolve_as_on_a_host(stub, tmp_path):
    exe = _c(_REALPATH, tmp_path)
    r = run([str(exe)], stub.env(), tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "a -> /sys/class/infiniband/mlx5_0/ports/1 0",
        "b -> /sys/class/infiniband_mad/umad2 0",
        "c -> /dev/infiniband/umad1 0",
        "d -> /dev/infiniband/issm3 0",
        "e -> NULL 2",  # the tray has umad0..3 only: ENOENT
        "f -> /sys/class/infiniband/mlx5_1/ports/1 0",
        "g -> /sys/class/infiniband/mlx5_1 0",
        "h -> /sys/class/infiniband/mlx5_1 0",
    ]


_DIRS = r"""
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
static void list(const char *what, DIR *d)
{
    printf("%s", what);
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.')
            printf(" %s", e->d_name);
    printf("\n");
}
int main(void)
{
    DIR *d = opendir("/sys/class/infiniband");
    list("open", d);
    rewinddir(d);
    list("rewound", d);
    closedir(d);
    int fd = open("/sys/class/infiniband", O_RDONLY | O_DIRECTORY);
    d = fdopendir(fd);
    if (!d)
        return 1;
    list("fd", d);
    rewinddir(d);
    list("fdrewound", d);
    closedir(d);
    return 0;
}
"""


def test_fdopendir_and_rewinddir_list_the_tree_in_sysfs_order(stub, tmp_path):
    r = run([str(_c(_DIRS, tmp_path))], stub.env(), tmp_path)
    assert r.returncode == 0, r.stderr
    names = " ".join(KERNFS)
    assert r.stdout.splitlines() == [f"{w} {names}" for w in ("open", "rewound", "fd", "fdrewound")]
    prog = (
        "import os\n"
        "fd = os.open('/sys/class/infiniband', os.O_RDONLY | os.O_DIRECTORY)\n"
        "print(*[e.name for e in os.scandir(fd)])\n"
        "print(*os.listdir(fd))\n"
    )
    assert _py(stub, prog, tmp_path) == [names, names]


_STAT = r"""
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>
static void show(const char *p)
{
    struct stat st;
    struct statx sx;
    if (stat(p, &st) != 0) {
        printf("%s ENOENT=%d\n", p, errno == ENOENT);
        return;
    }
    int x = statx(AT_FDCWD, p, 0, STATX_BASIC_STATS, &sx);
    printf("%s chr=%d mode=%o rdev=%u:%u statx=%d:%u:%u access=%d\n", p, S_ISCHR(st.st_mode),
           st.st_mode & 07777, major(st.st_rdev), minor(st.st_rdev), x, sx.stx_rdev_major,
           sx.stx_rdev_minor, access(p, R_OK | W_OK));
}
int main(void)
{
    show("/dev/infiniband/umad0");
    show("/dev/infiniband/umad3");
    show("/dev/infiniband/issm2");
    show("/dev/infiniband/umad4");
    struct stat st;
    printf("lstat=%d\n", lstat("/dev/infiniband/umad1", &st) == 0 && S_ISCHR(st.st_mode));
    return 0;
}
"""


def test_stat_of_a_umad_device_is_the_kernels_character_device(stub, tmp_path):
    r = run([str(_c(_STAT, tmp_path))], stub.env(), tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        # major 231: umad<N> minor N, issm<N> minor 64 + N (devices.txt, user_mad.c)
        "/dev/infiniband/umad0 chr=1 mode=600 rdev=231:0 statx=0:231:0 access=0",
        "/dev/infiniband/umad3 chr=1 mode=600 rdev=231:3 statx=0:231:3 access=0",
        "/dev/infiniband/issm2 chr=1 mode=600 rdev=231:66 statx=0:231:66 access=0",
        "/dev/infiniband/umad4 ENOENT=1",
        "lstat=1",
    ]


def test_uname_names_the_tray_as_gethostname_does(stub, tmp_path):
    prog = "import os, socket\nprint(os.uname().nodename, socket.gethostname())\n"
    assert _py(stub, prog, tmp_path) == [f"{TRAY} {TRAY}"]


_PENDING = r"""
import ctypes, errno, select, struct
um = ctypes.CDLL("libibumad.so.3", use_errno=True)
libc = ctypes.CDLL(None, use_errno=True)
libc.read.restype = ctypes.c_ssize_t
assert um.umad_init() == 0
fd = um.umad_open_port(b"mlx5_1", 1)
sa = um.umad_register(fd, 0x03, 2, 1, None)
buf = ctypes.create_string_buffer(64 + 256)
mad = bytearray(256)
mad[0:4] = bytes([1, 0x03, 2, 0x12])
mad[8:16] = (0x42).to_bytes(8, "big")
buf[64:320] = bytes(mad)
um.umad_set_addr(buf, 1, 1, 0, 0x80010000)
assert um.umad_send(fd, sa, buf, 256, 1000, 0) == 0
assert select.select([fd], [], [], 10)[0] == [fd]
# the first read takes the whole long message into the library: ENOSPC, then pending
print("read", libc.read(fd, buf, 64 + 256), ctypes.get_errno() == errno.ENOSPC)
print("select", select.select([fd], [], [], 2)[0] == [fd])
ep = select.epoll()
ep.register(fd, select.EPOLLIN)
print("epoll", ep.poll(2) == [(fd, select.EPOLLIN)])
p = select.poll()
p.register(fd, select.POLLIN)
print("poll", p.poll(2000) == [(fd, select.POLLIN)])
"""


def test_select_and_epoll_see_a_message_pending_in_the_library(tree, tmp_path):  # noqa: F811
    stub = Stub(tree, answer_table)
    try:
        t0 = time.monotonic()
        r = run([sys.executable, "-c", _PENDING], stub.env(), tmp_path)
    finally:
        stub.close()
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["read -1 True", "select True", "epoll True", "poll True"]
    assert time.monotonic() - t0 < 5  # each at once, not after its 2 s timeout


_READER = (
    "import sys\n"
    "base = '/sys/class/infiniband/mlx5_0/ports/1/'\n"
    "for _ in sys.stdin:\n"
    "    print(open(base + 'state').read().strip(), '|',\n"
    "          open(base + 'counters/link_downed').read().strip(), flush=True)\n"
)
LIVE = 2.0  # seconds the server keeps a tree fresh after an ask, in this test


@pytest.mark.realtools
def test_a_long_lived_process_reads_a_fresh_tree(real_tools, tmp_path, monkeypatch):
    """The server keeps a tray's tree fresh for a while after each ask (30 s; LIVE
    here); a process that reads it again later still reads the fabric as it is now."""
    monkeypatch.setenv("FABRICLAB_TREE_LIVE", str(LIVE))
    with fabric_up("gb200-su", tmp_path / "fab") as f:
        env = tools.host_env(f.instance(), TRAY, base=f.env)
        proc = subprocess.Popen([sys.executable, "-c", _READER], env=env, text=True,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip
        assert proc.stdin and proc.stdout
        try:
            proc.stdin.write("\n")
            proc.stdin.flush()
            first = proc.stdout.readline().strip()
            asked = time.monotonic()  # the process's last ask was before this
            assert first.startswith(("2: INIT", "4: ACTIVE")), first
            # the server's stated window (and a sweep to finish) passes: no more writes
            wait_for(lambda: time.monotonic() > asked + LIVE + 2.5, LIVE + 5, "the window")
            f.ok("fault", "down", TRAY, "--name", f.name)
            state = next((Path(f.env["FABRICLAB_STATE_DIR"]) / f"{f.name}.trees").glob(
                f"{TRAY}/class/infiniband/mlx5_0/ports/1/state"))  # fmt: skip
            assert state.read_text().strip() == first.split(" | ")[0]  # frozen on disk
            proc.stdin.write("\n")
            proc.stdin.flush()
            second = proc.stdout.readline().strip()
            assert second.startswith("1: DOWN | "), (first, second)
            assert int(second.split(" | ")[1]) > int(first.split(" | ")[1])
        finally:
            proc.stdin.close()
            proc.wait(10)
