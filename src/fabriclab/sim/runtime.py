"""Running fabrics: starting and stopping servers, attaching real tools to them.

A running fabric is known by its name (``IBSIM_SOCKNAME``).  ``up`` writes a small JSON
record under the state directory (``$FABRICLAB_STATE_DIR``, else
``$XDG_RUNTIME_DIR/fabriclab``, else ``/tmp/fabriclab-<uid>``) saying which spec it
serves, its pid and how to reach it; ``down``, ``exec`` and ``shims`` read it.

That directory may sit where other users can create files (``/tmp``), so it is created
0700 and used only when it is a real directory (not a symbolic link) owned by the user
and writable by nobody else; files in it are opened without following symbolic links.
A record names its processes by pid, start time and command: a pid alone may have been
reused by another process, which is never signalled.

A tool attaches through Debian's ``libumad2sim.so``, preloaded, with ``SIM_HOST``
naming the port it runs on.  That library has limits of its own, which no server can
lift: it shows each process a single device ``ibsim0`` of type "simulator", it creates a
``./sys-<pid>`` directory in the tool's working directory (so that must be writable),
and the sysfs ``rate`` it writes is computed for speeds up to HDR (an NDR port reads
about 104 Gb/sec).  Everything that travels in MADs is exact.
"""

from __future__ import annotations

import errno
import glob
import json
import os
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import FabriclabError, InputError, Problem
from ..model.cluster import Cluster, find_port
from ..model.fabric import Port
from . import procfs
from ..ib import simwire

UMAD2SIM_GLOBS = ("/usr/lib/*/umad2sim/libumad2sim.so", "/usr/lib64/umad2sim/libumad2sim.so",
                  "/usr/lib/umad2sim/libumad2sim.so")
SIM_HOST_MAX = 31  # sim_client_info.nodeid is char[32]
# The tools a tray runs, found on PATH (Debian: /usr/sbin for infiniband-diags and opensm).
TOOLS = ("ibnetdiscover", "iblinkinfo", "ibqueryerrors", "ibstat", "ibstatus", "ibaddr",
         "ibroute", "ibtracert", "ibswitches", "ibhosts", "ibnodes", "ibrouters",
         "smpquery", "saquery", "sminfo", "perfquery", "ibportstate", "ibsysstat", "ibping",
         "dump_lfts.sh", "dump_mfts.sh", "ibcacheedit", "ibccquery", "ibccconfig", "opensm")


class NotRunning(FabriclabError):
    """The named fabric is not up."""


class UnsafeState(InputError):
    """The state directory, or a file in it, could be someone else's."""


def state_dir(create: bool = False) -> Path:
    """The state directory, checked (and with ``create``, made 0700 if missing)."""
    d = os.environ.get("FABRICLAB_STATE_DIR")
    run = os.environ.get("XDG_RUNTIME_DIR")
    path = Path(d) if d else Path(run) / "fabriclab" if run else \
        Path(tempfile.gettempdir()) / f"fabriclab-{os.geteuid()}"
    if create:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        except OSError as e:
            raise InputError([Problem(str(path), f"cannot create the state directory: "
                                      f"{e.strerror}")]) from None
    _check_state_dir(path)
    return path


def _check_state_dir(path: Path) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as e:
        raise UnsafeState([Problem(str(path), f"cannot use the state directory: {e.strerror}")]) from None
    why = None
    if stat.S_ISLNK(st.st_mode):
        why = "is a symbolic link"
    elif not stat.S_ISDIR(st.st_mode):
        why = "is not a directory"
    elif st.st_uid != os.geteuid():
        why = f"is owned by uid {st.st_uid}, not by you (uid {os.geteuid()})"
    elif st.st_mode & 0o022:
        why = f"is writable by others (mode {stat.S_IMODE(st.st_mode):o}; chmod 700 it)"
    if why:
        raise UnsafeState([Problem(str(path), f"state directory {why}: refusing to use it "
                                   "(remove it, or set FABRICLAB_STATE_DIR)")])


