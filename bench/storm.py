"""A fault storm on the live fabric: link flaps while the real ibnetdiscover scans.

The 2,048-HCA fabric of bench/server.py (512 trays x 4 HCAs, 64 leaves, 32 spines) is
served by ``fabriclab up --detach`` and configured once by the real OpenSM (``opensm
-o``, as bench/server.py does); one scan first gives every port counters, as on any
fabric that has been discovered.  Then:

- what a fault request costs the server's loop: ``--faults`` links each taken down and
  brought back (``fault down`` then ``fault up``) through the admin socket, as the CLI
  does, paced at ``--rate`` flaps a second with nothing else running; the server's own
  time for each request (admin op ``stats``: ``requests``), median beside the goal
  (<= 1 ms);
- rounds alternating a full real ``ibnetdiscover`` from a tray undisturbed and one
  while links (HCA links and leaf-spine links, in a seeded random order, none of the
  scanning tray's) flap at ``--rate`` flaps a second; the medians and their ratio
  beside the goal (<= 1.5).

Reported as well: every scan's exit status and how many nodes it found against the
fabric's; the flap rate reached; the admin round trip; the server's MAD counts from its
closing line (received, answered, forwarded, timed out, undeliverable: every MAD
received must be accounted for by an answer or a timeout sent back).

    python bench/storm.py [--rounds 3] [--rate 40] [--faults 200] [--seed 1] [--quick]
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from fabriclab.model.cluster import Cluster, find_port
from fabriclab.sim.run import admin, tools

sys.path.insert(0, str(Path(__file__).resolve().parent))
from server import bench_fabric  # the same fabric as bench/server.py

# the closing line of 'fabriclab up' (sim/run/launcher.py)
_CLOSING = re.compile(
    r"(\d+) MADs, (\d+) answered, (\d+) forwarded, (\d+) timed out, (\d+) undeliverable, "
    r"(\d+) malformed, (\d+) not sent"
)
_NODE = re.compile(r"^(Switch|Ca)\s+\d+\s", re.M)  # a node's header in ibnetdiscover's output


@dataclass
class Scan:
    rc: int
    seconds: float
    nodes: int
    stderr: str


@dataclass
class Storm:
    flaps: int = 0
    seconds: float = 0.0
    rtts: list[float] = field(default_factory=list)  # one per admin request
    error: str = ""


def flap_targets(cluster: Cluster, seed: int, spare: str) -> list[str]:
    """Every link but those of tray ``spare`` (where the scans start), each named by one
    end as the CLI takes it (the HCA end of a tray's link, the lower switch's end of a
    leaf-spine link), in a seeded random order."""
    names = []
    for a, b in cluster.fabric.links():
        if spare in (a.node.desc, b.node.desc) or any(
            n.desc.startswith(spare.split()[0] + " ") for n in (a.node, b.node)
        ):
            continue
        end = b if a.node.is_switch and not b.node.is_switch else a
        names.append(f"{end.node.name}[{end.num}]")
    random.Random(seed).shuffle(names)
    return names


def scan(env: dict, work: Path) -> Scan:
    t = time.perf_counter()
    r = subprocess.run(
        ["ibnetdiscover"], env=env, cwd=work, capture_output=True, text=True, timeout=900
    )
    return Scan(
        r.returncode, time.perf_counter() - t, len(_NODE.findall(r.stdout)), r.stderr[-300:]
    )


def storm(
    sock: Path,
    targets: list[str],
    rate: float,
    out: Storm,
    stop: threading.Event,
    count: int | None = None,
) -> None:
    """Flap ``targets`` in turn (down, then up), ``rate`` flaps a second, until ``stop``
    is set or ``count`` flaps are done."""
    t0 = time.perf_counter()
    try:
        for i in range(len(targets) * 100):
            if stop.is_set() or (count is not None and i >= count):
                break
            wait = t0 + i / rate - time.perf_counter()
            if wait > 0 and stop.wait(wait):
                break
            t = targets[i % len(targets)]
            for kind in ("down", "up"):
                a = time.perf_counter()
                admin.call(sock, {"op": "fault", "kind": kind, "target": t, "options": {}})
                out.rtts.append(time.perf_counter() - a)
            out.flaps += 1
    except Exception as e:  # reported, and the bench fails
        out.error = f"{type(e).__name__}: {e}"
    out.seconds += time.perf_counter() - t0


def closing_counts(log: Path) -> dict[str, int]:
    """The server's MAD counts from its closing line in its log."""
    found = _CLOSING.findall(log.read_text(errors="replace"))
    if not found:
        raise SystemExit(f"no closing line in {log}")
    keys = ("mads", "answered", "forwarded", "timed_out", "undeliverable", "malformed", "unsent")
    return dict(zip(keys, map(int, found[-1]), strict=True))


def _fabriclab(env: dict, *args: str) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "fabriclab.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if r.returncode != 0:
        raise SystemExit(f"fabriclab {args[0]} failed: {r.stderr.strip()}")


def _pct(xs: list[float], q: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))] if xs else 0.0


def _fault_cost(sock: Path) -> dict:
    """The server's own time for the recent ``fault`` requests (admin op ``stats``)."""
    got = admin.call(sock, {"op": "stats"}).get("requests", [])
    return next((c for c in got if c["op"] == "fault"), {})


