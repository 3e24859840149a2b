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
