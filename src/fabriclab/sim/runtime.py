"""Running fabrics: starting and stopping servers, attaching real tools to them.

A running fabric is known by its name (``IBSIM_SOCKNAME``).  ``up`` writes a small JSON
record under the state directory (``$FABRICLAB_STATE_DIR``, else
``$XDG_RUNTIME_DIR/fabriclab``, else ``/tmp/fabriclab-<uid>``) saying which spec it
serves, its pid and how to reach it; ``down``, ``exec`` and ``shims`` read it.

A tool attaches through Debian's ``libumad2sim.so``, preloaded, with ``SIM_HOST``
naming the port it runs on.  That library has limits of its own, which no server can
lift: it shows each process a single device ``ibsim0`` of type "simulator", it creates a
``./sys-<pid>`` directory in the tool's working directory (so that must be writable),
and the sysfs ``rate`` it writes is computed for speeds up to HDR (an NDR port reads
about 104 Gb/sec).  Everything that travels in MADs is exact.
"""

from __future__ import annotations

import glob
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import FabriclabError, InputError, Problem
from ..model.cluster import Cluster, find_port
from ..model.fabric import Port
from . import wire

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


def state_dir() -> Path:
    d = os.environ.get("FABRICLAB_STATE_DIR")
    if d:
        return Path(d)
    run = os.environ.get("XDG_RUNTIME_DIR")
    return Path(run) / "fabriclab" if run else Path(tempfile.gettempdir()) / f"fabriclab-{os.getuid()}"


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

    @property
    def path(self) -> Path:
        return record_path(self.name)

    def alive(self) -> bool:
        return _alive(self.pid)

    def save(self) -> None:
        d = state_dir()
        d.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=1))
        tmp.replace(self.path)

    @classmethod
    def load(cls, name: str) -> "Instance":
        p = record_path(name)
        try:
            data = json.loads(p.read_text())
            inst = cls(**data)
        except FileNotFoundError:
            raise NotRunning([Problem(name, f"no fabric named {name!r} is up "
                                      f"(nothing in {state_dir()})")]) from None
        except (ValueError, TypeError) as e:
            raise NotRunning([Problem(str(p), f"unreadable state record: {e}")]) from None
        if not inst.alive():
            p.unlink(missing_ok=True)
            raise NotRunning([Problem(name, f"fabric {name!r} is not running "
                                      f"(pid {inst.pid} is gone; stale record removed)")])
        return inst


def record_path(name: str) -> Path:
    return state_dir() / f"{name}.json"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is gone
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


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
    return (host or "127.0.0.1", p)


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
    want = "@" + wire.sockname(name, "ctl")[1:-1].decode()
    try:
        with open("/proc/net/unix") as f:
            return any(line.rstrip().rstrip("@").endswith(want) for line in f)
    except OSError:
        return False


# --- up / down ----------------------------------------------------------------------------


def stop(name: str, timeout: float = 10.0) -> Instance:
    """SIGTERM the fabric's server (and so its SM); SIGKILL after ``timeout``."""
    inst = Instance.load(name)
    os.kill(inst.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while inst.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    if inst.alive():
        os.kill(inst.pid, signal.SIGKILL)
        while inst.alive():
            time.sleep(0.05)
    if inst.sm_pid and _alive(inst.sm_pid):
        os.kill(inst.sm_pid, signal.SIGKILL)
    inst.path.unlink(missing_ok=True)
    return inst


def spawn_detached(argv: list[str], name: str, log: Path, timeout: float = 120.0) -> Instance:
    """Start ``fabriclab up …`` (``argv``) in the background; return once it is up."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
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
    shutil.rmtree(cache, ignore_errors=True)  # a fresh SM: no LIDs cached from another fabric
    cache.mkdir(parents=True, exist_ok=True)
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
