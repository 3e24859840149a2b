"""Run a real Slurm cluster (Debian slurm-wlm 22.05 or 24.11) on this one machine, for tests.

One ``slurmctld`` plus one ``slurmd -N <node>`` per emulated node; every node has
``NodeAddr=127.0.0.1`` and a port of its own, so no network namespaces are needed.
Typical use::

    with slurm_cluster(["n1", "n2"], "SwitchName=s1 Nodes=n[1-2]\\n", tmp_path) as c:
        print(c.show_topology())
        job = c.submit(2, switches=1)
        print(c.wait_running(job, timeout=20))      # "n[1-2]"

The Slurm may be the system's, or that of a Debian tree (``root``: Debian 13's 24.11 on a
Debian 12 machine, tests/debian13.py), whose programs run under ``chroot`` with /proc
mounted for them alone (``unshare --mount-proc``: slurmctld and slurmd readlink
/proc/self/exe); the work directory must then lie in the tree, and the configs name the
tree's paths.  ``plugin`` picks topology/tree or topology/block (Slurm >= 23.11);
``blocks`` parses the block view of ``scontrol show topology``.

No pytest inside.  Everything started here is stopped when the
``with`` block ends, however it ends: jobs are cancelled, the daemons get SIGTERM and
then SIGKILL, and leftover ``slurmstepd`` processes (and the job processes under them)
are found by their environment (``SLURM_CONF=<this cluster's slurm.conf>``) and killed.

Notes on the design (see also ``slurm_cluster``):

- The daemons run in the foreground (``-D``) as children of this process, so this
  process reaps them: they never linger as zombies.  ``slurmstepd`` detaches itself and
  is re-parented to PID 1, which may leave it a zombie for a while after it exits; a
  zombie counts as gone here.
- Authentication: ``auth/none`` + ``cred/none`` when the short host name resolves to a
  loopback address (it must, for slurmctld), in which case every daemon binds
  127.0.0.1 only (``CommunicationParameters=NoInAddrAny,NoCtldInAddrAny``: Slurm binds
  the address the host name resolves to).  Otherwise the daemons have to listen on all
  addresses, and a private ``munged`` (own key, own socket) guards them instead.
- Ports are picked at random below the kernel's ephemeral range and probed; a lock file
  in the temp directory serialises the pick-and-bind step between concurrent clusters.
- Each daemon also starts with ``PR_SET_PDEATHSIG``: should this process die without
  cleaning up (SIGKILL), the daemons get SIGTERM.  The signal follows the *thread* that
  started the cluster, so enter ``slurm_cluster`` from a thread that outlives the block.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import ipaddress
import json
import os
import pwd
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from helpers import alive, in_tree
from versions import slurm as slurm_version

from fabriclab.spec import hostlist

SLURM_BINARIES = ("slurmctld", "slurmd", "scontrol", "sbatch", "squeue", "sinfo", "scancel")
MUNGE_BINARIES = ("munged", "mungekey")

_NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_PR_SET_PDEATHSIG = 1
_LOCK_FILE = Path(tempfile.gettempdir()) / "fabriclab-slurm-ports.lock"
# a unix socket path (slurmstepd's <spool>/<node>_<job>.<step>) must fit in sun_path (108)
_SUN_PATH_MAX = 107
# slurmd 24.11 loads a cgroup plugin even with proctrack/linuxproc and task/none, and dies
# where it finds no cgroup hierarchy it can use (a chroot, or a cgroup v2 host without
# systemd delegation); cgroup.conf's CgroupPlugin=disabled (cgroup.conf(5) of 24.05 and
# 24.11) stops that.  22.05 rejects the value ("Couldn't find the specified plugin name
# for disabled"), so the line is written for the releases that know it.
_CGROUP_DISABLED_SINCE = (24, 5)


# what a command in a tree gets of this process's environment (``env -i`` drops the rest)
_PASSED = ("SLURM_CONF", "LANG", "TZ")


class SlurmError(RuntimeError):
    """The cluster could not be started, or Slurm did not do what was asked in time."""


@dataclass(frozen=True)
class Place:
    """Where Slurm's programs run: this system (``root`` None), or a Debian tree under
    ``root`` entered with ``chroot``.  The network namespace is shared, so loopback TCP
    reaches the daemons in the tree; file paths are the tree's (``path``)."""

    root: Path | None = None

    def path(self, host_path: Path | str) -> str:
        """``host_path`` as the programs see it (inside the tree: relative to root)."""
        if self.root is None:
            return str(host_path)
        return "/" + str(Path(host_path).resolve().relative_to(self.root.resolve()))

    def command(self, argv: Sequence[str], env: dict[str, str], cwd: Path) -> list[str]:
        """The command line that runs ``argv`` here: as is, or in the tree with /proc
        mounted in a mount namespace of its own, exactly the ``_PASSED`` variables of
        ``env`` (and PATH, HOME) and ``cwd``; every wrapper execs the next, so the pid
        is the program's."""
        if self.root is None:
            return [str(a) for a in argv]
        passed = {k: v for k, v in env.items() if k in _PASSED}
        return in_tree(self.root, argv, passed, self.path(cwd), mount_proc=True)

    def missing(self, binaries: Sequence[str]) -> list[str]:
        """Those of ``binaries`` this place does not have."""
        if self.root is None:
            return [b for b in binaries if shutil.which(b) is None]
        dirs = [self.root / d for d in ("usr/sbin", "usr/bin", "sbin", "bin")]
        return [b for b in binaries if not any((d / b).is_file() for d in dirs)]


