"""Run the real OFA tools (Debian ibsim, opensm, infiniband-diags) against a net file,
from the system or from another tool set (tests/toolsets.py: the Debian 13 root's).

Each session gets its own IBSIM_SOCKNAME, so tests can run side by side; every process
started here is stopped when the session ends.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path

from helpers import UMAD2SIM, stop_process, wait_for
from toolsets import SYSTEM, ToolSet

from fabriclab.ib import simwire
from fabriclab.sim.wire import procfs

TOOLS = ("ibsim", "opensm", "ibnetdiscover")
_counter = itertools.count()


def missing_tools() -> list[str]:
    out = [t for t in TOOLS if shutil.which(t) is None]
    if not Path(UMAD2SIM).exists():
        out.append(UMAD2SIM)
    return out


class IbsimSession:
    def __init__(self, workdir: Path, sockname: str, tools: ToolSet = SYSTEM):
        self.workdir = workdir
        self.sockname = sockname
        self.tools = tools

    def env(self, host: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            IBSIM_SOCKNAME=self.sockname,
            LD_PRELOAD=UMAD2SIM,
            SIM_HOST=host,
            OSM_TMP_DIR=str(self.workdir),
            OSM_CACHE_DIR=str(self.workdir),
        )
        return env

    def run(self, host: str, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
        """Run a real tool as if on ``host`` (a node id or description in the net file)."""
        return self.tools.run(argv, self.env(host), self.workdir, timeout=timeout)

    def opensm_once(self, host: str, timeout: float = 300) -> str:
        """One opensm sweep from ``host`` (``-o``: exit after the sweep); its log."""
        there, inside = self.tools.workdir(self.workdir)
        name = f"opensm-{self.sockname}.log"
        r = self.run(
            host, "opensm", "-o", "-e", "-f", f"{inside}/{name}", "-d", "0", timeout=timeout
        )
        log = there / name
        text = log.read_text() if log.exists() else ""
        if "SUBNET UP" not in text:
            raise AssertionError(
                f"opensm did not reach SUBNET UP (rc {r.returncode}):\n"
                f"{r.stdout[-2000:]}\n{text[-4000:]}"
            )
        return text


@contextmanager
def ibsim(
    netfile: Path, workdir: Path, extra_args: list[str] | None = None, tools: ToolSet = SYSTEM
):
    """Start ``tools``' ibsim (the system's: Debian's) on ``netfile``; yield a session
    for running that set's tools."""
    sockname = f"fltest{os.getpid()}x{next(_counter)}"
    there, inside = tools.workdir(workdir)
    if there != workdir:  # the net file where that set's ibsim can read it
        shutil.copy(netfile, there / f"{sockname}.net")
        netfile = Path(inside) / f"{sockname}.net"
    log = open(workdir / "ibsim.log", "w")
    proc = tools.popen(
        ["ibsim", "-s", "-n", *(extra_args or []), str(netfile)],
        {**os.environ, "IBSIM_SOCKNAME": sockname},
        workdir,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:

        def bound() -> bool:
            assert proc.poll() is None, f"ibsim exited: {(workdir / 'ibsim.log').read_text()}"
            return procfs.abstract_bound(simwire.sockname(sockname, "ctl"))

        wait_for(bound, 30, "ibsim's control socket", interval=0.02)
        yield IbsimSession(workdir, sockname, tools)
    finally:
        stop_process(proc, 5)
        log.close()
