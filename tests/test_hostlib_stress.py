"""The host library under load while its server dies: OpenSM and seven real tools
(ibnetdiscover, perfquery, ibstat, smpquery, saquery, iblinkinfo, ibroute) run over and
over from threads, with two processes of a C probe whose threads open, register, write,
read and close umad devices, while the fabric server is killed (SIGKILL) and brought
back ('fabriclab up --resume').  Every process ends within its deadline, none dies of a
signal or leaves a sanitizer report, and each ends with a result or a clear error line;
after the restart every tool but saquery (whose SM's devices went with the old server)
has results again.  Run plain and with the AddressSanitizer build
(tests/hostlib_build.py)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest
from fabric_server import fabric_up
from helpers import wait_for
from hostlib_build import AsanLibrary, asan_build, build_probe

from fabriclab.sim.run import tools

pytestmark = pytest.mark.realtools

TRAY, OTHER = "sched-worker1", "sched-worker2"
DEADLINE = 30  # seconds any one tool run may take (its MAD timeouts are far shorter)
BEFORE, GONE, AFTER = 2.5, 2.0, 2.5  # seconds of load: served, server dead, served again

# Threads that each, until SIGTERM, open /dev/infiniband/umad<N>, register an
# SMA agent (the umad ioctl), write a directed-route NodeInfo Get to the port itself,
# poll and read its answer, and close; a line of counts at the end.  The layouts are the
# kernel's (include/uapi/rdma/ib_user_mad.h) and the IBA's SMP (vol. 1, 14.2.1.2).
_PROBE = r"""
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/ib_user_mad.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

static long ok, failed, last_ok = -1;
static volatile sig_atomic_t done;
static struct timespec t0;

static void finish(int sig)
{
    (void)sig;
    done = 1;
}

static long now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000;
}

static int once(int index, uint32_t tid)
{
    char path[64];
    snprintf(path, sizeof path, "/dev/infiniband/umad%d", index);
    int fd = open(path, O_RDWR), r = -1;
    if (fd < 0)
        return -1;
    struct ib_user_mad_reg_req req;
    memset(&req, 0, sizeof req);
    req.mgmt_class = 0x81; /* directed-route SMP, QP0 */
    req.mgmt_class_version = 1;
    if (ioctl(fd, IB_USER_MAD_REGISTER_AGENT, &req) == 0) {
        uint8_t out[64 + 256], in[64 + 256];
        memset(out, 0, sizeof out);
        struct ib_user_mad_hdr *h = (struct ib_user_mad_hdr *)out;
        h->id = req.id;
        h->timeout_ms = 400;
        h->retries = 1;
        h->lid = htons(0xffff);
        uint8_t *mad = out + 64;
        mad[0] = 1, mad[1] = 0x81, mad[2] = 1, mad[3] = 0x01; /* SubnGet */
        memcpy(mad + 12, &tid, 4);
        mad[16] = 0x00, mad[17] = 0x11;                  /* NodeInfo */
        mad[32] = mad[33] = mad[34] = mad[35] = 0xff;    /* DrSLID, DrDLID permissive */
        if (write(fd, out, sizeof out) == (ssize_t)sizeof out) {
            struct pollfd p = {fd, POLLIN, 0};
            if (poll(&p, 1, 3000) == 1 && (p.revents & POLLIN)) {
                ssize_t n = read(fd, in, sizeof in);
                struct ib_user_mad_hdr *ih = (struct ib_user_mad_hdr *)in;
                if (n >= 64 + 24 && ih->status == 0 && in[64 + 3] == 0x81)
                    r = 0; /* SubnGetResp */
            }
        }
    }
    close(fd);
    return r;
}