def slurm_available(root: Path | None = None) -> list[str]:
    """The Slurm binaries (of ``SLURM_BINARIES``) that are not on PATH (or in the tree
    ``root``); empty when all are."""
    return Place(root).missing(SLURM_BINARIES)


def expand_hostlist(text: str) -> list[str]:
    """Expand a Slurm hostlist (``n[1-4,6]``, ``gb-r[01-02]-t[01-18]``, ``a,b``) in order."""
    return hostlist.expand(text) if text and text.strip() else []


# --------------------------------------------------------------------------- topology


@dataclass(frozen=True)
class Switch:
    """One switch of a topology/tree topology (from topology.conf or ``scontrol show topology``)."""

    name: str
    nodes: frozenset[str] = frozenset()
    switches: frozenset[str] = frozenset()
    level: int | None = None  # only in scontrol's view
    link_speed: int | None = None


def parse_topology(text: str) -> dict[str, Switch]:
    """Parse topology.conf text or ``scontrol show topology`` output into switches by name.

    In scontrol's output ``Nodes=`` of an upper switch lists every node below it; in a
    topology.conf it lists only directly attached nodes.  Hostlists are expanded.
    """
    switches: dict[str, Switch] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        kv = dict(tok.split("=", 1) for tok in line.split() if "=" in tok)
        name = next((v for k, v in kv.items() if k.lower() == "switchname"), None)
        if name is None:
            continue
        low = {k.lower(): v for k, v in kv.items()}
        switches[name] = Switch(
            name=name,
            nodes=frozenset(expand_hostlist(low.get("nodes", ""))),
            switches=frozenset(expand_hostlist(low.get("switches", ""))),
            level=int(low["level"]) if "level" in low else None,
            link_speed=int(low["linkspeed"]) if "linkspeed" in low else None,
        )
    return switches


@dataclass(frozen=True)
class Block:
    """One block of a topology/block topology: a ``BlockName=`` line of topology.conf, or
    a ``BlockName=``/``AggregatedBlock=`` line of ``scontrol show topology`` (24.11:
    ``BlockName=b1 BlockIndex=0 Nodes=… BlockSize=18``)."""

    name: str
    nodes: tuple[str, ...] = ()
    aggregated: bool = False
    index: int | None = None  # only in scontrol's view
    size: int | None = None  # only in scontrol's view


def parse_blocks(text: str) -> list[Block]:
    """The blocks of topology.conf text or of ``scontrol show topology``, in order
    (``BlockSizes=`` lines are left out); hostlists are expanded."""
    out = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        kv = {k.lower(): v for k, _, v in (tok.partition("=") for tok in line.split())}
        name = kv.get("blockname") or kv.get("aggregatedblock")
        if not name:
            continue
        out.append(
            Block(
                name,
                tuple(expand_hostlist(kv.get("nodes", ""))),
                "aggregatedblock" in kv,
                int(kv["blockindex"]) if "blockindex" in kv else None,
                int(kv["blocksize"]) if "blocksize" in kv else None,
            )
        )
    return out


def _blocks_match(conf: list[Block], shown: list[Block]) -> bool:
    """Whether scontrol's view ``shown`` has the base blocks of ``conf`` (names, nodes)."""
    want = {b.name: set(b.nodes) for b in conf}
    got = {b.name: set(b.nodes) for b in shown if not b.aggregated}
    return want == got


def _topology_matches(conf: dict[str, Switch], shown: dict[str, Switch]) -> bool:
    """Whether scontrol's view ``shown`` is the topology of ``conf`` (names, children, leaves)."""
    if set(conf) != set(shown):
        return False

    def below(name: str, seen: frozenset[str] = frozenset()) -> set[str]:
        sw = conf[name]
        out = set(sw.nodes)
        for child in sw.switches:
            if child in conf and child not in seen:
                out |= below(child, seen | {name})
        return out

    for name, sw in conf.items():
        got = shown[name]
        if set(got.switches) != set(sw.switches) or set(got.nodes) != below(name):
            return False
    return True


