"""Record MAD streams from real tool runs against ``fabriclab up`` (FABRICLAB_MAD_RECORD):
the replay test's fixtures (``tests/fixtures/madrec/``) and bench/replay.py's streams.

Streams (each on a freshly started fabric, the tools attached at the spec's first tray):

- ``ibnetdiscover``: the real ibnetdiscover, once;
- ``session``: the real OpenSM (``-s 2``) to SUBNET UP and its first light sweep;
  perfquery of a few ports (PortCounters, PortCountersExtended, a reset); a link
  ``down`` through the admin socket (the switch's trap to OpenSM, its sweep after);
  ibnetdiscover seeing the link gone; OpenSM stopped;
- ``opensm``: ``opensm -o`` (one sweep to SUBNET UP, then exit) and ibnetdiscover, for the
  benchmark's large fabric.

    python bench/madstreams.py [--spec lab] [--out DIR] [STREAM ...]
    scripts/record-mad-streams          (the fixtures: --out tests/fixtures/madrec)
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from fabriclab.model.build import build
from fabriclab.model.cluster import find_port
from fabriclab.sim.run import admin, tools
from fabriclab.sim.wire import record
from fabriclab.spec.load import load_spec

FIXTURE_STREAMS = ("ibnetdiscover", "session")
FAULT = {"op": "fault", "kind": "down", "target": "LAB-IBLEAF-01[5]"}  # a leaf's host port


def _wait(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise SystemExit(f"error: madstreams: {what}: not within {timeout:g} s")
        time.sleep(0.05)


class Fabric:
    """``fabriclab up SPEC`` (detached) recording to a file, under ``work``."""

    def __init__(self, spec: str, work: Path, name: str, env: dict | None = None):
        self.spec, self.work, self.name = spec, work, name
        self.state = work / "state"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("IBSIM_", "SIM_"))}
        self.env.pop("LD_PRELOAD", None)
        self.env["FABRICLAB_STATE_DIR"] = str(self.state)
        self.env.update(env or {})
        self.cluster = build(load_spec(spec))
        start, _ = find_port(self.cluster, None)
        self.host = start.node.desc

    def fabriclab(self, *args: str, env: dict | None = None) -> None:
        r = subprocess.run(
            [sys.executable, "-m", "fabriclab.cli", *args],
            env={**self.env, **(env or {})},
            cwd=self.work,
            capture_output=True,
            text=True,
            timeout=900,
        )
        if r.returncode != 0:
            raise SystemExit(f"error: fabriclab {args[0]}: {r.stderr.strip()[-500:]}")

    @contextmanager
    def up(self, record: Path | None):
        env = {"FABRICLAB_MAD_RECORD": str(record)} if record else {}
        self.fabriclab("up", self.spec, "--name", self.name, "--detach", env=env)
        try:
            yield self
        finally:
            self.fabriclab("down", "--name", self.name)

    def admin(self, req: dict):
        return admin.call(admin.admin_path(self.state, self.name), req)

    def tool_env(self) -> dict:
        env = dict(self.env)
        env.update(
            LD_PRELOAD=tools.umad2sim_path(),
            SIM_HOST=self.host,
            IBSIM_SOCKNAME=self.name,
            OSM_CACHE_DIR=str(self.work),
            OSM_TMP_DIR=str(self.work),
        )
        return env

    def run(self, *argv: str) -> str:
        r = subprocess.run(
            argv, env=self.tool_env(), cwd=self.work, capture_output=True, text=True, timeout=600
        )
        if r.returncode != 0:
            raise SystemExit(f"error: {argv[0]}: exited {r.returncode}: {r.stderr[-500:]}")
        return r.stdout

    def quiet(self, secs: float = 0.5, timeout: float = 60) -> int:
        """Wait until the server has received no MAD for ``secs``; its count."""
        last = [-1, time.monotonic()]

        def still() -> bool:
            n = self.admin({"op": "stats"})["mads"]
            if n != last[0]:
                last[:] = [n, time.monotonic()]
            return time.monotonic() - last[1] >= secs

        _wait(still, timeout, "the server growing quiet")
        return int(last[0])


def _sm_log(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def session(f: Fabric) -> None:
    """OpenSM's first sweep and a light sweep, perfquery, a fault, ibnetdiscover."""
    log = f.work / "opensm-session.log"
    conf = f.work / "opensm.conf"
    conf.write_text("force_log_flush TRUE\n")  # SUBNET UP reaches the log at once
    sm = subprocess.Popen(
        ["opensm", "-F", str(conf), "-e", "-s", "2", "-f", str(log)],
        env=f.tool_env(),
        cwd=f.work,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait(lambda: "SUBNET UP" in _sm_log(log), 120, "OpenSM's SUBNET UP")
        swept = f.quiet()
        # the light sweep: OpenSM asks again every 2 s (osm_state_mgr.c, light sweep)
        _wait(lambda: f.admin({"op": "stats"})["mads"] > swept, 30, "OpenSM's light sweep")
        f.quiet()
        f.run("perfquery")
        f.run("perfquery", "-x")
        lid = f.admin({"op": "locate", "name": "LAB-IBLEAF-01"})
        switch = _first_lid(lid)
        f.run("perfquery", str(switch), "1")
        f.run("perfquery", "-x", str(switch), "5")
        f.run("perfquery", "-R", str(switch), "1")
        before = len(_sm_log(log))
        f.admin(FAULT)
        _wait(lambda: "SUBNET UP" in _sm_log(log)[before:], 60, "OpenSM's sweep after the trap")
        f.quiet()
        f.run("ibnetdiscover")
    finally:
        sm.send_signal(signal.SIGTERM)
        sm.wait(60)
    # the server detaches OpenSM on its next sweep of clients that are gone
    _wait(lambda: f.admin({"op": "stats"})["clients"] == 0, 30, "OpenSM detached")


def _first_lid(located: dict) -> int:
    return int(located["nodes"][0]["ports"][0]["lid"])


def record_stream(kind: str, spec: str, out: Path, env: dict | None = None) -> Path:
    """Record stream ``kind`` on ``spec`` to ``out`` (a .madrec.gz file)."""
    work = Path(tempfile.mkdtemp(prefix="fl-madrec-"))
    try:
        f = Fabric(spec, work, f"flrec{os.getpid()}{kind}", env)
        with f.up(out):
            if kind == "ibnetdiscover":
                f.run("ibnetdiscover")
            elif kind == "session":
                session(f)
            elif kind == "opensm":
                log = work / "opensm.log"
                f.run("opensm", "-o", "-e", "-f", str(log))
                if "SUBNET UP" not in _sm_log(log):
                    raise SystemExit("error: madstreams: OpenSM did not reach SUBNET UP")
                f.run("ibnetdiscover")
            _wait(lambda: f.admin({"op": "stats"})["clients"] == 0, 30, "the tools detached")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--spec", default="lab")
    ap.add_argument(
        "--out",
        help="where the streams go (scripts/record-mad-streams: tests/fixtures/madrec); "
        "by default a temporary directory, removed after their sizes are printed",
    )
    ap.add_argument("streams", nargs="*", default=list(FIXTURE_STREAMS))
    a = ap.parse_args()
    out = Path(a.out).resolve() if a.out else Path(tempfile.mkdtemp(prefix="fl-madstreams-"))
    out.mkdir(parents=True, exist_ok=True)
    env = {"FABRICLAB_MAD_CORE": "python"}  # what the reference path is handed
    try:
        for kind in a.streams:
            path = record_stream(kind, a.spec, out / f"{a.spec}-{kind}.madrec.gz", env)
            n = sum(1 for r in record.read(path) if r.kind == record.MAD_IN)
            print(f"{path}: {kind}, {n} MADs, {path.stat().st_size} bytes")
    finally:
        if not a.out:
            shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