static void *worker(void *arg)
{
    long k = (long)arg;
    for (uint32_t i = 0; !done; i++) {
        if (once((int)((k + i) % 4), (uint32_t)(k << 24 | i)) == 0) {
            __atomic_add_fetch(&ok, 1, __ATOMIC_RELAXED);
            __atomic_store_n(&last_ok, now_ms(), __ATOMIC_RELAXED);
        } else {
            __atomic_add_fetch(&failed, 1, __ATOMIC_RELAXED);
            usleep(20000);
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 4;
    pthread_t t[16];
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (threads < 1 || threads > 16)
        return 2;
    signal(SIGTERM, finish);
    for (long k = 0; k < threads; k++)
        pthread_create(&t[k], NULL, worker, (void *)k);
    for (long k = 0; k < threads; k++)
        pthread_join(t[k], NULL);
    printf("ok %ld failed %ld last_ok_ms %ld\n", ok, failed, last_ok);
    return 0;
}
"""

# A clear error: the library's one line, or the tool's own (infiniband-diags' iberror
# and ibwarn, libibumad's and OpenSM's messages name what failed).
_CLEAR = re.compile(
    r"^(fabriclab: |ibwarn: |iberror: |ibpanic: |.*\b[Ff]ailed\b|.*: (can't|cannot) )"
)


class Outcome:
    """What the tools' runs ended with, by tool and phase; the first bad run."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: dict[tuple[str, str], list[str]] = defaultdict(list)  # -> "ok"/"error"
        self.bad: list[str] = []

    def add(self, tool: str, phase: str, kind: str, what: str = "") -> None:
        with self.lock:
            self.seen[tool, phase].append(kind)
            if kind == "bad":
                self.bad.append(what)


def _tool_double_free(code: int, stderr: str, report: str) -> bool:
    """rdma-core's libibnetdisc, when a read fails in the middle of a discovery (as it
    does when the device goes away: the kernel's read is EIO then, the library's
    ENOTCONN after its line), frees memory twice on its way out
    (libibnetdisc/ibnetdisc.c: ibnd_discover_fabric's error path, ibnd_destroy_fabric
    after smp_engine_destroy): glibc, or ASan, aborts ibnetdiscover and iblinkinfo.
    The tool's own defect, after the library's clear line; recognised narrowly (the
    library's line, libibnetdisc's, and an ASan report naming no frame of the library)."""
    return (
        code == -signal.SIGABRT
        and "went away" in stderr
        and "umad_recv failed" in stderr
        and (
            not report
            or (
                "attempting double-free" in report
                and "in ibnd_discover_fabric" in report
                and "/hostlib/" not in report
            )
        )
    )


def _judge(name: str, code: int, stdout: str, stderr: str, report: str) -> tuple[str, str]:
    """("ok" | "error" | "tool-bug" | "bad", why) for one run of a tool; ``report``: the
    sanitizer's report of its process, if any."""
    if _tool_double_free(code, stderr, report):
        return "tool-bug", ""
    if code < 0:
        return "bad", f"{name} died of signal {-code}:\n{stderr[-2000:]}\n{report}"
    if report or "runtime error:" in stderr or "Sanitizer" in stderr:
        return "bad", f"{name}: a sanitizer's report:\n{stderr[-3000:]}\n{report}"
    if code == 0 and stdout.strip():
        return "ok", ""
    # an error, or no result (ibstat lists no device when the server is not there)
    if any(_CLEAR.match(line) for line in stderr.splitlines()):
        return "error", ""
    return "bad", f"{name} exited {code} with no result and no clear error:\n{stderr}"


def _threads(pid: int) -> str:
    """Each thread of ``pid``: its name, state, where it waits in the kernel and the
    system call it is in (proc(5)), one line each."""
    lines = []
    for task in sorted(Path(f"/proc/{pid}/task").glob("*")):
        try:
            name = (task / "comm").read_text().strip()
            state = (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
            wchan = (task / "wchan").read_text().strip()
            syscall = (task / "syscall").read_text().split()[0]
        except OSError:
            continue
        lines.append(f"{task.name} {name} {state} {wchan} syscall {syscall}")
    if shutil.which("gdb"):  # and where in user space, when gdb is there
        try:
            r = subprocess.run(
                ["gdb", "-p", str(pid), "-batch", "-ex", "thread apply all bt"],
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            lines += [x for x in r.stdout.splitlines() if x.startswith(("Thread", "#"))]
        except subprocess.TimeoutExpired:
            pass
    return "\n".join(lines)


@pytest.fixture(scope="module")
def asan_library(tmp_path_factory) -> AsanLibrary:
    return asan_build(tmp_path_factory)


class _OpenSM:
    """The real OpenSM through the library on a tray's HCA, its log and stderr in
    ``where``; ``stop`` holds it to a deadline and says how it ended."""

    def __init__(self, env: dict[str, str], guid: int, where: Path, tag: str):
        self.log = where / f"opensm-{tag}.log"
        conf = where / "opensm.conf"
        conf.write_text("force_log_flush TRUE\n")  # else SUBNET UP waits in its buffer
        self.err_path = where / f"opensm-{tag}.stderr"
        env = {**env, "OSM_CACHE_DIR": str(where), "OSM_TMP_DIR": str(where)}
        with self.err_path.open("w") as err:
            self.proc = subprocess.Popen(
                ["opensm", "-F", str(conf), "-g", f"0x{guid:016x}", "-e", "-f", str(self.log)],
                env=env, cwd=where, stdout=subprocess.DEVNULL, stderr=err,
            )  # fmt: skip

    def wait_up(self) -> None:
        def up() -> bool:
            assert self.proc.poll() is None, (
                f"opensm exited {self.proc.returncode}: {self.err_path.read_text()[-2000:]}\n"
                f"{self.log.read_text(errors='replace')[-3000:] if self.log.exists() else ''}"
            )
            return self.log.exists() and "SUBNET UP" in self.log.read_text(errors="replace")

        wait_for(up, 90, "OpenSM logging SUBNET UP", interval=0.2)

    def stop(self, deadline: float = 10) -> str:
        """SIGTERM, then ``deadline`` seconds: "" when it ended by itself (0, or the
        signal's own death), else what went wrong."""
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(deadline)
        except subprocess.TimeoutExpired:
            threads = _threads(self.proc.pid)
            self.proc.kill()
            self.proc.wait()
            return f"OpenSM did not end within {deadline:g} s of SIGTERM; its threads:\n{threads}"
        if self.proc.returncode in (0, -signal.SIGTERM):
            return ""
        return f"OpenSM ended {self.proc.returncode}:\n{self.err_path.read_text()[-3000:]}"


@pytest.mark.parametrize("build", ["plain", "asan"])
def test_tools_and_opensm_survive_the_server_killed_and_restarted(
    real_tools, build, request, tmp_path
):
    asan: AsanLibrary | None = request.getfixturevalue("asan_library") if build == "asan" else None
    if asan:
        asan.clear()
    probe = build_probe(_PROBE, tmp_path / "umad_threads")
    with fabric_up("lab", tmp_path / "lab") as f:
        inst = f.instance()

        def env(tray: str) -> dict[str, str]:
            e = tools.host_env(inst, tray, base=f.env)
            return asan.env(e) if asan else e

        fabric = f.cluster.fabric
        leaf = min(n.lid for n in fabric.nodes if n.is_switch)
        hca = f.cluster.tray(TRAY).hcas[2].ports[1]
        target = f.cluster.tray(OTHER).hcas[1].ports[1].lid
        work = {
            "ibnetdiscover": (OTHER, ["ibnetdiscover", "-C", "mlx5_1"]),
            "perfquery": (OTHER, ["perfquery", "-C", "mlx5_0"]),
            "ibstat": (TRAY, ["ibstat"]),
            "smpquery": (TRAY, ["smpquery", "-C", "mlx5_3", "nodeinfo", str(target)]),
            "saquery": (OTHER, ["saquery", "-C", "mlx5_2"]),
            "iblinkinfo": (TRAY, ["iblinkinfo", "-C", "mlx5_0"]),
            "ibroute": (OTHER, ["ibroute", "-C", "mlx5_3", str(leaf)]),
        }
        sms = [_OpenSM(env(TRAY), hca.guid, tmp_path, "first")]
        probes: list[subprocess.Popen] = []
        phase = ["before"]
        stop = threading.Event()
        out = Outcome()

        def loop(tool: str, tray: str, argv: list[str]) -> None:
            name = " ".join(argv)
            while not stop.is_set():
                now = phase[0]
                p = subprocess.Popen(
                    argv, env=env(tray), cwd=tmp_path, stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                )  # fmt: skip
                try:
                    stdout, stderr = p.communicate(timeout=DEADLINE)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.communicate()
                    out.add(tool, now, "bad", f"{name} hung past {DEADLINE} s")
                    continue
                report = ""
                if asan:  # its report, taken out of the directory
                    for file in asan.reports.glob(f"*san.{p.pid}"):
                        report += file.read_text(errors="replace")
                        file.unlink()
                kind, why = _judge(name, p.returncode, stdout, stderr, report)
                out.add(tool, now if now == phase[0] else "across", kind, why)
                if kind != "ok":
                    stop.wait(0.1)  # an error comes back at once: not a busy loop

        threads = [
            threading.Thread(target=loop, args=(tool, tray, argv), daemon=True)
            for tool, (tray, argv) in work.items()
        ]
        try:
            sms[0].wait_up()
            started = time.monotonic()  # before the probes' own clocks start
            for tray in (TRAY, OTHER):
                probes.append(
                    subprocess.Popen(
                        [str(probe), "4"],
                        env=env(tray),
                        cwd=tmp_path,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE,
                        text=True,
                    )
                )
            for t in threads:
                t.start()
            time.sleep(BEFORE)  # load while served
            phase[0] = "gone"
            os.kill(inst.pid, signal.SIGKILL)
            wait_for(lambda: f.fabriclab("status").stdout.count(f.name) == 0, 10, "the fabric gone")
            time.sleep(GONE)  # load with no server
            # OpenSM's devices went with the server (as a kernel's do with its HCA): it
            # must end when told without a crash, and a new one takes over after the
            # restart
            stopped = sms[0].stop()
            r = f.fabriclab("up", "lab", "--name", f.name, "--detach", "--resume", timeout=60)
            assert r.returncode == 0, r.stderr
            restarted = time.monotonic()
            sms.append(_OpenSM(env(TRAY), hca.guid, tmp_path, "second"))
            sms[1].wait_up()
            phase[0] = "after"
            time.sleep(AFTER)  # load served again
            stop.set()
            for t in threads:
                t.join(DEADLINE + 5)
                assert not t.is_alive(), "a tool's loop did not end"
            for p in probes:
                p.terminate()  # the probe's threads finish their round and it reports
            for p in probes:
                try:
                    stdout, stderr = p.communicate(timeout=DEADLINE)
                except subprocess.TimeoutExpired:
                    raise AssertionError("the umad probe hung past its deadline") from None
                assert p.returncode == 0, f"the probe exited {p.returncode}:\n{stderr[-3000:]}"
                m = re.fullmatch(r"ok (\d+) failed (\d+) last_ok_ms (-?\d+)\n", stdout)
                assert m, (stdout, stderr[-3000:])
                ok, _failed, last_ok = map(int, m.groups())
                # served again after the restart (it started before the load did)
                assert ok > 0 and last_ok / 1000 > restarted - started, (stdout, stderr)
                assert all(_CLEAR.match(x) for x in stderr.splitlines() if x.strip()), stderr
        finally:
            stop.set()
            for p in probes:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            ended = [sm.stop() for sm in sms]
        # the first, after its server was killed: ended when told, no crash, no hang
        assert stopped == "", stopped
        assert ended[-1] == "", ended[-1]
    assert out.bad == [], "\n\n".join(out.bad[:5])
    for tool in work:
        assert "ok" in out.seen[tool, "before"], (tool, dict(out.seen))
        assert "ok" in out.seen[tool, "after"], (tool, dict(out.seen))
    if asan:
        assert asan.found() == "", asan.found()


def _cpu_seconds(pid: int) -> float:
    """The CPU time ``pid`` has used, user and system (proc(5): stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.parametrize("build", ["plain", "asan"])
def test_opensm_neither_spins_nor_hangs_after_its_server_is_killed(
    real_tools, build, request, tmp_path
):
    """OpenSM whose fabric server is killed: its umad receiver (umad_recv with no
    timeout, "ERR 5404" on each failed read) is told at once, then woken at most once a
    DEAD_PACE_MS (the library's pace for a failed device), so its log gains a few lines a
    second and its CPU stays low; SIGTERM ends it within 15 s."""
    asan: AsanLibrary | None = request.getfixturevalue("asan_library") if build == "asan" else None
    if asan:
        asan.clear()
    with fabric_up("lab", tmp_path / "lab") as f:
        inst = f.instance()
        hca = f.cluster.tray(TRAY).hcas[2].ports[1]
        env = tools.host_env(inst, TRAY, base=f.env)
        sm = _OpenSM(asan.env(env) if asan else env, hca.guid, tmp_path, "only")

        def errors() -> int:
            return sm.log.read_text(errors="replace").count("ERR 5404")

        try:
            sm.wait_up()
            os.kill(inst.pid, signal.SIGKILL)
            wait_for(lambda: "went away" in sm.err_path.read_text(), 10, "OpenSM told")
            wait_for(errors, 10, "OpenSM's receiver told")  # the first failure, at once
            t0, cpu0, errs0 = time.monotonic(), _cpu_seconds(sm.proc.pid), errors()
            time.sleep(3)  # what it does meanwhile is the test (spinning: ~300,000 lines/s)
            took, cpu = time.monotonic() - t0, _cpu_seconds(sm.proc.pid) - cpu0
            errs = errors() - errs0
        finally:
            stopped = sm.stop()
        assert errs <= 2 * took + 2, f"OpenSM logged ERR 5404 {errs} times in {took:.1f} s"
        assert cpu < 0.25 * took, f"OpenSM used {cpu:.2f} s of CPU in {took:.1f} s"
        assert stopped == "", stopped
    if asan:
        assert asan.found() == "", asan.found()
