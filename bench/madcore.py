"""The fabric server's CPU per MAD with the native MAD core and with the Python core
(``FABRICLAB_MAD_CORE=python``), beside the Debian ibsim's, on bench/server.py's fabric
of 2,048 HCAs, in one run.

Each server is started, configured by a real OpenSM (``opensm -o``), then a real
``ibnetdiscover`` runs several times; the server's CPU time (the scheduler's count,
/proc/PID/task/*/schedstat) over the discoveries is divided by the MADs they sent (fabriclab's count, from
its admin op ``stats``; ibsim is sent the same discoveries).  Rounds alternate between
the servers; figures are medians.  ``--profile CORE`` also runs that core under
cProfile and prints where the server's time goes.

    python bench/madcore.py [--rounds 3] [--discoveries 3] [--profile python|native]
"""

from __future__ import annotations

import argparse
import os
import pstats
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from replay import cpu_seconds
from server import Fabriclab, Ibsim, _opensm, _timed, _tool_env, bench_fabric

from fabriclab.formats import ibsim_net
from fabriclab.model.cluster import find_port
from fabriclab.sim.run.admin import admin_path, call

_cpu = cpu_seconds  # the scheduler's count (schedstat), as bench/replay.py's


class Core(Fabriclab):
    """fabriclab with the MAD core ``core``, optionally under cProfile."""

    def __init__(self, spec: str, work: Path, core: str, profile: Path | None = None):
        super().__init__(spec, work)
        self.core, self.profile = core, profile
        self.label = f"fabriclab {core}"

    def argv(self, name: str) -> list[str]:
        argv = super().argv(name)
        if self.profile is not None:
            return [sys.executable, "-m", "cProfile", "-o", str(self.profile), *argv[1:]]
        return argv

    def env(self, name: str) -> dict:
        return {**super().env(name), "FABRICLAB_MAD_CORE": self.core}

    def mads(self, name: str) -> int:
        return call(admin_path(self.work, name), {"op": "stats"})["mads"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--discoveries", type=int, default=3)
    ap.add_argument(
        "--profile", choices=("python", "native"), help="then profile this core (cProfile)"
    )
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="fl-madcore-"))
    spec_file, cluster = bench_fabric(work)
    net = work / "bench-2k.net"
    net.write_text(ibsim_net.render(cluster.fabric))
    host = find_port(cluster, None)[0].node.desc
    ibsim = Ibsim(net, ibsim_net.limits(cluster.fabric).args())
    py, nat = Core(str(spec_file), work, "python"), Core(str(spec_file), work, "native")
    servers = [py, nat, ibsim]
    per_mad: dict[str, list[float]] = {s.label: [] for s in servers}
    wall: dict[str, list[float]] = {s.label: [] for s in servers}
    last_mads = 0
    for r in range(a.rounds):
        for i, s in enumerate(servers):
            name = f"flmadcore{os.getpid()}x{i}x{r}"
            s.start(name)
            try:
                _opensm(name, host, work)
                before = s.mads(name) if isinstance(s, Core) else 0  # ibsim counts none
                cpu = _cpu(s.proc.pid)
                for _ in range(a.discoveries):
                    wall[s.label].append(
                        _timed(["ibnetdiscover"], _tool_env(name, host, work), work)
                    )
                cpu = _cpu(s.proc.pid) - cpu
                if isinstance(s, Core):
                    last_mads = s.mads(name) - before
                if last_mads:
                    per_mad[s.label].append(cpu / last_mads * 1e6)
            finally:
                s.stop()
    base = statistics.median(per_mad[ibsim.label]) if per_mad[ibsim.label] else 0.0
    print(f"{last_mads} MADs per {a.discoveries} discoveries of the 2,048-HCA fabric")
    for s in servers:
        if not per_mad[s.label]:
            continue
        us = statistics.median(per_mad[s.label])
        ratio = f"ratio {us / base:4.2f} (goal <= 1.0)" if base and s is not ibsim else ""
        print(
            f"CPU per MAD  {s.label:18s} {us:6.2f} us   ibnetdiscover "
            f"{statistics.median(wall[s.label]):5.2f} s   {ratio}"
        )
    if a.profile:
        prof = work / "core.prof"
        ps = Core(str(spec_file), work, a.profile, prof)
        name = f"flmadcore{os.getpid()}prof"
        ps.start(name)
        try:
            _opensm(name, host, work)
            for _ in range(a.discoveries):
                _timed(["ibnetdiscover"], _tool_env(name, host, work), work)
        finally:
            ps.stop()
        pstats.Stats(str(prof)).sort_stats("tottime").print_stats(25)
    ibsim.close()
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
