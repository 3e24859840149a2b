"""The native MAD core with the real tools: a fabric served by it and one served by the
Python core (FABRICLAB_MAD_CORE=python), each brought up by the real OpenSM, show the
real ibnetdiscover, ibroute, smpquery and perfquery the same fabric, byte for byte,
through libumad2sim (the core receives from the socket itself) and through the host
library (its frames reach the core through the Python transport)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from fabric_server import fabric_up

from fabriclab.sim.run import tools
from fabriclab.sim.wire.native import ENV

TRAY = "sched-worker1"
LEAF = "MF0;LAB-IBLEAF-01:MQM9701/U1"


def _views(f, hostlib: bool) -> list[str]:
    def run(*argv: str) -> str:
        if hostlib:
            env = tools.host_env(f.instance(), TRAY, base=f.env)
            r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, r.stderr
            out = r.stdout
        else:
            out = f.run(TRAY, *argv).stdout
        return "\n".join(line for line in out.splitlines() if not line.startswith("#"))

    leaf = f.cluster.fabric.find(LEAF)
    return [
        run("ibnetdiscover"),
        run("ibnetdiscover", "-p"),
        run("ibroute", str(leaf.lid)),
        run("smpquery", "portinfo", str(leaf.lid), "3"),
        run("smpquery", "nodeinfo", str(leaf.lid)),
        run("smpquery", "pkeys", str(leaf.lid), "1"),
        run("smpquery", "switchinfo", str(leaf.lid)),
        run("smpquery", "-D", "nodedesc", "0,1"),
        run("perfquery"),
    ]


@pytest.mark.parametrize("spec", ["lab"])
def test_the_real_tools_see_the_same_fabric_through_either_core(spec, tmp_path: Path, monkeypatch):
    seen = {}
    for core in ("native", "python"):
        monkeypatch.setenv(ENV, core)
        with fabric_up(spec, tmp_path / core, sm=True) as f:
            log = Path(f.env["FABRICLAB_STATE_DIR"]) / f"{f.name}.log"
            assert f"({core} MAD core)" in log.read_text(errors="replace")
            seen[core] = (_views(f, False), _views(f, True))
    assert seen["native"][0] == seen["python"][0]
    assert seen["native"][1] == seen["python"][1]