def open_state_file(path: Path, flags: int, mode: int = 0o600) -> int:
    """A file in the state directory, never through a symbolic link, and only if it is
    the user's own regular file; a descriptor."""
    try:  # (O_NONBLOCK: a FIFO planted there must not hang us; no effect on a file)
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, mode)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UnsafeState([Problem(str(path), "is a symbolic link: refusing to use it")]) from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        os.close(fd)
        what = "not a regular file" if not stat.S_ISREG(st.st_mode) else f"owned by uid {st.st_uid}"
        raise UnsafeState([Problem(str(path), f"is {what}: refusing to use it")])
    return fd


def umad2sim_path() -> str:
    """Where Debian's libumad2sim.so is; ``$FABRICLAB_UMAD2SIM`` overrides."""
    override = os.environ.get("FABRICLAB_UMAD2SIM")
    if override:
        return override
    for pattern in UMAD2SIM_GLOBS:
        hits = sorted(glob.glob(pattern))
        if hits:
            return hits[0]
    raise InputError([Problem("libumad2sim.so", "not found: install libumad2sim0 "
                              "(scripts/install-system-deps.sh does)")])


@dataclass
class Instance:
    """What ``up`` records about a running fabric."""

    name: str
    pid: int
    spec: str
    trays: int | None
    listen: list | None  # [host, port] in remote mode
    log: str
    started: float
    sm_pid: int | None = None
    # which processes the pids were: start time (/proc/PID/stat field 22) and command
    start: int | None = None
    cmdline: list | None = None
    sm_start: int | None = None
    sm_cmdline: list | None = None

    @property
    def path(self) -> Path:
        return record_path(self.name)

    def alive(self) -> bool:
        return self.process_state() == "alive"

    def process_state(self) -> str:
        """'alive' (pid is still the recorded process), 'gone', 'reused' (another
        process has the pid) or 'unknown' (no start time recorded)."""
        return _process_state(self.pid, self.start, self.cmdline)

    def sm_alive(self) -> bool:
        return bool(self.sm_pid) and \
            _process_state(self.sm_pid, self.sm_start, self.sm_cmdline) == "alive"

    def note_server(self, pid: int) -> None:
        self.pid = pid
        self.start, self.cmdline = _identity(pid)

    def note_sm(self, pid: int) -> None:
        self.sm_pid = pid
        self.sm_start, self.sm_cmdline = _identity(pid)

    def save(self) -> None:
        state_dir(create=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.unlink(missing_ok=True)
        fd = open_state_file(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(asdict(self), indent=1))
        tmp.replace(self.path)

    @classmethod
    def load(cls, name: str) -> "Instance":
        p = record_path(name)
        try:
            with os.fdopen(open_state_file(p, os.O_RDONLY)) as f:
                data = json.loads(f.read())
            inst = cls(**data)
            if not isinstance(inst.pid, int) or not isinstance(inst.sm_pid, (int, type(None))):
                raise TypeError("pids are not numbers")
        except FileNotFoundError:
            raise NotRunning([Problem(name, f"no fabric named {name!r} is up "
                                      f"(nothing in {state_dir()})")]) from None
        except (ValueError, TypeError) as e:
            raise NotRunning([Problem(str(p), f"unreadable state record: {e}")]) from None
        except OSError as e:
            raise NotRunning([Problem(str(p), f"cannot read the state record: {e.strerror}")]) from None
        state = inst.process_state()
        if state == "unknown":
            raise NotRunning([Problem(str(p), f"the record does not say which process pid "
                                      f"{inst.pid} was (no start time): refusing to use it; "
                                      "stop that fabric yourself and remove the record")])
        if state != "alive":
            p.unlink(missing_ok=True)
            why = "is gone" if state == "gone" else "is now another process"
            raise NotRunning([Problem(name, f"fabric {name!r} is not running "
                                      f"(pid {inst.pid} {why}; stale record removed)")])
        return inst


def record_path(name: str) -> Path:
    return state_dir() / f"{name}.json"


def _identity(pid: int) -> tuple[int | None, list | None]:
    p = procfs.process(pid)
    return (p.start, list(p.cmdline)) if p else (None, None)


def _process_state(pid: int, start: int | None, cmdline: list | None) -> str:
    if start is None or cmdline is None:
        return "unknown"
    p = procfs.process(pid)
    if p is None:
        return "gone"
    return "alive" if (p.start, list(p.cmdline)) == (start, cmdline) else "reused"


def _signal(pid: int, start: int | None, cmdline: list | None, sig: int) -> bool:
    """Send ``sig`` to ``pid`` if it is still the recorded process; whether it was.  A
    pidfd pins the process between the check and the signal (Linux 5.3+)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    except (OSError, AttributeError):
        fd = None
    try:
        if _process_state(pid, start, cmdline) != "alive":
            return False
        if fd is not None:
            signal.pidfd_send_signal(fd, sig)
        else:
            os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False
    finally:
        if fd is not None:
            os.close(fd)


def check_name(name: str) -> None:
    if not name or len(name) > 80 or any(c in name for c in "/\0 \t\n"):
        raise InputError([Problem("--name", f"{name!r}: use a short name without '/', "
                                  "spaces or NULs")])


def parse_listen(text: str | None) -> tuple[str, int] | None:
    """``[HOST:]PORT`` for remote (UDP) mode."""
    if text is None:
        return None
    host, _, port = text.rpartition(":")
    try:
        p = int(port)
        if not 0 < p < 65536 - 64:
            raise ValueError
    except ValueError:
        raise InputError([Problem("--listen", f"{text!r}: want [HOST:]PORT with a port "
                                  "below 65472 (client i uses PORT+1+i)")]) from None
    host = host or "127.0.0.1"
    try:
        return (socket.gethostbyname(host), p)  # the server listens on IPv4
    except (OSError, UnicodeError):
        raise InputError([Problem("--listen", f"{host!r}: not an IPv4 address or a name "
                                  "this host resolves")]) from None


# --- resolving where a tool runs --------------------------------------------------------


def resolve(cluster: Cluster, text: str) -> tuple[Port | None, str]:
    """The port a client attaches at: a tray (``HOST``, ``HOST:HCA[:PORT]``), a CA or
    switch by description, node id (``H-…``/``S-…``, optionally ``:PORT``) or GUID.  A
    switch is reached at its port 0 (an SM running on a managed switch)."""
    port, problem = find_port(cluster, text)
    if port is not None:
        return port, ""
    fabric = cluster.fabric
    node = fabric.find(text)
    num = None
    if node is None and ":" in text:
        head, _, tail = text.rpartition(":")
        if tail.isdigit():
            node, num = fabric.find(head), int(tail)
    if node is None:
        return None, problem
    if num is not None:
        if not (0 if node.is_switch else 1) <= num <= node.nports or node.ports[num] is None:
            return None, f"{node.desc!r} has no port {num}"
        return node.ports[num], ""
    if node.is_switch:
        return node.ports[0], ""
    return None, problem


def sim_host(cluster: Cluster, text: str) -> str:
    """A SIM_HOST value naming ``text``'s port, short enough for umad2sim (31 bytes)."""
    port, problem = resolve(cluster, text)
    if port is None:
        raise InputError([Problem(text, problem)])
    if len(text) <= SIM_HOST_MAX:
        return text
    label = port.node.label
    first = port.node.ports[0] if port.node.is_switch else next(
        (p for p in port.node.iter_ports() if p.peer is not None), None)
    return label if port is first else f"{label}:{port.num}"


def tool_env(inst: Instance, host: str, base: dict | None = None) -> dict[str, str]:
    """The environment a real tool needs to run attached at ``host`` (a SIM_HOST value)."""
    env = dict(os.environ if base is None else base)
    env["LD_PRELOAD"] = umad2sim_path()
    env["SIM_HOST"] = host
    env["IBSIM_SOCKNAME"] = inst.name
    if inst.listen:
        env["IBSIM_SERVER_NAME"], env["IBSIM_SERVER_PORT"] = inst.listen[0], str(inst.listen[1])
    else:
        env.pop("IBSIM_SERVER_NAME", None)
        env.pop("IBSIM_SERVER_PORT", None)
    return env


def control_socket_up(name: str, listen: tuple[str, int] | list | None) -> bool:
    """Whether something answers on the fabric's control socket address."""
    if listen:
        return False  # UDP: a bound port is not visible without sending to it
    try:
        return procfs.abstract_bound(simwire.sockname(name, "ctl"))
    except OSError:
        return False


def check_serving(inst: Instance) -> None:
    """The fabric's control socket must be held by its recorded server: a name (or a
    port) anyone can bind must not send our tools to someone else's server."""
    mine = procfs.socket_inodes(inst.pid)
    try:
        if inst.listen:
            port = int(inst.listen[1])
            held = set()
            for path, v6 in (("/proc/net/udp", False), ("/proc/net/udp6", True)):
                if os.path.exists(path):
                    with open(path, "rb") as f:
                        held |= {s.inode for s in procfs.udp_sockets(f.read(), v6) if s.port == port}
            where = f"UDP port {port}"
        else:
            with open("/proc/net/unix", "rb") as f:
                inode = procfs.unix_inode(f.read(), procfs.shown_name(simwire.sockname(inst.name, "ctl")))
            held = {inode} if inode is not None else set()
            where = f"{inst.name}:ctl"
    except OSError as e:
        raise InputError([Problem(inst.name, f"cannot read the socket tables: {e.strerror}")]) from None
    if not held & mine:
        raise NotRunning([Problem(inst.name, f"{where} is not held by the fabric's server "
                                  f"(pid {inst.pid}): refusing to attach tools to it")])


# --- up / down ----------------------------------------------------------------------------


def stop(name: str, timeout: float = 10.0) -> Instance:
    """SIGTERM the fabric's server (and so its SM); SIGKILL after ``timeout``."""
    inst = Instance.load(name)  # its pid is the recorded process, or this fails
    server = (inst.pid, inst.start, inst.cmdline)
    _signal(*server, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while inst.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    if _signal(*server, signal.SIGKILL):
        while inst.alive():
            time.sleep(0.05)
    if inst.sm_pid:
        _signal(inst.sm_pid, inst.sm_start, inst.sm_cmdline, signal.SIGKILL)
    inst.path.unlink(missing_ok=True)
    return inst


def spawn_detached(argv: list[str], name: str, log: Path, timeout: float = 120.0) -> Instance:
    """Start ``fabriclab up …`` (``argv``) in the background; return once it is up."""
    state_dir(create=True)
    with os.fdopen(open_state_file(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "ab") as out:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                start_new_session=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace").strip().splitlines()[-3:]
            raise InputError([Problem(name, "the fabric server exited: " +
                                      (" / ".join(tail) or f"status {proc.returncode}"))])
        try:
            inst = Instance.load(name)
            if inst.pid == proc.pid:
                return inst
        except NotRunning:
            pass
        time.sleep(0.05)
    proc.kill()
    raise InputError([Problem(name, f"the fabric server did not come up in {timeout:g} s "
                              f"(see {log})")])


def start_sm(inst: Instance, cluster: Cluster, where: str, log_dir: Path) -> subprocess.Popen:
    """Start the real OpenSM attached at ``where``, logging under ``log_dir``."""
    opensm = shutil.which("opensm") or "/usr/sbin/opensm"
    if not os.path.exists(opensm):
        raise InputError([Problem("--sm", "opensm not found (scripts/install-system-deps.sh "
                                  "installs it)")])
    env = tool_env(inst, sim_host(cluster, where))
    cache = log_dir / f"{inst.name}.opensm"
    if cache.is_symlink():
        cache.unlink()
    shutil.rmtree(cache, ignore_errors=True)  # a fresh SM: no LIDs cached from another fabric
    cache.mkdir(mode=0o700, parents=True, exist_ok=True)
    env["OSM_CACHE_DIR"] = env["OSM_TMP_DIR"] = str(cache)
    # OpenSM buffers its log; "SUBNET UP" would sit in the buffer until it exits
    conf = cache / "opensm.conf"
    conf.write_text("# written by fabriclab\nforce_log_flush TRUE\n")
    argv = [opensm, "-F", str(conf), "-f", str(cache / "opensm.log"), "-e"]
    with open(cache / "opensm.stdout", "ab") as out:
        return subprocess.Popen(argv, env=env, cwd=cache, stdin=subprocess.DEVNULL,
                                stdout=out, stderr=out, start_new_session=True,
                                preexec_fn=_die_with_parent)


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM it if the server dies, however it dies."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def subnet_up(inst: Instance) -> bool:
    """Whether the fabric's OpenSM (``--sm``) has logged SUBNET UP."""
    log = state_dir() / f"{inst.name}.opensm" / "opensm.log"
    try:
        with open(log, "rb") as f:
            return b"SUBNET UP" in f.read()
    except OSError:
        return False


# --- shims --------------------------------------------------------------------------------


def write_shims(inst: Instance, cluster: Cluster, node: str, directory: Path) -> list[str]:
    """A bin directory making ``node`` look like a tray with real IB tools: one wrapper
    per tool found on this machine (preloading umad2sim, attached at ``node``), an
    ``nvidia-smi`` answering for the tray's GPUs, and a ``sudo`` that just runs its
    command (topograph runs ``sudo ibnetdiscover``)."""
    host = sim_host(cluster, node)
    directory.mkdir(parents=True, exist_ok=True)
    env = tool_env(inst, host, base={})
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in sorted(env.items()))
    written = []
    for tool in TOOLS:
        real = shutil.which(tool, path="/usr/sbin:/usr/bin:/sbin:/bin")
        if real is None:
            continue
        _script(directory / tool, f"{exports}exec {shlex.quote(real)} \"$@\"\n")
        written.append(tool)
    tray = node.replace("/", ":").split(":")[0]
    if cluster.tray(tray) is not None:
        spec_args = " ".join(shlex.quote(a) for a in _spec_args(inst))
        _script(directory / "nvidia-smi",
                f"exec {shlex.join(fabriclab_argv())} render {spec_args} nvidia-smi "
                f"--from {shlex.quote(tray)} -- \"$@\"\n")
        written.append("nvidia-smi")
    _script(directory / "sudo",
            "# runs the command as the caller: the emulated tray's tools need no root\n"
            "while [ $# -gt 0 ]; do case \"$1\" in -[ugCDhpRrTU]) shift 2 ;; --) shift; break ;;"
            " -*) shift ;; *) break ;; esac; done\n"
            f"PATH={shlex.quote(str(directory))}:$PATH exec \"$@\"\n")
    written.append("sudo")
    return written


def _spec_args(inst: Instance) -> list[str]:
    return [inst.spec] + (["--trays", str(inst.trays)] if inst.trays else [])


def _script(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n# written by fabriclab shims\n" + body)
    path.chmod(0o755)


def python_argv() -> list[str]:
    """How to run this fabriclab again (for ``up --detach``)."""
    return [sys.executable, "-m", "fabriclab.cli"]


def fabriclab_argv() -> list[str]:
    """This fabriclab's command, for scripts: the entry point beside the interpreter
    (a virtualenv's bin), else the interpreter running the module."""
    script = Path(sys.executable).parent / "fabriclab"
    return [str(script)] if script.exists() else python_argv()
