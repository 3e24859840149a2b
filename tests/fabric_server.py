"""Start fabriclab's fabric server for a test, the way a user does ('fabriclab up
--detach'), and run the real tools against it.

Each fabric gets a unique name (IBSIM_SOCKNAME) and its own state directory, so tests
and test runs never meet; whatever a fabric started is stopped when its block ends.
"""

from __future__ import annotations

import itertools
import os
import re
import signal
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

from helpers import fl, wait_for
from toolsets import SYSTEM, ToolSet

from fabriclab.model.build import build
from fabriclab.model.cluster import Cluster
from fabriclab.sim.run import records, tools
from fabriclab.spec.load import load_spec

_counter = itertools.count()


@dataclass
class Fabric:
    name: str
    spec: str
    cluster: Cluster
    workdir: Path
    env: dict[str, str]  # FABRICLAB_STATE_DIR etc., for fabriclab commands

    def instance(self) -> records.Instance:
        with mock.patch.dict(os.environ, FABRICLAB_STATE_DIR=self.env["FABRICLAB_STATE_DIR"]):
            return records.Instance.load(self.name)

    def tool_env(self, node: str) -> dict[str, str]:
        inst = self.instance()
        env = tools.tool_env(inst, tools.sim_host(self.cluster, node), base=self.env)
        return env

    def run(
        self,
        node: str,
        *argv: str,
        timeout: float = 120,
        check: bool = True,
        extra_env: dict | None = None,
        tools: ToolSet = SYSTEM,
    ) -> subprocess.CompletedProcess:
        """Run a real tool attached at ``node`` (HOST, HOST:HCA, a CA or switch), from
        ``tools`` (the system's by default, or the Debian 13 root's)."""
        env = self.tool_env(node)
        env.update(extra_env or {})
        r = tools.run(argv, env, self.workdir, timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError(
                f"{' '.join(argv)} at {node} ({tools}) exited {r.returncode}:\n"
                f"{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
            )
        return r

    def fabriclab(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        """A fabriclab command with this fabric's state directory."""
        return fl(*args, env=self.env, cwd=self.workdir, timeout=timeout)

    def ok(self, *args: str) -> str:
        """A fabriclab command that must succeed; its standard output."""
        r = self.fabriclab(*args)
        assert r.returncode == 0, (args, r.stderr)
        return r.stdout

    def opensm_log(self) -> str:
        p = Path(self.env["FABRICLAB_STATE_DIR"]) / f"{self.name}.opensm" / "opensm.log"
        return p.read_text(errors="replace") if p.exists() else ""

    def swept_after_trap(self, lid: int, since: int = 0, timeout: float = 60) -> None:
        """Wait until OpenSM has logged the switch at ``lid``'s trap 128 (a link changed
        state) and then SUBNET UP: it swept again because of it.  ``since``: where in
        its log to look from."""
        swept = re.compile(re.escape(link_trap(lid)) + r"(?s:.*)SUBNET UP")
        wait_for(
            lambda: swept.search(self.opensm_log()[since:]),
            timeout,
            lambda: f"OpenSM's sweep after the trap; its log:\n{self.opensm_log()[-3000:]}",
            interval=0.2,
        )

    def sweep(self, timeout: float = 60) -> str:
        """Make the fabric's OpenSM (``--sm``) sweep now and wait until that sweep is done:
        SIGHUP starts a heavy sweep (OpenSM's main loop), which logs SUBNET UP again when
        it brings the subnet up.  Proof that OpenSM is still attached and is answered;
        the log after the signal."""
        inst = self.instance()
        assert inst.sm_pid, "the fabric runs no OpenSM"
        wait_for(lambda: "SUBNET UP" in self.opensm_log(), timeout, "OpenSM's first SUBNET UP")
        before = len(self.opensm_log())
        os.kill(inst.sm_pid, signal.SIGHUP)
        wait_for(
            lambda: re.search(r"\bSUBNET UP\b", self.opensm_log()[before:]),
            timeout,
            lambda: f"OpenSM's sweep after SIGHUP; its log:\n{self.opensm_log()[-3000:]}",
        )
        return self.opensm_log()[before:]


def link_trap(lid: int) -> str:
    """The line OpenSM logs on trap 128 (a link changed state) from the switch at
    ``lid``."""
    return (
        "Received Generic Notice type:1 num:128 (Link state change) Producer:2 (Switch) "
        f"from LID:{lid} "
    )


@contextmanager
def fabric_up(
    spec: str,
    workdir: Path,
    *,
    sm: bool = False,
    sm_at: str | None = None,
    listen: str | None = None,
    extra: list[str] | None = None,
):
    """``fabriclab up SPEC --detach`` (with the real OpenSM when ``sm``); stopped after."""
    name = f"fltest{os.getpid()}x{next(_counter)}"
    workdir.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IBSIM_", "SIM_"))}
    env["FABRICLAB_STATE_DIR"] = str(workdir / "state")
    env.pop("LD_PRELOAD", None)
    cluster = build(load_spec(spec))
    f = Fabric(name, spec, cluster, workdir, env)
    args = ["up", spec, "--name", name, "--detach", *(extra or [])]
    if sm:
        args.append("--sm")
    if sm_at:
        args += ["--sm-at", sm_at]
    if listen:
        args += ["--listen", listen]
    r = f.fabriclab(*args)
    if r.returncode != 0:
        raise AssertionError(f"fabriclab up failed ({r.returncode}):\n{r.stderr}")
    try:
        yield f
    finally:
        r = f.fabriclab("down", "--name", name, timeout=60)
        if r.returncode != 0 and "is not running" not in r.stderr:
            raise AssertionError(f"fabriclab down failed: {r.stderr}")
