"""Helpers several test files share: running fabriclab and the real tools, waiting for a
condition, processes (stopping one, one that witnesses signals), free ports, the model's
own rendering, a command line in a Debian tree, and the topology API's server."""

from __future__ import annotations

import itertools
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import httpx

from fabriclab.formats import ibnetdiscover
from fabriclab.model.cluster import Cluster, find_port
from fabriclab.sim.wire.server import FabricServer

UMAD2SIM = "/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so"  # Debian's ibsim preload
_served = itertools.count()
T = TypeVar("T")


def wait_for(
    cond: Callable[[], T],
    timeout: float = 30.0,
    what: str | Callable[[], str] = "the condition",
    interval: float = 0.1,
) -> T:
    """Call ``cond`` until it returns something true, and return that.  After ``timeout``
    seconds, fail with an AssertionError naming ``what`` did not happen (``what`` may be a
    function, called then: a log's tail, say).  ``cond`` may itself raise to give up early
    (a process it waits on has died)."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            said = what() if callable(what) else what
            raise AssertionError(f"not within {timeout:g} s: {said}")
        time.sleep(interval)


def fl(
    *args: str,
    env: Mapping[str, str] | None = None,
    cwd: Path | str | None = None,
    input: str | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess:
    """The installed fabriclab run as a command (``python -m fabriclab.cli ARGS``), its
    output captured as text; ``env`` replaces the environment when given."""
    return subprocess.run(
        [sys.executable, "-m", "fabriclab.cli", *args],
        env=None if env is None else dict(env),
        cwd=cwd,
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def one_error(r: subprocess.CompletedProcess, *words: str) -> None:
    """``r`` failed as a user's mistake does: exit 2 and one line ``error: …`` holding
    each of ``words``."""
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2, r.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    for w in words:
        assert w in lines[0], r.stderr


def stop_process(proc: subprocess.Popen, timeout: float = 10) -> None:
    """Stop a process a test started: SIGTERM, ``timeout`` seconds to exit, then SIGKILL;
    reaped either way."""
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextmanager
def started(argv: list[str], log: Path, **popen) -> Iterator[subprocess.Popen]:
    """``argv`` running, its stdout and stderr in ``log``; stopped (:func:`stop_process`)
    when the block ends."""
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, **popen)
    try:
        yield proc
    finally:
        stop_process(proc)


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and has not exited (a zombie has)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


# os.write, not print: a handler that prints while another handler's print is under way
# is a reentrant call into the buffered stdout, which Python refuses (RuntimeError)
_WITNESS = """
import os, signal
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1):
    signal.signal(s, lambda n, _f: os.write(1, b"%d\\n" % n))
os.write(1, b"ready\\n")
while True:
    signal.pause()
"""


class SignalWitness:
    """A process that prints the number of each signal it gets (those that can be
    caught; SIGKILL ends it): proof that nobody signalled it.  Use as a context manager;
    it is killed at the end."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _WITNESS], stdout=subprocess.PIPE, bufsize=0
        )
        self._buf = b""
        assert self._line() == "ready"

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def cmdline(self) -> list[str]:
        """Its command line, as /proc shows it."""
        with open(f"/proc/{self.pid}/cmdline", "rb") as fh:
            return [a.decode() for a in fh.read().split(b"\0")[:-1]]

    def assert_unsignalled(self) -> None:
        """Signal it (SIGUSR1) twice, each time reading what it says up to that signal:
        only those two, so nothing was sent to it before.  (Signals pending together
        are handled in the order of their numbers, not of their sending; the second
        one is sent once the first was handled, so it comes after all of them.)"""
        ours, said = str(int(signal.SIGUSR1)), []
        for _ in range(2):
            os.kill(self.pid, signal.SIGUSR1)
            while (line := self._line()) != ours:
                said.append(line)
        assert not said, f"the witness got signal(s) {said} besides ours"

    def _line(self, timeout: float = 10) -> str:
        fd = self.proc.stdout.fileno()  # type: ignore[union-attr]
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise AssertionError(f"the witness said nothing within {timeout:g} s")
            chunk = os.read(fd, 4096)
            if not chunk:
                raise AssertionError(f"the witness is gone (exit {self.proc.wait()})")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line.decode()

    def __enter__(self) -> SignalWitness:
        return self

    def __exit__(self, *exc) -> None:
        self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()  # type: ignore[union-attr]


def counter(text: str, name: str) -> int:
    """The number a libibmad tool (perfquery, smpquery) printed as ``Name:.....value``."""
    m = re.search(rf"^{name}:\.+(\d+)$", text, re.M)
    assert m, (name, text)
    return int(m.group(1))


def no_timestamp(text: str) -> list[str]:
    """ibnetdiscover's lines without its '# Topology file:' header (it holds the time)."""
    return [line for line in text.splitlines() if not line.startswith("# Topology file:")]


