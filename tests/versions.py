"""The versions of the real components the tests run, detected once per session.

Debian 12 ships rdma-core 44, ibsim 0.10 and Slurm 22.05; Debian 13 ships rdma-core 56,
ibsim 0.12 and Slurm 24.11 (tests/debian13.py makes a Debian 13 root for a Debian 12
machine).  A test whose expectation depends on one of them asks here, for the system's
own tools (``root=None``) or for a root's (its path, run through ``chroot``), and says
in its assertion which version it compares with.
"""

from __future__ import annotations

import functools
import re
import subprocess
from pathlib import Path


def _run(root: Path | None, *argv: str) -> str:
    prefix = ["chroot", str(root)] if root is not None else []
    r = subprocess.run([*prefix, *argv], capture_output=True, text=True, timeout=60)
    return r.stdout + r.stderr


@functools.cache
def package(name: str, root: Path | None = None) -> str | None:
    """The installed version of Debian package ``name`` (in ``root``'s dpkg database when
    given), or None when it is not installed."""
    argv = ["dpkg-query", "-W", "-f", "${Status} ${Version}", name]
    if root is not None:
        argv.insert(1, f"--admindir={root}/var/lib/dpkg")
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if r.returncode != 0 or "install ok installed" not in r.stdout:
        return None
    return r.stdout.rsplit(" ", 1)[1]


@functools.cache
def rdma_core(root: Path | None = None) -> int:
    """rdma-core's major version (44, 56, ...), read from infiniband-diags' package (its
    version is rdma-core's: Debian builds both from the rdma-core source)."""
    v = package("infiniband-diags", root)
    if v is None:
        raise RuntimeError(f"infiniband-diags is not installed{f' in {root}' if root else ''}")
    return int(re.match(r"(?:\d+:)?(\d+)", v).group(1))


@functools.cache
def ibsim(root: Path | None = None) -> tuple[int, int]:
    """ibsim's version, from the last line of ``ibsim -h`` ("ibsim 0.10")."""
    out = _run(root, "ibsim", "-h")
    m = re.search(r"^ibsim (\d+)\.(\d+)", out, re.M)
    if m is None:
        raise RuntimeError(f"cannot read ibsim's version from 'ibsim -h': {out[-300:]!r}")
    return int(m.group(1)), int(m.group(2))


@functools.cache
def slurm(root: Path | None = None) -> tuple[int, int]:
    """Slurm's version, from ``slurmd -V`` ("slurm-wlm 22.05.8" -> (22, 5))."""
    out = _run(root, "slurmd", "-V")
    m = re.search(r"(\d+)\.(\d+)\.\d+", out)
    if m is None:
        raise RuntimeError(f"cannot read Slurm's version from 'slurmd -V': {out[-300:]!r}")
    return int(m.group(1)), int(m.group(2))
