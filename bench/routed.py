"""``fabriclab up --routed`` of a large fabric: ready at once, and OpenSM taking it over.

gb200-su scaled to ``--trays`` (8,192: 32,768 HCAs, three tiers) is brought up with
``fabriclab up --routed`` in the foreground, as a user does.  Each round:

- from the command's start to the first answered MAD: the real ``sminfo`` run in a loop
  from the first tray until it reads the stand-in master (a LID-routed SMInfo, so the
  forwarding tables are in place), goal <= 10 s;
- a real full ``ibnetdiscover`` of the fabric, which must complete (nodes counted);
- the server's peak RSS (VmHWM, /proc);
- then the real OpenSM (``opensm -o``: configure once, exit) taking the routed fabric
  over, from its start to SUBNET UP, with its CPU time beside the server's (/proc).

With ``--cold-sm`` also OpenSM from start to SUBNET UP on the same fabric up without
``--routed`` (nothing routed, ports INIT: OpenSM's whole first sweep; goal <= 5 min),
with the same CPU shares.  Figures are medians of the rounds.

    python bench/routed.py [--trays 8192] [--rounds 3] [--no-sm] [--cold-sm] [--quick]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fabriclab.model.build import build
from fabriclab.model.cluster import find_port
from fabriclab.sim.run import tools
from fabriclab.spec.load import load_spec

TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """A process's user + system CPU seconds so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def peak_rss_mb(pid: int) -> float:
    m = re.search(r"VmHWM:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text())
    return int(m.group(1)) / 1024 if m else 0.0


class Up:
    """``fabriclab up gb200-su --trays N [--routed]`` in the foreground, under ``name``."""

    def __init__(self, trays: int, routed: bool, work: Path, name: str):
        self.name, self.work = name, work
        argv = [sys.executable, "-m", "fabriclab.cli", "up", "gb200-su", "--trays", str(trays)]
        argv += ["--name", name] + (["--routed"] if routed else [])
        self.log = work / f"{name}.err"
        self.t0 = time.perf_counter()
        with self.log.open("w") as err:
            self.proc = subprocess.Popen(
                argv,
                env={**os.environ, "FABRICLAB_STATE_DIR": str(work / "state")},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )

    def phases(self) -> dict[str, float]:
        """The seconds at which up's phases began (its own lines: building, serving,
        ready)."""
        text = self.log.read_text(errors="replace")
        return {m[2]: float(m[1]) for m in re.finditer(r"\[\s*([\d.]+) s\] (\w+)", text)}

    def env(self, host: str) -> dict:
        env = dict(os.environ)
        env.update(
            LD_PRELOAD=tools.umad2sim_path(),
            SIM_HOST=host,
            IBSIM_SOCKNAME=self.name,
            OSM_CACHE_DIR=str(self.work),
            OSM_TMP_DIR=str(self.work),
        )
        return env

    def wait_socket(self, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while not tools.control_socket_up(self.name, None):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"fabriclab up {self.name} did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def first_mad(up: Up, host: str, timeout: float = 600) -> float:
    """Seconds from ``up``'s start until sminfo from ``host`` reads the master SM."""
    up.wait_socket(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = subprocess.run(
            ["sminfo"], env=up.env(host), capture_output=True, text=True, timeout=timeout
        )
        if r.returncode == 0 and "SMINFO_MASTER" in r.stdout:
            return time.perf_counter() - up.t0
        if up.proc.poll() is not None:
            break
        time.sleep(0.05)
    raise SystemExit(f"no answer from the routed fabric: {r.stderr[-300:]}")


def discover(up: Up, host: str) -> tuple[float, int]:
    t = time.perf_counter()
    r = subprocess.run(
        ["ibnetdiscover"], env=up.env(host), capture_output=True, text=True, timeout=3600
    )
    dt = time.perf_counter() - t
    if r.returncode != 0:
        raise SystemExit(f"ibnetdiscover failed ({r.returncode}): {r.stderr[-500:]}")
    nodes = sum(1 for line in r.stdout.splitlines() if line.startswith(("Switch", "Ca")))
    return dt, nodes


def opensm(up: Up, host: str, timeout: float) -> tuple[float, float, float]:
    """OpenSM once to SUBNET UP: (seconds, its CPU seconds, the server's CPU seconds)."""
    sm = up.work / f"sm-{up.name}"
    shutil.rmtree(sm, ignore_errors=True)
    sm.mkdir(parents=True)
    env = up.env(host)
    env.update(OSM_CACHE_DIR=str(sm), OSM_TMP_DIR=str(sm))
    server0 = cpu_s(up.proc.pid)
    t = time.perf_counter()
    p = subprocess.Popen(
        ["opensm", "-o", "-e", "-f", str(sm / "opensm.log")],
        env=env,
        cwd=sm,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    sm_cpu = 0.0
    while p.poll() is None:
        try:
            sm_cpu = cpu_s(p.pid)
        except (FileNotFoundError, ProcessLookupError):
            break
        if time.perf_counter() - t > timeout:
            p.kill()
            p.wait()
            return float("inf"), sm_cpu, cpu_s(up.proc.pid) - server0
        time.sleep(0.05)
    dt = time.perf_counter() - t
    text = (sm / "opensm.log").read_text(errors="replace")
    if "SUBNET UP" not in text:
        raise SystemExit(f"OpenSM did not report SUBNET UP on {up.name}: {text[-800:]}")
    return dt, sm_cpu, cpu_s(up.proc.pid) - server0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trays", type=int, default=8192)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cold-sm", action="store_true", help="also OpenSM on the unrouted fabric")
    ap.add_argument("--sm-limit", type=float, default=900.0, help="seconds OpenSM may take")
    ap.add_argument("--quick", action="store_true", help="1,024 trays, one round")
    ap.add_argument("--no-sm", action="store_true", help="skip OpenSM taking the fabric over")
    a = ap.parse_args()
    if a.quick:
        a.trays, a.rounds = 1024, 1
    for tool in ("opensm", "ibnetdiscover", "sminfo"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} not found: run scripts/install-system-deps.sh")
    c = build(load_spec("gb200-su", trays=a.trays))
    host = find_port(c, None)[0].node.desc
    hcas, nsw = len(c.fabric.cas()), len(c.fabric.switches())
    print(f"gb200-su x {a.trays} trays: {hcas} HCAs, {nsw} switches, {c.fabric.link_count()} links")
    work = Path(tempfile.mkdtemp(prefix="fl-routed-"))
    ready, disc, rss, sm, sm_cpu, srv_cpu = [], [], [], [], [], []
    serving, up_ready = [], []
    try:
        for r in range(a.rounds):
            up = Up(a.trays, True, work, f"flrouted{os.getpid()}x{r}")
            try:
                ready.append(first_mad(up, host))
                ph = up.phases()
                serving.append(ph.get("serving", 0.0))
                up_ready.append(ph.get("ready", 0.0))
                dt, nodes = discover(up, host)
                disc.append(dt)
                rss.append(peak_rss_mb(up.proc.pid))
                if not a.no_sm:
                    s, sc, vc = opensm(up, host, a.sm_limit)
                    sm.append(s)
                    sm_cpu.append(sc)
                    srv_cpu.append(vc)
            finally:
                up.stop()
        med = statistics.median
        print(
            f"up --routed to the first answered MAD  {med(ready):6.2f} s   (goal <= 10 s): "
            f"up's own phases (from its start, after Python's): model built {med(serving):.1f} s, "
            f"routed and serving {med(up_ready):.1f} s"
        )
        print(
            f"ibnetdiscover of it                    {med(disc):6.2f} s   completed: {nodes} "
            f"nodes of {hcas + nsw} (goal: completes)"
        )
        print(f"server peak RSS                        {med(rss):6.0f} MB")
        if sm:
            print(
                f"OpenSM taking the routed fabric over   {med(sm):6.1f} s   (goal <= 300 s); "
                f"CPU: OpenSM {med(sm_cpu):.1f} s, server {med(srv_cpu):.1f} s"
            )
        if a.cold_sm:
            up = Up(a.trays, False, work, f"flcold{os.getpid()}")
            try:
                up.wait_socket()
                t_ready = time.perf_counter() - up.t0
                s, sc, vc = opensm(up, host, a.sm_limit)
            finally:
                up.stop()
            print(
                f"OpenSM on the unrouted fabric          {s:6.1f} s   (goal <= 300 s); "
                f"CPU: OpenSM {sc:.1f} s, server {vc:.1f} s (server up in {t_ready:.1f} s)"
            )
        print(f"[{a.rounds} rounds, medians; other work on this machine shows in the figures]")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
