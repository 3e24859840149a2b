"""fabriclab's host library against Debian's libumad2sim, on the same server and
fabric, in one run; and the host library over TCP from a tray in a network namespace of
its own.

The 2,048-HCA fabric of bench/server.py (512 trays x 4 HCAs, 64 leaves, 32 spines) is
served by ``fabriclab up``.  Each round starts a fresh server once per way in, the two
ways alternating, and on it runs, from the first tray:

- the real OpenSM (``opensm -o``: configure once, exit) from start to SUBNET UP;
- then the real ``ibnetdiscover``, a full discovery, several times.

With root (``ip netns``), a third way: the same tools run in a network namespace the
bench makes (a veth pair to this one), through ``fabriclab attach``'s directory, over
TCP to a server started with ``up --host-listen`` (goal: no more than 1.3 times the
local socket's time).

Figures are medians; the ratio is hostlib / umad2sim (below 1.0: the library is
faster), and tcp / hostlib.  Where a discovery's time goes is read per MAD: its wall time, the server's
CPU (from /proc, with the MADs it counted) and the tool's own CPU (user and system, from
its rusage, the library's work included).

    python bench/hostlib.py [--rounds 3] [--discoveries 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import netns
from server import Fabriclab, bench_fabric

from fabriclab.sim.run import admin, records, tools

WAYS = ("umad2sim", "hostlib", "tcp")


class TcpFabriclab(Fabriclab):
    """``fabriclab up`` also serving the host library over TCP at ``addr``, to ``net``."""

    def __init__(self, spec: str, work: Path, addr: str, net: str):
        super().__init__(spec, work)
        self.addr, self.net = addr, net

    def argv(self, name: str) -> list[str]:
        return [*super().argv(name), "--host-listen", f"{self.addr}:0", "--allow", self.net]


_TICK = os.sysconf("SC_CLK_TCK")


def _cpu(pid: int) -> float:
    """A process's CPU seconds so far (user + system)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def _env(way: str, name: str, tray: str, work: Path) -> dict:
    os.environ["FABRICLAB_STATE_DIR"] = str(work)
    inst = records.Instance.load(name)
    if way == "tcp":  # only what attach wrote: the tools source it in their namespace
        return {"PATH": os.environ["PATH"], "LANG": "C"}
    if way == "hostlib":
        env = tools.host_env(inst, tray)
    else:
        env = tools.tool_env(inst, tray)
    env.update(OSM_CACHE_DIR=str(work), OSM_TMP_DIR=str(work))
    return env


