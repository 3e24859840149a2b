"""The sets of real OFA tools the tests run: the system's, and on a machine older than
Debian 13 also the Debian 13 root's (tests/debian13.py).

On Debian 12 that is rdma-core 44 / ibsim 0.10 (system) and rdma-core 56 / ibsim 0.12
(root); on Debian 13 the system's set is the 56 / 0.12 one and there is no 44 set.  A
test parametrized by ``toolset`` (conftest.py) runs once per set and reads the set's
versions (``rdma_core``, ``ibsim``) to say which behaviour it expects.
"""

from __future__ import annotations

import functools
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import debian13
import versions

# What a tool attached through libumad2sim reads from its environment: the server's
# socket name (or UDP address), the port it runs at, the preload, OpenSM's directories.
_TOOL_ENV = ("IBSIM_", "SIM_HOST", "LD_PRELOAD", "OSM_", "UMAD2SIM")


@dataclass(frozen=True)
class ToolSet:
    """Where the real tools come from: ``root`` None is the system's."""

    name: str
    root: Path | None

    @property
    def rdma_core(self) -> int:
        return versions.rdma_core(self.root)

    @property
    def ibsim(self) -> tuple[int, int]:
        return versions.ibsim(self.root)

    def __str__(self) -> str:
        return f"{self.name} (rdma-core {self.rdma_core}, ibsim {'.'.join(map(str, self.ibsim))})"

    def workdir(self, default: Path) -> tuple[Path, str]:
        """The directory these tools use for ``default`` (a test's own directory): (host
        path, path the tools see).  The system's set uses ``default`` itself; the root's a
        scratch directory of the root, one per ``default``, so that what a tool leaves
        there (OpenSM's LID cache, say) stays with the test that made it."""
        if self.root is None:
            return default, str(default)
        key = (self.name, Path(default))
        if key not in _workdirs:
            _workdirs[key] = debian13.scratch("tools")
        return _workdirs[key]

    def env(self, env: Mapping[str, str], cwd: Path) -> dict[str, str]:
        """``env`` as the tools get it: all of it on the system; in the root only what
        attaches a tool (the host's PATH and the like mean nothing there), with OpenSM's
        directories moved to the root's side of ``cwd``."""
        if self.root is None:
            return dict(env)
        out = {k: v for k, v in env.items() if k.startswith(_TOOL_ENV)}
        for k in ("OSM_TMP_DIR", "OSM_CACHE_DIR"):
            if k in out:
                out[k] = self.workdir(cwd)[1]
        return out

    def run(
        self, argv: Sequence[str], env: Mapping[str, str], cwd: Path, timeout: float = 120
    ) -> subprocess.CompletedProcess:
        """Run a tool with ``env`` in ``cwd`` (the root's set: in its side of ``cwd``)."""
        if self.root is None:
            return subprocess.run(
                list(argv),
                env=self.env(env, cwd),
                cwd=cwd,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        inner = self.workdir(cwd)[1]
        return debian13.run(argv, env=self.env(env, cwd), cwd=inner, timeout=timeout)

    def popen(self, argv: Sequence[str], env: Mapping[str, str], cwd: Path, **kw):
        """Start a tool (a server such as ibsim) with ``env``; ``kw`` to Popen."""
        if self.root is None:
            return subprocess.Popen(list(argv), env=self.env(env, cwd), cwd=cwd, **kw)
        inner = self.workdir(cwd)[1]
        return debian13.popen(argv, env=self.env(env, cwd), cwd=inner, **kw)


_workdirs: dict[tuple[str, Path], tuple[Path, str]] = {}
SYSTEM = ToolSet("system", None)


def names() -> list[str]:
    """The sets this machine has: the system's, plus the Debian 13 root's where the
    system is older than Debian 13."""
    return ["system", "debian13"] if debian13.needed() else ["system"]


@functools.cache
def get(name: str) -> ToolSet:
    if name == "system":
        return SYSTEM
    if name == "debian13":
        return ToolSet("debian13", debian13.root())
    raise KeyError(name)
