"""fabriclab's own routes (``up --routed``) against the real OpenSM's, on the same spec.

For each spec, every switch's linear forwarding table is read with the real ``ibroute``
(through libumad2sim, at the first tray): once from ``fabriclab up SPEC --routed`` (no
SM ran), and once after the real OpenSM configured the fabric (``up --sm``, the same LID
plan) with each routing engine that matters for a fat tree: its default (minhop), updn
and ftree.  Printed for each engine, against fabriclab's tables:

- the LFT entries that differ (of those either routes);
- whether the paths are as long: every switch to every CA's LID, walked over the tables
  and the cabling; the pairs whose hop counts differ, and the longest path;
- the load balance: how many CA LIDs each inter-switch port carries (max over ports, and
  the spread, max - min, within each switch's ports towards the same tier), for both.

    python bench/routes.py [--quick] [--spec SPEC ...] [--engines minhop,updn,ftree]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from fabriclab.model.build import build
from fabriclab.model.cluster import Cluster, find_port
from fabriclab.sim.run import tools
from fabriclab.spec.load import load_spec

ROOT = Path(__file__).resolve().parent.parent
SPECS = [str(ROOT / "tests/specs/three-tier-hdr.yaml"), "gb200-su"]
QUICK = [str(ROOT / "tests/specs/three-tier-hdr.yaml")]
SWITCH = 2
_LINE = re.compile(r"^0x([0-9a-f]{4}) (\d{3}) :", re.MULTILINE)


def _fl(work: Path, *args: str, timeout: float = 900) -> None:
    env = {**os.environ, "FABRICLAB_STATE_DIR": str(work / "state")}
    r = subprocess.run(
        [sys.executable, "-m", "fabriclab.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if r.returncode != 0:
        raise SystemExit(f"fabriclab {' '.join(args)} failed: {r.stderr[-800:]}")


def tables(cluster: Cluster, spec: str, work: Path, name: str, up: list[str]) -> dict:
    """Every switch's LFT as ibroute reads it: {switch LID: {LID: port}}."""
    start, _ = find_port(cluster, None)
    _fl(work, "up", spec, "--name", name, "--detach", *up)
    try:
        env = dict(os.environ)
        env.update(LD_PRELOAD=tools.umad2sim_path(), SIM_HOST=start.node.desc, IBSIM_SOCKNAME=name)
        out = {}
        for sw in cluster.fabric.switches():
            r = subprocess.run(
                ["ibroute", str(sw.lid)], env=env, capture_output=True, text=True, timeout=120
            )
            if r.returncode != 0:
                raise SystemExit(f"ibroute {sw.lid} failed: {r.stderr[-400:]}")
            out[sw.lid] = {int(m[1], 16): int(m[2]) for m in _LINE.finditer(r.stdout)}
        return out
    finally:
        _fl(work, "down", "--name", name, timeout=120)


def walk(cluster: Cluster, lfts: dict) -> dict[tuple[int, int], int]:
    """Hops from every switch to every CA LID over ``lfts`` (-1: not reached)."""
    by_lid = {sw.lid: sw for sw in cluster.fabric.switches()}
    cas = [p for n in cluster.fabric.cas() for p in n.iter_ports() if p.peer is not None]
    hops = {}
    for lid0, sw0 in by_lid.items():
        for ca in cas:
            node, n = sw0, 0
            while n < 64:
                out = lfts[node.lid].get(ca.lid)
                port = node.ports[out] if out is not None and out < len(node.ports) else None
                if port is None or port.peer is None:
                    n = -1
                    break
                n += 1
                if port.peer.node.type != SWITCH:
                    n = n if port.peer is ca else -1
                    break
                node = port.peer.node
            hops[(lid0, ca.lid)] = n if n < 64 else -1
    return hops


def load(cluster: Cluster, lfts: dict) -> tuple[int, int]:
    """(the most CA LIDs on one inter-switch port, the largest spread between a
    switch's ports towards the same neighbour tier)."""
    ca_lids = {p.lid for n in cluster.fabric.cas() for p in n.iter_ports() if p.peer is not None}
    most = spread = 0
    for sw in cluster.fabric.switches():
        per = Counter(port for lid, port in lfts[sw.lid].items() if lid in ca_lids)
        groups: dict[int, list[int]] = {}
        for p in sw.iter_ports():
            if p.num and p.peer is not None and p.peer.node.type == SWITCH:
                groups.setdefault(p.peer.node.tier, []).append(per.get(p.num, 0))
        for counts in groups.values():
            most = max(most, max(counts))
            if sum(counts):
                spread = max(spread, max(counts) - min(counts))
    return most, spread


def compare(spec: str, trays: int | None, engines: list[str], work: Path) -> None:
    cluster = build(load_spec(spec, trays=trays))
    args = ["--trays", str(trays)] if trays else []
    label = Path(spec).stem + (f" x{trays} trays" if trays else "")
    print(f"{label}: {len(cluster.fabric.cas())} HCAs, {len(cluster.fabric.switches())} switches")
    name = f"flroutes{os.getpid()}"
    ours = tables(cluster, spec, work, name + "f", [*args, "--routed"])
    our_hops = walk(cluster, ours)
    most, spread = load(cluster, ours)
    unreached = sum(1 for h in our_hops.values() if h < 0)
    print(
        f"  fabriclab --routed : longest path {max(our_hops.values())} hops, {unreached} "
        f"unreached; most CA LIDs on one ISL port {most}, largest spread {spread}"
    )
    for eng in engines:
        theirs = tables(
            cluster, spec, work, f"{name}{eng}", [*args, "--sm", "--routing-engine", eng]
        )
        total = differ = 0
        for sw, t in theirs.items():
            o = ours[sw]
            keys = set(t) | set(o)
            total += len(keys)
            differ += sum(1 for k in keys if t.get(k) != o.get(k))
        hops = walk(cluster, theirs)
        longer = sum(1 for k, h in hops.items() if h != our_hops[k])
        most, spread = load(cluster, theirs)
        print(
            f"  OpenSM {eng:11s} : {differ} of {total} LFT entries differ "
            f"({100 * differ / max(total, 1):.1f} %); {longer} switch-to-LID paths of other "
            f"length, longest {max(hops.values())} hops; most CA LIDs on one ISL port {most}, "
            f"largest spread {spread}"
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="the small three-tier spec only")
    ap.add_argument("--spec", action="append", help="a spec or preset (repeatable)")
    ap.add_argument("--trays", type=int, default=64, help="trays for a preset (default 64)")
    ap.add_argument("--engines", default="minhop,updn,ftree")
    a = ap.parse_args()
    for tool in ("opensm", "ibroute"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} not found: run scripts/install-system-deps.sh")
    work = Path(tempfile.mkdtemp(prefix="fl-routes-"))
    try:
        for spec in a.spec or (QUICK if a.quick else SPECS):
            trays = None if spec.endswith((".yaml", ".yml")) else a.trays
            compare(spec, trays, a.engines.split(","), work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
