"""A Debian 13 (trixie) root for the tests: its path, and commands run inside it.

Debian 13 ships rdma-core 56, ibsim 0.12, opensm 3.3.23 and Slurm 24.11 (with munge).
On a Debian 12 machine the tests run them from a minimal trixie tree that
``scripts/debian13-root.sh`` makes and caches (outside the repository; see the script
for where and how to override it); on a Debian 13 machine the system has them, and
``needed()`` is False: use the system's own tools there, no chroot.

The API (root, uid 0, is needed to build the tree and to chroot into it)::

    needed() -> bool
        True when the system's components are older than Debian 13's (rdma-core < 56,
        ibsim < 0.12 or Slurm < 24.11), i.e. the tests must use the root for them.
    root() -> Path
        The tree, built on first use by the script (once per session; seconds when
        cached, about 45 s when not).  Read versions in it with tests/versions.py:
        ``versions.slurm(root())``.
    scratch(tag="w") -> tuple[Path, str]
        A fresh directory inside the tree, writable, removed when the session ends:
        (its path on the host, its path inside the tree).  Use it as a tool's working
        directory (libumad2sim writes ./sys-<pid> there) and for logs, configs and
        state a daemon in the tree reads or writes.
    inside(host_path) -> str
        The path inside the tree of a host path under root().
    run(argv, *, env=None, cwd="/", proc=False, timeout=120, check=False, input=None)
        -> subprocess.CompletedProcess (text, output captured)
    popen(argv, *, env=None, cwd="/", proc=False, **popen_kwargs) -> subprocess.Popen
        Run ``argv`` inside the tree (``chroot``) with exactly ``env`` (plus PATH and
        HOME when absent) in ``cwd`` (a path inside the tree).  ``proc=True`` mounts
        /proc in the tree for this command only, in a mount namespace of its own
        (``unshare --mount-proc``), so nothing stays mounted and concurrent sessions do
        not meet: slurmctld and slurmd 24.11 need it (they readlink /proc/self/exe);
        infiniband-diags, opensm, ibsim and munged do not.  The process started is the
        command itself (every wrapper execs), so its pid, signals and exit status are
        the command's.

What crosses between the host and the tree: the network namespace is shared, so the
abstract unix sockets of fabriclab's server (the ibsim wire protocol) and loopback TCP
(Slurm) reach the tree; file paths do not (the tree has its own /tmp), so a path a tool
in the tree opens must be one inside the tree (``scratch``).  Slurm also needs the short
host name to resolve: the script copies the machine's /etc/hosts into the tree.
"""

from __future__ import annotations

import atexit
import functools
import itertools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import versions
from helpers import in_tree

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "debian13-root.sh"
# What Debian 13 ships (its packages' versions): a system older than this needs the root.
RDMA_CORE = 56
IBSIM = (0, 12)
SLURM = (24, 11)
_scratch = itertools.count()
_made: list[Path] = []


@functools.cache
def needed() -> bool:
    """Whether the system's components are older than Debian 13's."""
    return versions.rdma_core() < RDMA_CORE or versions.ibsim() < IBSIM or versions.slurm() < SLURM


@functools.cache
def root() -> Path:
    """The Debian 13 tree, built (or found in the cache) by scripts/debian13-root.sh."""
    if os.geteuid() != 0:
        raise RuntimeError("the Debian 13 root needs root (uid 0): debootstrap and chroot")
    r = subprocess.run([str(SCRIPT)], capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise RuntimeError(f"scripts/debian13-root.sh failed ({r.returncode}):\n{r.stderr}")
    path = Path(r.stdout.strip().splitlines()[-1])
    if not (path / "etc" / "debian_version").is_file():
        raise RuntimeError(f"scripts/debian13-root.sh printed {path}, which is no Debian tree")
    return path


def inside(host_path: Path | str) -> str:
    """The path inside the tree of ``host_path`` (which must lie under root())."""
    return "/" + str(Path(host_path).resolve().relative_to(root().resolve()))


def scratch(tag: str = "w") -> tuple[Path, str]:
    """A fresh writable directory in the tree: (host path, path inside the tree)."""
    base = root() / "tmp"
    host = Path(tempfile.mkdtemp(prefix=f"fl{os.getpid()}x{next(_scratch)}{tag}-", dir=base))
    host.chmod(0o755)  # munged wants every parent of its socket searchable by all
    _made.append(host)
    return host, inside(host)


@atexit.register
def _remove_scratch() -> None:
    for d in _made:
        shutil.rmtree(d, ignore_errors=True)


def _argv(argv: Sequence[str], env: Mapping[str, str] | None, cwd: str, proc: bool) -> list[str]:
    return in_tree(root(), argv, env or {}, cwd, mount_proc=proc)


def run(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str = "/",
    proc: bool = False,
    timeout: float = 120,
    check: bool = False,
    input: str | None = None,
) -> subprocess.CompletedProcess:
    """Run ``argv`` in the tree; output captured as text."""
    r = subprocess.run(
        _argv(argv, env, cwd, proc),
        capture_output=True,
        text=True,
        timeout=timeout,
        input=input,
        stdin=None if input is not None else subprocess.DEVNULL,
    )
    if check and r.returncode != 0:
        raise AssertionError(
            f"{' '.join(map(str, argv))} in the Debian 13 root exited {r.returncode}:\n"
            f"{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
        )
    return r


def popen(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str = "/",
    proc: bool = False,
    **kw,
) -> subprocess.Popen:
    """Start ``argv`` in the tree (a daemon, say); ``kw`` goes to subprocess.Popen."""
    return subprocess.Popen(_argv(argv, env, cwd, proc), **kw)
