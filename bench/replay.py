"""Server CPU per MAD: a recorded MAD stream replayed through fabriclab (each MAD core)
and through the Debian ibsim, on the same fabric, in one run.

The fabric is bench/server.py's ``BENCH_SPEC`` (2,048 HCAs, 96 switches).  The stream is
recorded at bench time (bench/madstreams.py, ``FABRICLAB_MAD_RECORD``, the Python core):
the real ``opensm -o`` from start to SUBNET UP, then the real ``ibnetdiscover``; with
``--quick``, ibnetdiscover alone.  Each server is then started fresh and the stream
replayed through it one datagram at a time (:mod:`fabriclab.sim.run.replay`: the same
clients attach, the same datagrams in the same order); the figure is the server
process's CPU time (user + system, /proc/PID/stat) over the replay divided by the MADs
sent (the scheduler's own count of the time its threads ran: /proc/PID/task/*/schedstat).  ibsim serves fabriclab's net file of the same fabric (the same GUIDs and cabling),
so it is asked the same questions.  Rounds alternate between the servers; figures are
medians.

    python bench/replay.py [--rounds 3] [--quick]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from madstreams import record_stream
from server import Fabriclab, Ibsim, _ibsims, bench_fabric

from fabriclab.formats import ibsim_net
from fabriclab.sim.run import admin, replay
from fabriclab.sim.wire import native, record

_TICK = os.sysconf("SC_CLK_TCK")
GOAL = 1.0  # native / ibsim


def cpu_seconds(pid: int) -> float:
    """CPU seconds process ``pid`` (all its threads) has run so far, as the scheduler
    counts them: the first field of each thread's /proc/PID/task/TID/schedstat (time on
    a CPU, in nanoseconds; proc(5)).  /proc/PID/stat's utime and stime are sampled at
    each clock tick (10 ms), an estimate for a server that runs in bursts of 20 µs;
    schedstat is exact.  Without it (a kernel built without CONFIG_SCHED_INFO), the
    sampled figure."""
    try:
        return (
            sum(
                int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
                for tid in os.listdir(f"/proc/{pid}/task")
            )
            / 1e9
        )
    except (OSError, ValueError, IndexError):
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICK


class Core(Fabriclab):
    """``fabriclab up`` serving through MAD core ``core`` (FABRICLAB_MAD_CORE)."""

    def __init__(self, spec: str, work: Path, core: str, spin: int | None = None):
        super().__init__(spec, work)
        self.core, self.spin = core, spin
        self.label = f"fabriclab-{core}" + ("" if spin is None else f"-spin{spin}")

    def start(self, name: str, timeout: float = 120) -> None:
        super().start(name, timeout)
        # answered once the server's loop runs: its start-up is not the replay's
        path = admin.admin_path(self.work, name)
        deadline = time.monotonic() + timeout
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        admin.call(path, {"op": "stats"}, timeout)

    def env(self, name: str) -> dict:
        env = super().env(name)
        env.pop(record.ENV, None)
        env = {**env, "FABRICLAB_MAD_CORE": self.core}
        if self.spin is not None:
            env[native.SPIN_ENV] = str(self.spin)
        return env


def settle(pid: int, quiet: float = 0.3, limit: float = 30.0) -> None:
    """Wait (at most ``limit`` seconds) until process ``pid`` has used no CPU for
    ``quiet`` seconds: what a server does as it starts (fabriclab encodes its ports'
    answers ahead in its first idle moments) is not the replay's."""
    end = time.monotonic() + limit
    last = cpu_seconds(pid)
    while time.monotonic() < end:
        time.sleep(quiet)
        now = cpu_seconds(pid)
        if now == last:
            return
        last = now


def measure(server, name: str, records: list[record.Record], wait: float) -> tuple:
    """Replay ``records`` through a fresh ``server``: (CPU seconds per MAD, outcome)."""
    server.start(name)
    try:
        settle(server.proc.pid)
        before = cpu_seconds(server.proc.pid)
        out = replay.Replay(name, wait=wait).run(records)
        used = cpu_seconds(server.proc.pid) - before
    finally:
        server.stop()
    return used / max(1, out.mads), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="ibnetdiscover's stream alone, 1 round")
    a = ap.parse_args()
    for tool in ("ibsim", "opensm", "ibnetdiscover"):
        if shutil.which(tool) is None:
            raise SystemExit(
                f"error: bench/replay.py: {tool} not found: run scripts/install-system-deps.sh"
            )
    rounds = 1 if a.quick else a.rounds
    work = Path(tempfile.mkdtemp(prefix="fl-replay-"))
    try:
        spec_file, cluster = bench_fabric(work)
        fabric = cluster.fabric
        net = work / "bench-2k.net"
        net.write_text(ibsim_net.render(fabric))
        kind = "ibnetdiscover" if a.quick else "opensm"
        stream = record_stream(
            kind, str(spec_file), work / f"{kind}.madrec.gz", {"FABRICLAB_MAD_CORE": "python"}
        )
        records = list(record.read(stream))
        mads = sum(1 for r in records if r.kind == record.MAD_IN)
        print(
            f"fabric: {len(fabric.cas())} HCAs, {len(fabric.switches())} switches; stream: "
            f"{kind}, {mads} MADs, {stream.stat().st_size} bytes recorded"
        )
        ibsims = _ibsims(net, ibsim_net.limits(fabric).args())
        servers: list = [
            Core(str(spec_file), work, "native"),
            Core(str(spec_file), work, "native", spin=0),
            Core(str(spec_file), work, "python"),
        ]
        servers += ibsims
        cpu: dict[str, list[float]] = {s.label: [] for s in servers}
        outs: dict[str, replay.Outcome] = {}
        for r in range(rounds):
            for i, s in enumerate(servers):
                wait = 0.2 if isinstance(s, Ibsim) else 5.0  # ibsim leaves some unanswered
                per, out = measure(s, f"flreplay{os.getpid()}x{i}x{r}", records, wait)
                cpu[s.label].append(per)
                outs[s.label] = out
        ref = outs["fabriclab-python"].received()
        for s in servers:
            got = outs[s.label].received()
            same = sum(1 for x, y in zip(got, ref, strict=False) if x == y)
            print(
                f"  {s.label:23s} {statistics.median(cpu[s.label]) * 1e6:7.1f} µs/MAD   "
                f"{outs[s.label].mads} MADs, {len(got)} answers ({same} byte-identical to "
                f"fabriclab-python's), {outs[s.label].missing} missing   [{rounds} rounds, median]"
            )
        polled = statistics.median(cpu["fabriclab-native"])
        asleep = statistics.median(cpu["fabriclab-native-spin0"])
        python = statistics.median(cpu["fabriclab-python"])
        for sim in ibsims:
            z = statistics.median(cpu[sim.label])
            print(
                f"cpu/MAD fabriclab-native {polled * 1e6:.1f} µs (polling {native.SPIN_US} µs "
                f"before sleeping), {asleep * 1e6:.1f} µs (sleeping at once), python "
                f"{python * 1e6:.1f} µs, {sim.label} {z * 1e6:.1f} µs; ratio native/ibsim "
                f"{polled / z:.2f} polling, {asleep / z:.2f} sleeping at once (goal <= {GOAL})"
            )
        for sim in ibsims:
            sim.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