# --------------------------------------------------------------------------- processes


def _short_hostname() -> str:
    return socket.gethostname().split(".")[0]


def _resolves_to_loopback(host: str) -> bool:
    try:
        infos = socket.getaddrinfo(host, None, socket.AF_INET)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(i[4][0]).is_loopback for i in infos)


def _children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid = int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d))
    return kids


def _pids_with_env(entry: bytes) -> list[int]:
    """Live processes (not this one) whose initial environment contains ``entry`` exactly."""
    me = os.getpid()
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == me:
            continue
        try:
            env = Path(f"/proc/{d}/environ").read_bytes()
        except OSError:
            continue
        if entry in env.split(b"\0") and alive(int(d)):
            out.append(int(d))
    return out


def _kill(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


try:
    _LIBC = ctypes.CDLL(None, use_errno=True)
except OSError:  # pragma: no cover
    _LIBC = None


def _set_pdeathsig() -> None:  # runs in the child between fork and exec
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)


def _listening() -> dict[int, str]:
    """IPv4 TCP ports in LISTEN state on this host -> their bound address."""
    out: dict[int, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
            f = line.split()
            if len(f) > 3 and f[3] == "0A":
                addr_hex, port_hex = f[1].split(":")
                addr = socket.inet_ntoa(bytes.fromhex(addr_hex)[::-1])
                out[int(port_hex, 16)] = addr
    return out


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def _pick_ports(count: int) -> list[int]:
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    lo, hi = 20000, max(min(low, 32768), 20000 + 4 * count + 100)
    pool = list(range(lo, hi))
    random.shuffle(pool)
    ports: list[int] = []
    for p in pool:
        if _port_free(p):
            ports.append(p)
            if len(ports) == count:
                return ports
    raise SlurmError(f"could not find {count} free TCP ports in {lo}-{hi}")


# The supervisor: a tiny child process that is a "child subreaper" (prctl
# PR_SET_CHILD_SUBREAPER), so the daemons and everything they leave behind
# (slurmstepd detaches itself; job tasks) are re-parented to it, not to PID 1.  It
# forks the daemons on request, reaps every child at once (no zombies), and on
# "stop", end of input or SIGTERM it SIGKILLs whatever is still below it and exits.
_SUPERVISOR_SRC = r"""
import ctypes, json, os, select, signal, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl(36, 1, 0, 0, 0)                      # PR_SET_CHILD_SUBREAPER
libc.prctl(1, int(signal.SIGTERM), 0, 0, 0)     # PR_SET_PDEATHSIG: harness gone -> stop
if os.getppid() != int(sys.argv[1]):
    sys.exit(1)
names = {}
def note(msg):
    sys.stderr.write("%.3f %s\n" % (time.time(), msg)); sys.stderr.flush()
def reap():
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid in names:
            note("%s (pid %d) exited %d" % (names.pop(pid), pid, os.waitstatus_to_exitcode(status)))
def children():
    me, out = str(os.getpid()), []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                f = open("/proc/%s/stat" % d).read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if f[1] == me and f[0] not in ("Z", "X"):
                out.append(int(d))
    return out
def shutdown(*_):
    for _ in range(200):
        kids = children()
        if not kids:
            break
        for k in kids:
            try:
                os.kill(k, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.02)
        reap()
    reap()
    os._exit(0)
def spawn(req):
    fd = os.open(req["out"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    pid = os.fork()
    if pid == 0:
        try:
            libc.prctl(1, int(signal.SIGTERM), 0, 0, 0)
            os.dup2(fd, 1); os.dup2(fd, 2)
            null = os.open(os.devnull, os.O_RDONLY); os.dup2(null, 0)
            os.execvp(req["argv"][0], req["argv"])
        except BaseException as e:
            os.write(2, ("exec %s failed: %s\n" % (req["argv"], e)).encode())
        finally:
            os._exit(127)
    os.close(fd)
    names[pid] = req["name"]
    note("%s started, pid %d" % (req["name"], pid))
    return pid
signal.signal(signal.SIGTERM, shutdown)
buf = b""
while True:
    ready = select.select([0], [], [], 0.05)[0]
    reap()
    if not ready:
        continue
    chunk = os.read(0, 65536)
    if not chunk:
        shutdown()
    buf += chunk
    while b"\n" in buf:
        line, buf = buf.split(b"\n", 1)
        req = json.loads(line)
        if req["op"] == "stop":
            shutdown()
        try:
            reply = {"pid": spawn(req)}
        except OSError as e:
            reply = {"error": str(e)}
        os.write(1, (json.dumps(reply) + "\n").encode())
"""


class _Supervisor:
    def __init__(self, env: dict[str, str], cwd: Path, log: Path):
        script = cwd / "run" / "supervisor.py"
        script.write_text(_SUPERVISOR_SRC)
        self._log = open(log, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-I", str(script), str(os.getpid())],
            env=env,
            cwd=cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            preexec_fn=_set_pdeathsig,
        )
        self.pids: dict[str, int] = {}

    def spawn(self, name: str, argv: list[str], out: Path) -> int:
        req = {"op": "spawn", "name": name, "argv": argv, "out": str(out)}
        try:
            self.proc.stdin.write((json.dumps(req) + "\n").encode())
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except OSError as e:
            raise SlurmError(f"supervisor gone: {e}") from None
        if not line:
            raise SlurmError(f"supervisor exited ({self.proc.poll()}) when starting {name}")
        reply = json.loads(line)
        if "error" in reply:
            raise SlurmError(f"cannot start {name}: {reply['error']}")
        self.pids[name] = reply["pid"]
        return reply["pid"]

    def alive(self, name: str) -> bool:
        return name in self.pids and alive(self.pids[name])

    def close(self, timeout: float = 15) -> None:
        """Kill everything still under the supervisor, and the supervisor."""
        with contextlib.suppress(OSError, ValueError):
            self.proc.stdin.write(b'{"op": "stop"}\n')
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        with contextlib.suppress(OSError, ValueError):
            self.proc.stdout.close()
        self._log.close()


# --------------------------------------------------------------------------- the cluster


@dataclass
class SlurmCluster:
    """A running cluster started by ``slurm_cluster``; all commands use its slurm.conf."""

    nodes: list[str]
    workdir: Path
    conf_path: Path
    topology_path: Path
    ctld_port: int
    node_ports: dict[str, int]
    auth: str
    env: dict[str, str]
    place: Place = field(default_factory=Place)
    _sup: _Supervisor | None = field(default=None, repr=False)

    # ---- commands

    def run(
        self, *argv: str, timeout: float = 30, check: bool = False, input: str | None = None
    ) -> subprocess.CompletedProcess:
        """Run a command with ``SLURM_CONF`` set to this cluster; output captured as text."""
        r = subprocess.run(
            self.place.command(argv, self.env, self.workdir / "jobs"),
            env=self.env,
            cwd=self.workdir / "jobs",
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input,
        )
        if check and r.returncode != 0:
            raise SlurmError(
                f"{' '.join(map(str, argv))} exited {r.returncode}:\n{r.stdout}{r.stderr}"
            )
        return r

    def show_topology(self) -> str:
        """stdout of ``scontrol show topology``."""
        return self.run("scontrol", "show", "topology", check=True).stdout

    def topology(self) -> dict[str, Switch]:
        """``scontrol show topology``, parsed (see ``parse_topology``)."""
        return parse_topology(self.show_topology())

    def blocks(self) -> list[Block]:
        """``scontrol show topology`` of topology/block, parsed (see ``parse_blocks``)."""
        return parse_blocks(self.show_topology())

    def submit(
        self,
        nodes: int,
        *,
        switches: int | None = None,
        switch_wait: str | None = None,
        exclusive: bool = True,
        sleep_s: int = 30,
        extra: Sequence[str] = (),
    ) -> str:
        """``sbatch --parsable -N nodes [--exclusive] [--switches=N[@wait]] --wrap 'sleep S'``.

        Returns the job id.  ``switch_wait`` is Slurm's time format (``"0:20"``,
        ``"00:01:00"``); it needs ``switches``.  ``extra`` is appended to the sbatch line.
        """
        argv = [
            "sbatch",
            "--parsable",
            f"--nodes={nodes}",
            "--job-name=harness",
            f"--output={self.place.path(self.workdir / 'jobs')}/slurm-%j.out",
        ]
        if exclusive:
            argv.append("--exclusive")
        if switches is not None:
            argv.append(f"--switches={switches}" + (f"@{switch_wait}" if switch_wait else ""))
        elif switch_wait:
            raise ValueError("switch_wait needs switches")
        argv += [*extra, "--wrap", f"sleep {int(sleep_s)}"]
        out = self.run(*argv, check=True).stdout.strip()
        return out.split(";", 1)[0]

    def job_info(self, jobid: str) -> dict[str, str]:
        """``scontrol show job -o JOBID`` as key/value pairs (empty if Slurm forgot the job)."""
        r = self.run("scontrol", "show", "job", "-o", str(jobid))
        if r.returncode != 0:
            return {}
        return dict(tok.split("=", 1) for tok in r.stdout.split() if "=" in tok)

    def wait_running(self, jobid: str, timeout: float = 30) -> str:
        """Wait until the job is RUNNING; its allocated NodeList (Slurm's compressed form)."""
        deadline = time.monotonic() + timeout
        last = ""
        while True:
            r = self.run("squeue", "-h", "-j", str(jobid), "-o", "%T %N")
            line = r.stdout.strip()
            if r.returncode == 0 and line:
                last = line
                state, _, nodelist = line.partition(" ")
                if state == "RUNNING" and nodelist:
                    return nodelist
                if state not in ("PENDING", "CONFIGURING", "RUNNING"):
                    break
            else:  # squeue no longer lists it: ask scontrol what happened
                info = self.job_info(jobid)
                if info.get("JobState") == "RUNNING":
                    return info["NodeList"]
                last = info.get("JobState", r.stderr.strip())
                if info.get("JobState") not in (None, "PENDING", "CONFIGURING"):
                    break
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        info = self.job_info(jobid)
        raise SlurmError(
            f"job {jobid} not RUNNING after {timeout}s (last: {last!r}); "
            f"Reason={info.get('Reason')} JobState={info.get('JobState')}"
        )

    def job_ids(self) -> list[str]:
        """Ids of the jobs squeue still lists (pending, running, completing ...)."""
        r = self.run("squeue", "-h", "-o", "%i", timeout=10)
        return r.stdout.split() if r.returncode == 0 else []

    def cancel_all(self, timeout: float = 30) -> None:
        """Cancel every job and wait until squeue lists none."""
        deadline = time.monotonic() + timeout
        ids = self.job_ids()
        while ids:
            self.run("scancel", "--quiet", *ids, timeout=10)
            if time.monotonic() > deadline:
                raise SlurmError(f"jobs still listed after scancel: {ids}")
            time.sleep(0.1)
            ids = self.job_ids()

    def reconfigure(self, topology_conf: str, timeout: float = 30) -> None:
        """Rewrite topology.conf, ``scontrol reconfigure``, and wait until
        ``scontrol show topology`` shows the new tree (or blocks)."""
        want, want_blocks = parse_topology(topology_conf), parse_blocks(topology_conf)
        self.topology_path.write_text(topology_conf)
        self.run("scontrol", "reconfigure", check=True)
        deadline = time.monotonic() + timeout
        while True:
            text = self.show_topology()
            if (
                _blocks_match(want_blocks, parse_blocks(text))
                if want_blocks
                else _topology_matches(want, parse_topology(text))
            ):
                return
            if time.monotonic() > deadline:
                raise SlurmError(
                    f"topology did not change within {timeout}s; scontrol shows:\n"
                    f"{self.show_topology()}"
                )
            time.sleep(0.1)

    # ---- introspection

    def pids(self) -> dict[str, int]:
        """Daemon name (``slurmctld``, ``slurmd-<node>``, ``munged``) -> pid."""
        return dict(self._sup.pids) if self._sup else {}

    def log_tail(self, lines: int = 20, max_nodes: int = 3) -> str:
        """The end of slurmctld's log and of a few slurmd logs, for error messages."""
        logs = [
            self.workdir / "log" / "supervisor.log",
            self.workdir / "log" / "slurmctld.log",
            self.workdir / "log" / "slurmctld.stderr",
        ]
        logs += [self.workdir / "log" / f"slurmd-{n}.log" for n in self.nodes[:max_nodes]]
        if self.auth == "munge":
            logs.append(self.workdir / "munge" / "munged.log")
        parts = []
        for p in logs:
            if p.exists():
                text = p.read_text(errors="replace").splitlines()[-lines:]
                parts.append(f"--- {p}\n" + "\n".join(text))
        return "\n".join(parts)


def _write_configs(
    place: Place,
    workdir: Path,
    spool: Path,
    nodes: list[str],
    topology_conf: str,
    *,
    cpus: int,
    gpus: int,
    gpu_type: str | None,
    ctld_port: int,
    node_ports: dict[str, int],
    auth: str,
    loopback: bool,
    max_switch_wait: int,
    plugin: str,
    return_to_service: int,
) -> Path:
    etc = workdir / "etc"
    at = place.path(workdir)  # the work directory as the daemons see it
    user = pwd.getpwuid(os.getuid()).pw_name
    lines = [
        "# written by tests/slurm_harness.py",
        "ClusterName=fabriclab",
        f"SlurmctldHost={_short_hostname()}(127.0.0.1)",
        f"SlurmctldPort={ctld_port}",
        f"SlurmUser={user}",
        f"SlurmdUser={user}",
    ]
    if loopback:  # bind what the host name resolves to, i.e. 127.0.0.1, not INADDR_ANY
        lines.append("CommunicationParameters=NoInAddrAny,NoCtldInAddrAny")
    if auth == "none":
        lines += ["AuthType=auth/none", "CredType=cred/none"]
    else:
        lines += [
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={at}/munge/run/munge.socket",
        ]
    lines += [
        f"StateSaveLocation={at}/state",
        f"SlurmdSpoolDir={place.path(spool)}/%n",
        f"SlurmctldPidFile={at}/run/slurmctld.pid",
        f"SlurmdPidFile={at}/run/slurmd-%n.pid",
        f"SlurmctldLogFile={at}/log/slurmctld.log",
        f"SlurmdLogFile={at}/log/slurmd-%n.log",
        "SlurmdParameters=config_overrides",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SwitchType=switch/none",
        "MpiDefault=none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "MailProg=/bin/true",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "SchedulerType=sched/backfill",
        # --switches without @time waits at most max_switch_wait; schedule often
        f"SchedulerParameters=max_switch_wait={max_switch_wait},sched_interval=1,bf_interval=1",
        f"TopologyPlugin={plugin}",
        f"ReturnToService={return_to_service}",
        "SlurmctldTimeout=30",
        "SlurmdTimeout=60",
        "InactiveLimit=0",
        "MinJobAge=5",
        "KillWait=2",
        "Waittime=0",
    ]
    gres = ""
    if gpus:
        lines.append("GresTypes=gpu")
        gres = f" Gres=gpu:{gpu_type + ':' if gpu_type else ''}{gpus}"
    for n in nodes:
        lines.append(
            f"NodeName={n} NodeAddr=127.0.0.1 Port={node_ports[n]} CPUs={cpus} "
            f"Boards=1 SocketsPerBoard=1 CoresPerSocket={cpus} ThreadsPerCore=1 "
            f"RealMemory=1000{gres} State=UNKNOWN"
        )
    lines.append("PartitionName=all Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
    conf = etc / "slurm.conf"
    conf.write_text("\n".join(lines) + "\n")
    (etc / "topology.conf").write_text(topology_conf)
    if slurm_version(place.root) >= _CGROUP_DISABLED_SINCE:
        (etc / "cgroup.conf").write_text("CgroupPlugin=disabled\n")
    if gpus:
        dev = workdir / "dev"
        dev.mkdir(exist_ok=True)
        for i in range(gpus):
            link = dev / f"nvidia{i}"
            if not link.is_symlink():
                link.symlink_to("/dev/null")  # gres File= must exist and be a char device
        at_dev = place.path(dev)
        files = f"{at_dev}/nvidia[0-{gpus - 1}]" if gpus > 1 else f"{at_dev}/nvidia0"
        (etc / "gres.conf").write_text(
            f"AutoDetect=off\nName=gpu{' Type=' + gpu_type if gpu_type else ''} File={files}\n"
        )
    return conf


@contextlib.contextmanager
def slurm_cluster(
    nodes: list[str],
    topology_conf: str,
    workdir: Path,
    *,
    cpus: int = 4,
    gpus: int = 0,
    gpu_type: str | None = None,
    timeout: float = 60,
    max_switch_wait: int = 10,
    auth: str = "auto",
    return_to_service: int = 2,
    plugin: str = "topology/tree",
    root: Path | None = None,
) -> Iterator[SlurmCluster]:
    """Start a real Slurm cluster of ``nodes`` with ``topology_conf`` (for ``plugin``,
    topology/tree or topology/block) in ``workdir``; yield a ``SlurmCluster`` once every
    node is idle; stop it all on exit.  With ``root``, the Slurm of that Debian tree
    runs, and ``workdir`` must lie inside the tree.

    ``cpus`` and ``gpus`` are claimed per node (fake GPUs: gres files are symlinks to
    /dev/null, ``gpu_type`` optional).  ``timeout`` bounds the start-up.
    ``max_switch_wait`` (seconds) is how long a ``--switches`` job without ``@time`` may
    wait for its switch count.  ``auth`` is ``"none"``, ``"munge"`` or ``"auto"`` (none
    when the host name resolves to loopback, so that everything binds 127.0.0.1).
    ``return_to_service`` is slurm.conf's ReturnToService: with 2 a node set DOWN by
    ``scontrol update`` comes back when slurmctld next asks it to register (it asks DOWN
    nodes at its ping interval), with 1 it stays DOWN until resumed.
    """
    place = Place(Path(root).resolve() if root is not None else None)
    missing = place.missing(SLURM_BINARIES)
    if missing:
        where = f" in {root}" if root is not None else ""
        raise SlurmError(
            f"Slurm binaries missing{where}: {missing} "
            "(apt-get install slurmctld slurmd slurm-client)"
        )
    nodes = list(nodes)
    if not nodes:
        raise ValueError("no nodes")
    bad = [n for n in nodes if not _NODE_NAME.match(n)]
    if bad or len(set(nodes)) != len(nodes):
        raise ValueError(f"bad or duplicate node names: {bad or nodes}")
    loopback = _resolves_to_loopback(_short_hostname())  # the tree has this /etc/hosts
    if auth == "auto":
        auth = "none" if loopback else "munge"
    if auth not in ("none", "munge"):
        raise ValueError(f"auth must be none, munge or auto, not {auth!r}")
    if auth == "none" and not loopback:
        raise SlurmError(f"auth='none' needs {_short_hostname()!r} to resolve to loopback")
    if auth == "munge":
        missing = place.missing(MUNGE_BINARIES)
        if missing:
            raise SlurmError(f"munge binaries missing: {missing} (apt-get install munge)")

    workdir = Path(workdir).resolve()
    if place.root is not None and not workdir.is_relative_to(place.root):
        raise ValueError(f"workdir {workdir} is not inside the tree {place.root}")
    for sub in ("etc", "state", "log", "run", "jobs"):
        (workdir / sub).mkdir(parents=True, exist_ok=True)
    # slurmstepd makes <spool>/<node>/<node>_<job>.<step> sockets: keep that path short
    longest = max(len(n) for n in nodes)
    spool, own_spool = workdir / "spool", None
    if len(place.path(spool)) + 2 * longest + 22 > _SUN_PATH_MAX:
        tmp = place.root / "tmp" if place.root is not None else None
        own_spool = Path(tempfile.mkdtemp(prefix="flslurm-", dir=tmp))
        spool = own_spool
    for n in nodes:
        (spool / n).mkdir(parents=True, exist_ok=True)

    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLURM_", "SBATCH_", "SALLOC_", "SRUN_"))
    }
    cluster: SlurmCluster | None = None
    sup: _Supervisor | None = None

    def start(name: str, argv: list[str]) -> int:
        return sup.spawn(
            name, place.command(argv, env, workdir), workdir / "log" / f"{name}.stderr"
        )

    def failed(what: str) -> SlurmError:
        tail = cluster.log_tail() if cluster else ""
        return SlurmError(f"{what}\n{tail}")

    try:
        with open(_LOCK_FILE, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            ports = _pick_ports(len(nodes) + 1)
            node_ports = dict(zip(nodes, ports[1:], strict=False))
            conf = _write_configs(
                place,
                workdir,
                spool,
                nodes,
                topology_conf,
                cpus=cpus,
                gpus=gpus,
                gpu_type=gpu_type,
                ctld_port=ports[0],
                node_ports=node_ports,
                auth=auth,
                loopback=loopback,
                max_switch_wait=max_switch_wait,
                plugin=plugin,
                return_to_service=return_to_service,
            )
            env["SLURM_CONF"] = place.path(conf)
            sup = _Supervisor(env, workdir, workdir / "log" / "supervisor.log")
            cluster = SlurmCluster(
                nodes=nodes,
                workdir=workdir,
                conf_path=conf,
                topology_path=workdir / "etc" / "topology.conf",
                ctld_port=ports[0],
                node_ports=node_ports,
                auth=auth,
                env=env,
                place=place,
                _sup=sup,
            )
            deadline = time.monotonic() + timeout
            if auth == "munge":
                _start_munged(place, workdir, start, sup, deadline)
            start("slurmctld", ["slurmctld", "-D", "-c", "-f", place.path(conf)])
            _wait_ports(sup, {"slurmctld": ports[0]}, deadline, failed)
            for n in nodes:
                start(f"slurmd-{n}", ["slurmd", "-D", "-N", n, "-f", place.path(conf)])
            _wait_ports(sup, {f"slurmd-{n}": p for n, p in node_ports.items()}, deadline, failed)
        _wait_idle(cluster, sup, deadline, timeout, failed)
        yield cluster
    finally:
        try:
            _stop(cluster, sup, env.get("SLURM_CONF"))
        finally:
            if own_spool is not None:
                shutil.rmtree(own_spool, ignore_errors=True)


def _start_munged(place: Place, workdir: Path, start, sup: _Supervisor, deadline: float) -> None:
    m = workdir / "munge"
    for sub, mode in (("", 0o755), ("run", 0o755), ("etc", 0o700), ("lib", 0o700)):
        (m / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(m / sub, mode)  # munged insists: socket dir 0755, key dir 0700
    # munged 0.5.16 also wants every directory above its socket searchable by all
    # ("Socket is inaccessible: execute permissions for all required"); pytest makes its
    # temporary directories 0700
    top = place.root.resolve() if place.root is not None else Path("/")
    for d in m.parents:
        if d == top or not d.is_relative_to(top):
            break
        mode = d.stat().st_mode
        if mode & 0o111 != 0o111:
            os.chmod(d, (mode | 0o111) & 0o7777)
    sock, at = m / "run" / "munge.socket", place.path(m)
    subprocess.run(
        place.command(["mungekey", "--create", f"--keyfile={at}/etc/munge.key", "--force"], {}, m),
        check=True,
        capture_output=True,
    )
    start(
        "munged",
        [
            "munged",
            "--foreground",
            f"--socket={at}/run/munge.socket",
            f"--key-file={at}/etc/munge.key",
            f"--log-file={at}/munged.log",
            f"--pid-file={at}/run/munged.pid",
            f"--seed-file={at}/lib/munged.seed",
        ],
    )
    while not sock.exists():
        if not sup.alive("munged") or time.monotonic() > deadline:
            log = m / "munged.log"
            text = log.read_text(errors="replace") if log.exists() else ""
            raise SlurmError(f"munged did not start:\n{text[-2000:]}")
        time.sleep(0.02)


def _wait_ports(sup: _Supervisor, want: dict[str, int], deadline: float, failed) -> None:
    pending = dict(want)
    while pending:
        listening = _listening()
        for name in [n for n, port in pending.items() if port in listening]:
            del pending[name]
        dead = [n for n in pending if not sup.alive(n)]
        if dead:
            raise failed(f"{dead[0]} exited before listening (see log/{dead[0]}.stderr, .log)")
        if pending and time.monotonic() > deadline:
            raise failed(f"not listening in time: {sorted(pending)[:5]}")
        if pending:
            time.sleep(0.02)


def _wait_idle(
    cluster: SlurmCluster, sup: _Supervisor, deadline: float, timeout: float, failed
) -> None:
    want = set(cluster.nodes)
    while True:
        r = cluster.run("sinfo", "-h", "-N", "-o", "%N %t", timeout=max(5.0, timeout))
        states = dict(line.split(None, 1) for line in r.stdout.splitlines() if line.strip())
        if set(states) >= want and all(states[n] == "idle" for n in want):
            return
        dead = [n for n in sup.pids if not sup.alive(n)]
        if dead:
            raise failed(f"{dead[0]} exited (see log/{dead[0]}.stderr, .log)")
        if time.monotonic() > deadline:
            not_idle = {n: states.get(n, "?") for n in cluster.nodes if states.get(n) != "idle"}
            reasons = cluster.run("sinfo", "-R", timeout=10).stdout
            raise failed(
                f"nodes not idle after {timeout}s: {dict(list(not_idle.items())[:10])}\n{reasons}"
            )
        time.sleep(0.1)


def _stop(cluster: SlurmCluster | None, sup: _Supervisor | None, slurm_conf: str | None) -> None:
    if sup is not None:
        if cluster is not None and sup.alive("slurmctld"):
            with contextlib.suppress(Exception):
                cluster.cancel_all(timeout=15)
        # a clean SIGTERM: slurmd first, then slurmctld, munged last; the supervisor
        # then SIGKILLs whatever is left below it (slurmstepd, job tasks) and exits
        groups = [[n for n in sup.pids if n.startswith("slurmd-")], ["slurmctld"], ["munged"]]
        for group in groups:
            group = [n for n in group if sup.alive(n)]
            for name in group:
                _kill(sup.pids[name], signal.SIGTERM)
            deadline = time.monotonic() + 5
            while any(sup.alive(n) for n in group) and time.monotonic() < deadline:
                time.sleep(0.02)
        sup.close()
    if slurm_conf:
        _kill_leftovers(f"SLURM_CONF={slurm_conf}".encode())


def _kill_leftovers(entry: bytes) -> None:
    """SIGKILL every process carrying this cluster's SLURM_CONF (slurmstepd, job tasks) and
    all their descendants; wait until none is alive (zombies count as gone)."""
    for _ in range(50):
        roots = _pids_with_env(entry)
        if not roots:
            return
        kids = _children_map()
        victims, todo = set(), list(roots)
        while todo:
            p = todo.pop()
            if p not in victims and p != os.getpid():
                victims.add(p)
                todo += kids.get(p, [])
        for p in victims:
            _kill(p, signal.SIGKILL)
        time.sleep(0.05)
    raise SlurmError(f"processes of this cluster survive SIGKILL: {_pids_with_env(entry)}")