def rendered(cluster: Cluster, where: str | None, **kw) -> list[str]:
    """ibnetdiscover's output as the model renders it from ``where`` (a tray, HCA or
    node; None for the default port), without its timestamp line."""
    start, _ = find_port(cluster, where)
    return no_timestamp(ibnetdiscover.render(cluster.fabric, start, **kw))


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now (the kernel picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_udp_ports(n: int, lo: int = 47000, hi: int = 60000, host: str = "127.0.0.1") -> int:
    """The first of ``n`` consecutive UDP ports on ``host``, at or above ``lo`` and below
    ``hi``, that are all free now (remote mode takes PORT and one more per client)."""
    for base in range(lo, hi):
        socks = []
        try:
            for p in range(base, base + n):
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                socks.append(s)
                s.bind((host, p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise AssertionError(f"no {n} free UDP ports in {lo}-{hi}")


@contextmanager
def served(cluster: Cluster, serve: bool = True, **kw):
    """``cluster``'s fabric served in this process (on a thread when ``serve``), under a
    name of its own; the FabricServer, stopped after."""
    name = f"flserved{os.getpid()}x{next(_served)}"
    start, _ = find_port(cluster, None)
    srv = FabricServer(
        cluster.fabric,
        name,
        resolve=lambda t: cluster.locate(t, switches=True),
        default_port=start,
        **kw,
    )
    srv.bind()
    thread = None
    if serve:
        up = threading.Event()
        thread = threading.Thread(target=srv.serve_forever, kwargs={"ready": up.set}, daemon=True)
        thread.start()
        assert up.wait(30)
    try:
        yield srv
    finally:
        srv.stop()
        if thread is not None:
            thread.join(10)
        srv.close()


def umad2sim_env(name: str, host: str, remote: tuple[str, int] | None = None) -> dict[str, str]:
    """The environment of a real tool attached at ``host`` of a fabric served under
    ``name`` through libumad2sim (over UDP at ``remote``, when given)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IBSIM_", "SIM_"))}
    env.update(LD_PRELOAD=UMAD2SIM, IBSIM_SOCKNAME=name, SIM_HOST=host)
    if remote:
        env.update(IBSIM_SERVER_NAME=remote[0], IBSIM_SERVER_PORT=str(remote[1]))
    return env


def run_tool(
    name: str,
    host: str,
    argv: list[str],
    cwd: Path,
    timeout: float = 60,
    remote: tuple[str, int] | None = None,
    **kw,
) -> subprocess.CompletedProcess:
    """A real tool attached at ``host`` of a fabric served under ``name``."""
    return subprocess.run(
        argv,
        env=umad2sim_env(name, host, remote),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        **kw,
    )


def in_tree(
    root: Path, argv: Sequence[str], env: Mapping[str, str], cwd: str, mount_proc: bool
) -> list[str]:
    """The command line that runs ``argv`` in the Debian tree at ``root``: ``chroot``,
    then exactly ``env`` (``env -i``; PATH and HOME unless ``env`` sets them), then ``cwd``
    (a path inside the tree); with ``mount_proc``, in a mount namespace of its own with
    the tree's /proc mounted.  Each wrapper execs the next, so the pid is the program's."""
    full = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", **env}
    cmd = [
        "chroot",
        str(root),
        "/usr/bin/env",
        "-i",
        *(f"{k}={v}" for k, v in full.items()),
        "/bin/sh",
        "-c",
        'cd "$0" && exec "$@"',
        cwd,
        *map(str, argv),
    ]
    if mount_proc:
        unshare = ["unshare", "--mount", "--propagation", "private"]
        cmd = [*unshare, f"--mount-proc={root}/proc", *cmd]
    return cmd


# --- the topology API ------------------------------------------------------------------


def copy_models(source: Path, dest: Path) -> Path:
    """topograph's test models (``tests__models__*.yaml`` under ``source``) copied to
    ``dest`` under their own names, as a ``--models-dir``; ``dest``."""
    for f in source.glob("tests__models__*.yaml"):
        shutil.copy(f, dest / f.name.removeprefix("tests__models__"))
    return dest


class TopologyServer:
    """A ``fabriclab serve-topology ARGS`` process on a free port; its stderr goes to a
    log file.  :meth:`wait_ready` waits until /healthz answers; :meth:`stop` stops it."""

    def __init__(self, tmp: Path, *args: str, env: dict | None = None, host: str = "127.0.0.1"):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = tmp / f"server-{self.port}.log"
        argv = [sys.executable, "-m", "fabriclab.cli", "serve-topology", *args]
        with self.log.open("w") as err:
            self.proc = subprocess.Popen(
                [*argv, "--host", host, "--port", str(self.port)],
                stdout=subprocess.DEVNULL,
                stderr=err,
                env={**os.environ, **(env or {})},
            )

    def wait_ready(self) -> TopologyServer:
        def healthy() -> bool:
            assert self.proc.poll() is None, f"serve-topology exited: {self.log.read_text()}"
            try:
                return httpx.get(f"{self.base}/healthz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(healthy, 30, lambda: f"serve-topology ready: {self.log.read_text()}")
        return self

    def status(self, key: str) -> int:
        """A line of /proc/PID/status (Threads, VmRSS, VmHWM), as a number."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
        raise KeyError(key)

    def stop(self) -> None:
        stop_process(self.proc)


def topology_result(
    base: str, uid: str, headers: dict | None = None, timeout: float = 10
) -> httpx.Response:
    """The topology API's answer to request ``uid`` once it is no longer pending (202)."""
    return wait_for(
        lambda: (
            (
                r := httpx.get(f"{base}/v1/topology", params={"uid": uid}, headers=headers)
            ).status_code
            != 202
            and r
        ),
        timeout,
        f"request {uid} answered",
        interval=0.05,
    )


def fat_tree_64(name: str, hosts: str) -> dict:
    """A small two-tier fat tree for tests: 16 trays x 4 HCAs (64 HCAs), 4 leaves, 4
    spines, 96 links; ``hosts`` a hostlist of 16 names."""
    return {
        "name": name,
        "trays": [{"hosts": hosts, "gpus": 4, "hcas": 4}],
        "fabric": {
            "fat_tree": {
                "tiers": 2,
                "switch": "quantum-2",
                "rail_optimized": False,
                "hosts_per_leaf": 4,
                "leaf_uplinks": 8,
                "spines": 4,
            }
        },
    }
