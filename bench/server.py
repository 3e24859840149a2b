"""The fabric server against the Debian ibsim, on the same fabric, in one run.

A two-tier fabric of 2,048 HCAs and 96 switches (512 trays x 4 HCAs; 64 leaves, 32
spines; Quantum-2 radix) is served by ``ibsim`` (from fabriclab's net file) and by
``fabriclab up``.  Every ibsim release at hand is measured: the system's, and on a machine
older than Debian 13 also Debian 13's ibsim 0.12 from the root scripts/debian13-root.sh
makes (run as root; chroot).  The clients (OpenSM, ibnetdiscover) are the system's for all
servers.  For each, on a freshly started server:

- the real OpenSM (``opensm -o``: configure once, exit) from start to SUBNET UP;
- then the real ``ibnetdiscover``, a full discovery, several times.

Rounds alternate between the servers; figures are medians.  The ratio is
fabriclab / ibsim, for each ibsim: below 1.0 means fabriclab is faster.

``--scale`` also brings up gb200-su scaled to larger fabrics with OpenSM, and reports
the largest that reaches SUBNET UP within 5 minutes (it takes a long time).

    python bench/server.py [--rounds 3] [--scale]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from fabriclab.formats import ibsim_net
from fabriclab.model.build import build
from fabriclab.model.cluster import Cluster, find_port
from fabriclab.sim.run import tools
from fabriclab.spec.load import load_spec

BENCH_SPEC = {
    "name": "bench-2k",
    "trays": [{"hosts": "node[0001-0512]", "gpus": 4, "hcas": 4}],
    "fabric": {
        "fat_tree": {
            "tiers": 2,
            "switch": "quantum-2",
            "rail_optimized": False,
            "hosts_per_leaf": 8,
            "leaf_uplinks": 32,
            "spines": 32,
        }
    },
}


# fabriclab's time / ibsim's, at most (the speed issue's goals)
GOALS = {"opensm": 0.8, "ibnetdiscover": 0.7}


def _tool_env(name: str, host: str, work: Path) -> dict:
    env = dict(os.environ)
    env.update(
        LD_PRELOAD=tools.umad2sim_path(),
        SIM_HOST=host,
        IBSIM_SOCKNAME=name,
        OSM_CACHE_DIR=str(work),
        OSM_TMP_DIR=str(work),
    )
    env.pop("IBSIM_SERVER_NAME", None)
    return env


def _timed(argv: list[str], env: dict, cwd: Path, timeout: float = 600) -> float:
    t = time.perf_counter()
    r = subprocess.run(
        argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=timeout
    )
    dt = time.perf_counter() - t
    if r.returncode != 0:
        raise SystemExit(f"{argv[0]} failed ({r.returncode}): {r.stderr.decode()[-500:]}")
    return dt


def _opensm(name: str, host: str, work: Path, timeout: float = 600) -> float:
    sm = work / f"sm-{name}"
    shutil.rmtree(sm, ignore_errors=True)
    sm.mkdir(parents=True)
    dt = _timed(
        ["opensm", "-o", "-e", "-f", str(sm / "opensm.log")], _tool_env(name, host, sm), sm, timeout
    )
    if "SUBNET UP" not in (sm / "opensm.log").read_text(errors="replace"):
        raise SystemExit(f"OpenSM did not report SUBNET UP on {name}")
    return dt


def _wait_socket(name: str, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not tools.control_socket_up(name, None):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"server {name} did not start")
        time.sleep(0.02)


class Server:
    """A fabric server the bench starts and stops: ``argv`` serves under ``name``."""

    label = ""

    def argv(self, name: str) -> list[str]:
        raise NotImplementedError

    def env(self, name: str) -> dict:
        return dict(os.environ)

    def start(self, name: str, timeout: float = 120) -> None:
        self.proc = subprocess.Popen(
            self.argv(name),
            env=self.env(name),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _wait_socket(name, self.proc, timeout)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait()


class Ibsim(Server):
    """An ibsim: the system's (``root`` None) or a root's, run there with ``chroot``."""

    def __init__(self, net: Path, limits: list[str], root: Path | None = None):
        self.limits, self.root = limits, root
        self.prefix = ["chroot", str(root), "env", "-i"] if root else []
        if root:  # the net file where the root's ibsim can read it
            self.own = Path(tempfile.mkdtemp(prefix="fl-bench-", dir=root / "tmp"))
            shutil.copy(net, self.own / net.name)
            net = Path("/") / (self.own / net.name).relative_to(root)
        self.net = net
        out = subprocess.run(
            [*self.prefix, "ibsim", "-h"], capture_output=True, text=True, timeout=60
        )
        self.label = (out.stdout + out.stderr).strip().splitlines()[-1]  # "ibsim 0.10"

    def argv(self, name: str) -> list[str]:
        env = [f"IBSIM_SOCKNAME={name}"] if self.root else []
        return [*self.prefix, *env, "ibsim", "-s", "-n", *self.limits, str(self.net)]

    def env(self, name: str) -> dict:
        return {**os.environ, "IBSIM_SOCKNAME": name}

    def close(self) -> None:
        if self.root:
            shutil.rmtree(self.own, ignore_errors=True)


def _ibsims(net: Path, limits: list[str]) -> list[Ibsim]:
    """The system's ibsim, and Debian 13's from its root when the system's is older."""
    out = [Ibsim(net, limits)]
    if tuple(map(int, out[0].label.split()[-1].split("."))) >= (0, 12):
        return out
    if os.geteuid() != 0:
        print("ibsim 0.12: not measured (the Debian 13 root needs root)")
        return out
    script = Path(__file__).resolve().parent.parent / "scripts" / "debian13-root.sh"
    r = subprocess.run([str(script)], capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise SystemExit(f"scripts/debian13-root.sh failed: {r.stderr[-500:]}")
    out.append(Ibsim(net, limits, Path(r.stdout.split()[-1])))
    return out


class Fabriclab(Server):
    label = "fabriclab"

    def __init__(self, spec: str, work: Path, trays: int | None = None):
        self.spec, self.work, self.trays = spec, work, trays

    def argv(self, name: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "fabriclab.cli",
            "up",
            self.spec,
            "--name",
            name,
            *(["--trays", str(self.trays)] if self.trays else []),
        ]

    def env(self, name: str) -> dict:
        return {**os.environ, "FABRICLAB_STATE_DIR": str(self.work)}


def bench_fabric(work: Path) -> tuple[Path, Cluster]:
    """BENCH_SPEC written under ``work`` (a server is started from the file) and built."""
    spec_file = work / "bench-2k.yaml"
    spec_file.write_text(yaml.safe_dump(BENCH_SPEC))
    return spec_file, build(load_spec(str(spec_file)))


def compare(rounds: int, discoveries: int) -> None:
    work = Path(tempfile.mkdtemp(prefix="fl-bench-"))
    spec_file, cluster = bench_fabric(work)
    fabric = cluster.fabric
    net = work / "bench-2k.net"
    net.write_text(ibsim_net.render(fabric))
    start, _ = find_port(cluster, None)
    host = start.node.desc
    print(
        f"fabric: {len(cluster.trays)} trays, {len(fabric.cas())} HCAs, "
        f"{len(fabric.switches())} switches, {fabric.link_count()} links"
    )
    ibsims = _ibsims(net, ibsim_net.limits(fabric).args())
    servers = [*ibsims, Fabriclab(str(spec_file), work)]
    sm: dict[str, list[float]] = {s.label: [] for s in servers}
    disc: dict[str, list[float]] = {s.label: [] for s in servers}
    for r in range(rounds):
        for i, s in enumerate(servers):
            name = f"flbench{os.getpid()}x{i}x{r}"
            s.start(name)
            try:
                sm[s.label].append(_opensm(name, host, work))
                for _ in range(discoveries):
                    disc[s.label].append(
                        _timed(["ibnetdiscover"], _tool_env(name, host, work), work)
                    )
            finally:
                s.stop()
    for what, data, goal in (
        ("opensm start to SUBNET UP", sm, GOALS["opensm"]),
        ("ibnetdiscover, full fabric", disc, GOALS["ibnetdiscover"]),
    ):
        b = statistics.median(data["fabriclab"])
        for sim in ibsims:
            a = statistics.median(data[sim.label])
            print(
                f"{what:28s} {sim.label:10s} {a:6.2f} s   fabriclab {b:6.2f} s   "
                f"ratio {b / a:4.2f} (goal <= {goal})   [{len(data[sim.label])} runs each, median]"
            )
    for sim in ibsims:
        sim.close()
    shutil.rmtree(work, ignore_errors=True)


def scale(limit_s: float = 300.0) -> None:
    """OpenSM to SUBNET UP on gb200-su scaled up, until it takes longer than the limit."""
    work = Path(tempfile.mkdtemp(prefix="fl-scale-"))
    best = None
    for trays in (1024, 2048, 4096, 8192):
        c = build(load_spec("gb200-su", trays=trays))
        hcas = sum(len(t.hcas) for t in c.trays)
        name = f"flscale{os.getpid()}x{trays}"
        server = Fabriclab("gb200-su", work, trays)
        server.start(name, timeout=600)
        try:
            start, _ = find_port(c, None)
            try:
                dt = _opensm(name, start.node.desc, work, timeout=limit_s)
            except subprocess.TimeoutExpired:
                print(
                    f"scale: {hcas:6d} HCAs, {len(c.fabric.switches())} switches: "
                    f"no SUBNET UP within {limit_s:.0f} s"
                )
                break
            print(
                f"scale: {hcas:6d} HCAs, {len(c.fabric.switches())} switches: "
                f"SUBNET UP in {dt:6.1f} s"
            )
            best = hcas
            if dt > limit_s:
                break
        finally:
            server.stop()
    print(f"largest fabric up within {limit_s / 60:.0f} minutes: {best} HCAs (goal: 32768)")
    shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--discoveries", type=int, default=3)
    ap.add_argument(
        "--scale",
        action="store_true",
        help="also find the largest fabric OpenSM brings up within 5 minutes (slow)",
    )
    a = ap.parse_args()
    for tool in ("ibsim", "opensm", "ibnetdiscover"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} not found: run scripts/install-system-deps.sh")
    compare(a.rounds, a.discoveries)
    if a.scale:
        scale()


if __name__ == "__main__":
    main()