def _run(argv: list[str], env: dict, cwd: Path, timeout: float = 900) -> tuple[float, float]:
    """Wall seconds and the tool's CPU seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    r = subprocess.run(
        argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=timeout
    )
    dt = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise SystemExit(f"{argv[0]} failed ({r.returncode}): {r.stderr.decode()[-500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return dt, cpu


def _steal() -> float:
    """CPU seconds this machine's vCPUs have waited for the host so far (/proc/stat
    'steal'): the noise other guests make, printed with the figures."""
    with open("/proc/stat") as f:
        return int(f.readline().split()[8]) / _TICK


def _mads(name: str) -> int:
    return int(admin.request(name, {"op": "stats"})["mads"])


def _in_tray(way: str, argv: list[str], there, attached: Path) -> list[str]:
    """``argv`` as ``way`` runs it: over TCP, in the tray's namespace with attach's env
    (the OSM_ variables pass through)."""
    if way != "tcp":
        return argv
    script = f". {attached}/env && exec {shlex.join(argv)}"
    return ["ip", "netns", "exec", there[0], "sh", "-c", script]


def _attach(name: str, tray: str, work: Path) -> Path:
    """``fabriclab attach`` of ``tray`` into a directory under ``work``."""
    d = work / f"attach-{name}"
    r = subprocess.run(
        [sys.executable, "-m", "fabriclab.cli", "attach", "--name", name, tray, str(d)],
        env={**os.environ, "FABRICLAB_STATE_DIR": str(work)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    if r.returncode != 0:
        raise SystemExit(f"fabriclab attach failed: {r.stderr}")
    return d


def compare(rounds: int, discoveries: int) -> None:
    why = netns.why_not()
    if why:
        print(f"tcp: not measured ({why})")
        _compare(rounds, discoveries, WAYS[:2], None)
        return
    with netns.tray_namespace() as there:
        _compare(rounds, discoveries, WAYS, there)


def _compare(rounds: int, discoveries: int, ways: tuple[str, ...], there) -> None:
    work = Path(tempfile.mkdtemp(prefix="fl-hlbench-"))
    spec_file, cluster = bench_fabric(work)
    fabric = cluster.fabric
    tray = cluster.trays[0].host
    print(
        f"fabric: {len(cluster.trays)} trays, {len(fabric.cas())} HCAs, "
        f"{len(fabric.switches())} switches, {fabric.link_count()} links; tools on {tray}"
    )
    sm: dict[str, list[float]] = {w: [] for w in ways}
    disc: dict[str, list[float]] = {w: [] for w in ways}
    start: dict[str, list[float]] = {w: [] for w in ways}
    per_mad: dict[str, list[tuple[float, float, float]]] = {w: [] for w in ways}
    sm_per_mad: dict[str, list[tuple[float, float, float]]] = {w: [] for w in ways}
    servers = {w: Fabriclab(str(spec_file), work) for w in ways}
    if there is not None:
        servers["tcp"] = TcpFabriclab(str(spec_file), work, there[1], there[3])
    steal0, t0 = _steal(), time.monotonic()
    for r in range(rounds):
        for i, way in enumerate(ways if r % 2 == 0 else ways[::-1]):
            name = f"flhl{os.getpid()}x{i}x{r}"
            server = servers[way]
            server.start(name)
            try:
                deadline = time.monotonic() + 60
                while not (work / f"{name}.json").exists() and time.monotonic() < deadline:
                    time.sleep(0.05)
                env = _env(way, name, tray, work)
                attached = _attach(name, tray, work) if way == "tcp" else work
                smdir = work / f"sm-{name}"
                smdir.mkdir()
                env.update(OSM_CACHE_DIR=str(smdir), OSM_TMP_DIR=str(smdir))
                m0, c0 = _mads(name), _cpu(server.proc.pid)
                opensm = ["opensm", "-o", "-e", "-f", str(smdir / "opensm.log")]
                dt, tool_cpu = _run(_in_tray(way, opensm, there, attached), env, smdir)
                m1, c1 = _mads(name), _cpu(server.proc.pid)
                if "SUBNET UP" not in (smdir / "opensm.log").read_text(errors="replace"):
                    raise SystemExit(f"OpenSM did not report SUBNET UP through {way}")
                sm[way].append(dt)
                n = max(1, m1 - m0)
                sm_per_mad[way].append((dt / n, (c1 - c0) / n, tool_cpu / n))
                for _ in range(discoveries):
                    m0, c0 = _mads(name), _cpu(server.proc.pid)
                    dt, tool_cpu = _run(
                        _in_tray(way, ["ibnetdiscover"], there, attached), env, work
                    )
                    m1, c1 = _mads(name), _cpu(server.proc.pid)
                    n = max(1, m1 - m0)
                    disc[way].append(dt)
                    per_mad[way].append((dt / n, (c1 - c0) / n, tool_cpu / n))
                    # a tool's start alone: its devices and tree, no MAD
                    start[way].append(_run(_in_tray(way, ["ibstat", "-l"], there, attached),
                                           env, work)[0])  # fmt: skip
            finally:
                server.stop()
    print(
        f"machine noise: {_steal() - steal0:.1f} s of steal time over the "
        f"{time.monotonic() - t0:.0f} s run (two vCPUs)"
    )
    for what, data in (("opensm start to SUBNET UP", sm), ("ibnetdiscover, full fabric", disc)):
        a, b = statistics.median(data["umad2sim"]), statistics.median(data["hostlib"])
        print(
            f"{what:28s} umad2sim {a:6.2f} s   hostlib {b:6.2f} s   ratio {b / a:4.2f} "
            f"(goal <= 1.0)   [{len(data['hostlib'])} runs each, median]"
        )
        if "tcp" in data:
            c = statistics.median(data["tcp"])
            print(
                f"{what:28s} tcp (a tray's netns) {c:6.2f} s   tcp / hostlib {c / b:4.2f} "
                f"(goal <= 1.3)   tcp / umad2sim {c / a:4.2f}"
            )
    if "tcp" in ways:
        net = {w: statistics.median(disc[w]) - statistics.median(start[w]) for w in ways}
        print(
            f"ibnetdiscover less a tool's start: hostlib {net['hostlib']:6.2f} s   tcp "
            f"{net['tcp']:6.2f} s   tcp / hostlib {net['tcp'] / net['hostlib']:4.2f}"
        )
    print(
        "a tool's start (ibstat -l)   "
        + "   ".join(f"{w} {statistics.median(start[w]) * 1000:6.1f} ms" for w in ways)
        + "   (over TCP: the tray's tree fetched and unpacked for each process)"
    )
    for what, table in (("OpenSM", sm_per_mad), ("a discovery", per_mad)):
        for way in ways:
            wall = statistics.median(x[0] for x in table[way]) * 1e6
            srv = statistics.median(x[1] for x in table[way]) * 1e6
            tool = statistics.median(x[2] for x in table[way]) * 1e6
            print(
                f"per MAD of {what:11s} {way:8s}: {wall:6.1f} us wall; CPU: server {srv:5.1f} us,"
                f" tool {tool:5.1f} us (user + system; the two run side by side on two cores)"
            )
    shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--discoveries", type=int, default=3)
    a = ap.parse_args()
    compare(a.rounds, a.discoveries)


if __name__ == "__main__":
    main()
