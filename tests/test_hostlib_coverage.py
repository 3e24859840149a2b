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
from test_hostlib import TRAY, Stub, answer_smp, answer_table, run, tree  # noqa: F401

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