def run(rounds: int, rate: float, faults: int, seed: int) -> bool:
    work = Path(tempfile.mkdtemp(prefix="fl-storm-"))
    spec, cluster = bench_fabric(work)
    fabric = cluster.fabric
    want = len(fabric.switches()) + len(fabric.cas())
    start, _ = find_port(cluster, None)
    host = start.node.desc
    print(
        f"fabric: {len(cluster.trays)} trays, {len(fabric.cas())} HCAs, "
        f"{len(fabric.switches())} switches, {fabric.link_count()} links"
    )
    name = f"flstorm{os.getpid()}"
    state = work / "state"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IBSIM_", "SIM_"))}
    env.pop("LD_PRELOAD", None)
    env["FABRICLAB_STATE_DIR"] = str(state)
    targets = flap_targets(cluster, seed, host)
    _fabriclab(env, "up", str(spec), "--name", name, "--detach")
    sock = admin.admin_path(state, name)
    ok = True
    try:
        tenv = {**env, **_tool_env(name, host, work)}
        t = time.perf_counter()
        r = subprocess.run(
            ["opensm", "-o", "-e", "-f", str(work / "opensm.log")],
            env=tenv,
            cwd=work,
            capture_output=True,
            timeout=900,
        )
        sm_s = time.perf_counter() - t
        if r.returncode != 0 or "SUBNET UP" not in (work / "opensm.log").read_text(
            errors="replace"
        ):
            raise SystemExit("OpenSM did not bring the subnet up")
        print(f"opensm -o, start to SUBNET UP            {sm_s:7.2f} s")
        first = scan(tenv, work)  # every port has counters from now on
        ok &= first.rc == 0 and first.nodes == want
        # what a fault request costs the loop, nothing else running
        cost = Storm()
        storm(sock, targets, rate, cost, threading.Event(), count=faults)
        fc = _fault_cost(sock)
        ok &= not cost.error
        print(
            f"fault request, the server's loop: median {fc.get('median', 0) * 1e3:.2f} ms "
            f"(goal <= 1 ms), max {fc.get('max', 0) * 1e3:.2f} ms   [{2 * cost.flaps} "
            f"requests; admin round trip median {statistics.median(cost.rtts) * 1e3:.2f} ms]"
        )
        quiet: list[Scan] = []
        during: list[Scan] = []
        out = Storm()
        for _ in range(rounds):  # alternating: a scan alone, then one under the storm
            quiet.append(scan(tenv, work))
            stop = threading.Event()
            th = threading.Thread(target=storm, args=(sock, targets, rate, out, stop))
            th.start()
            during.append(scan(tenv, work))
            stop.set()
            th.join()
            if out.error:
                break
        fc = _fault_cost(sock)
        if out.error:
            print(f"storm failed after {out.flaps} flaps: {out.error}")
            ok = False
        bad = [s for s in quiet + during if s.rc != 0]
        ok &= not bad and all(s.nodes == want for s in quiet)
        q = statistics.median(s.seconds for s in quiet)
        d = statistics.median(s.seconds for s in during)
        print(
            f"ibnetdiscover, no storm                  {q:7.2f} s"
            f"   [{len(quiet)} scans, median; exit {sorted({s.rc for s in quiet})}, "
            f"nodes {sorted({s.nodes for s in quiet})} of {want}]"
        )
        print(
            f"ibnetdiscover, during the storm          {d:7.2f} s"
            f"   [{len(during)} scans, median; exit {sorted({s.rc for s in during})}, "
            f"nodes {min(s.nodes for s in during)}..{max(s.nodes for s in during)} of {want}]"
        )
        for s in bad:
            print(f"  a scan failed ({s.rc}): {s.stderr.strip()}")
        flaps_s = out.flaps / out.seconds if out.seconds else 0.0
        print(
            f"storm: {out.flaps} links down and up in {out.seconds:.2f} s: {flaps_s:.1f} "
            f"flaps/s (asked {rate:g})"
        )
        print(f"during / without a storm: ratio {d / q:.2f} (goal <= 1.5)")
        print(
            f"fault request under the storm, the server's loop: median "
            f"{fc.get('median', 0) * 1e3:.2f} ms, max {fc.get('max', 0) * 1e3:.2f} ms; "
            f"admin round trip median {statistics.median(out.rtts) * 1e3:.1f} ms, "
            f"p99 {_pct(out.rtts, 0.99) * 1e3:.1f} ms"
        )
        print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    finally:
        _fabriclab(env, "down", "--name", name)
    st = closing_counts(state / f"{name}.log")
    lost = st["mads"] - sum(
        st[k] for k in ("answered", "forwarded", "timed_out", "undeliverable", "malformed")
    )
    ok &= lost == 0 and st["undeliverable"] == st["unsent"] == st["malformed"] == 0
    print(
        f"server: {st['mads']} MADs received, {st['answered']} answered, "
        f"{st['timed_out']} timed out (sent back: routed into a link that was down), "
        f"{st['forwarded']} forwarded, {st['undeliverable']} undeliverable, "
        f"{st['malformed']} malformed, {st['unsent']} not sent; unaccounted for: {lost}"
    )
    print("storm: " + ("every scan completed, every MAD answered" if ok else "FAILED"))
    shutil.rmtree(work, ignore_errors=True)
    return ok


def _tool_env(name: str, host: str, work: Path) -> dict:
    return {
        "LD_PRELOAD": tools.umad2sim_path(),
        "SIM_HOST": host,
        "IBSIM_SOCKNAME": name,
        "OSM_CACHE_DIR": str(work),
        "OSM_TMP_DIR": str(work),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3, help="scans alone and under the storm")
    ap.add_argument("--rate", type=float, default=40.0, help="flaps a second")
    ap.add_argument("--faults", type=int, default=200, help="flaps timed alone")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="one round, 50 flaps timed alone")
    a = ap.parse_args()
    if a.quick:
        a.rounds, a.faults = 1, 50
    for tool in ("opensm", "ibnetdiscover"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} not found: run scripts/install-system-deps.sh")
    if not run(a.rounds, a.rate, a.faults, a.seed):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
