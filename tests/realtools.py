"""Run the real OFA tools (Debian ibsim, opensm, infiniband-diags) against a net file.

Each session gets its own IBSIM_SOCKNAME, so tests can run side by side; every process
started here is stopped when the session ends.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

from fabriclab.ib import simwire
from fabriclab.sim import procfs

UMAD2SIM = "/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so"
TOOLS = ("ibsim", "opensm", "ibnetdiscover")
_counter = itertools.count()


def missing_tools() -> list[str]:
    out = [t for t in TOOLS if shutil.which(t) is None]
    if not Path(UMAD2SIM).exists():
        out.append(UMAD2SIM)
    return out


class IbsimSession:
    def __init__(self, workdir: Path, sockname: str):
        self.workdir = workdir
        self.sockname = sockname

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
        return subprocess.run(
            list(argv),
            env=self.env(host),
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.workdir,
        )

    def opensm_once(self, host: str, timeout: float = 300) -> str:
        """One opensm sweep from ``host`` (``-o``: exit after the sweep); its log."""
        log = self.workdir / "opensm.log"
        r = self.run(host, "opensm", "-o", "-e", "-f", str(log), "-d", "0", timeout=timeout)
        text = log.read_text() if log.exists() else ""
        if "SUBNET UP" not in text:
            raise AssertionError(
                f"opensm did not reach SUBNET UP (rc {r.returncode}):\n"
                f"{r.stdout[-2000:]}\n{text[-4000:]}"
            )
        return text


@contextmanager
def ibsim(netfile: Path, workdir: Path, extra_args: list[str] | None = None):
    """Start the Debian ibsim on ``netfile``; yield a session for running tools."""
    sockname = f"fltest{os.getpid()}x{next(_counter)}"
    log = open(workdir / "ibsim.log", "w")
    proc = subprocess.Popen(
        ["ibsim", "-s", "-n", *(extra_args or []), str(netfile)],
        env={**os.environ, "IBSIM_SOCKNAME": sockname},
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while not procfs.abstract_bound(simwire.sockname(sockname, "ctl")):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(
                    f"ibsim did not start: {(workdir / 'ibsim.log').read_text()[-2000:]}"
                )
            time.sleep(0.02)
        yield IbsimSession(workdir, sockname)
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
