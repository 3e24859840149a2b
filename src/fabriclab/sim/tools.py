"""Attaching real tools to a running fabric.

A tool attaches through Debian's ``libumad2sim.so``, preloaded, with ``SIM_HOST``
naming the port it runs on (a tray, ``HOST:HCA[:PORT]``, a CA or switch:
:meth:`fabriclab.model.cluster.Cluster.locate`).  That library has limits of its own,
which no server can lift: it shows each process a single device ``ibsim0`` of type
"simulator", it creates a ``./sys-<pid>`` directory in the tool's working directory (so
that must be writable), and the sysfs ``rate`` it writes is computed for speeds up to
HDR (an NDR port reads about 104 Gb/sec).  Everything that travels in MADs is exact.

Before a tool is sent to a fabric, the fabric's control socket must be its recorded
server's; ``shims`` writes a bin directory of wrappers that attach each tool.
"""

from __future__ import annotations

import glob
import os
import shlex
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from ..errors import InputError, Problem
from ..ib import simwire
from ..model.cluster import Cluster
from . import procfs
from .records import Instance, NotRunning

UMAD2SIM_GLOBS = (
    "/usr/lib/*/umad2sim/libumad2sim.so",
    "/usr/lib64/umad2sim/libumad2sim.so",
    "/usr/lib/umad2sim/libumad2sim.so",
)
SIM_HOST_MAX = 31  # sim_client_info.nodeid is char[32]
Loader = Callable[[str, "int | None"], Cluster]  # (spec, trays) -> the cluster
Say = Callable[[str], None]  # a line for the user (stderr)
# The tools a tray runs, found on PATH (Debian: /usr/sbin for infiniband-diags and opensm).
TOOLS = (
    "ibnetdiscover",
    "iblinkinfo",
    "ibqueryerrors",
    "ibstat",
    "ibstatus",
    "ibaddr",
    "ibroute",
    "ibtracert",
    "ibswitches",
    "ibhosts",
    "ibnodes",
    "ibrouters",
    "smpquery",
    "saquery",
    "sminfo",
    "perfquery",
    "ibportstate",
    "ibsysstat",
    "ibping",
    "dump_lfts.sh",
    "dump_mfts.sh",
    "ibcacheedit",
    "ibccquery",
    "ibccconfig",
    "opensm",
)


def umad2sim_path() -> str:
    """Where Debian's libumad2sim.so is; ``$FABRICLAB_UMAD2SIM`` overrides."""
    override = os.environ.get("FABRICLAB_UMAD2SIM")
    if override:
        return override
    for pattern in UMAD2SIM_GLOBS:
        hits = sorted(glob.glob(pattern))
        if hits:
            return hits[0]
    raise InputError(
        [
            Problem(
                "libumad2sim.so",
                "not found: install libumad2sim0 (scripts/install-system-deps.sh does)",
            )
        ]
    )


def sim_host(cluster: Cluster, text: str) -> str:
    """A SIM_HOST value naming ``text``'s port, short enough for umad2sim (31 bytes)."""
    port, problem = cluster.locate(text, switches=True)
    if port is None:
        raise InputError([Problem(text, problem)])
    if len(text) <= SIM_HOST_MAX:
        return text
    label = port.node.label
    first = (
        port.node.ports[0]
        if port.node.is_switch
        else next((p for p in port.node.iter_ports() if p.peer is not None), None)
    )
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
                        held |= {
                            s.inode for s in procfs.udp_sockets(f.read(), v6) if s.port == port
                        }
            where = f"UDP port {port}"
        else:
            with open(procfs.UNIX_TABLE, "rb") as f:
                shown = procfs.shown_name(simwire.sockname(inst.name, "ctl"))
                inode = procfs.unix_inode(f.read(), shown)
            held = {inode} if inode is not None else set()
            where = f"{inst.name}:ctl"
    except OSError as e:
        raise InputError(
            [Problem(inst.name, f"cannot read the socket tables: {e.strerror}")]
        ) from None
    if not held & mine:
        raise NotRunning(
            [
                Problem(
                    inst.name,
                    f"{where} is not held by the fabric's server "
                    f"(pid {inst.pid}): refusing to attach tools to it",
                )
            ]
        )


def exec_tool(name: str, node: str, command: list[str], load: Loader, say: Say) -> None:
    """Replace this process with ``command`` run as if on ``node`` of the running fabric
    ``name`` (in a fresh directory when this one is not writable: umad2sim writes
    ./sys-<pid>)."""
    inst = Instance.load(name)
    check_serving(inst)
    cluster = load(inst.spec, inst.trays)
    env = tool_env(inst, sim_host(cluster, node))
    exe = shutil.which(command[0], path=env.get("PATH", "") + ":/usr/sbin:/sbin")
    if exe is None:
        raise InputError([Problem(command[0], "command not found")])
    if not os.access(os.getcwd(), os.W_OK):
        tmp = tempfile.mkdtemp(prefix="fabriclab-exec-")
        say(f"warning: {os.getcwd()} is not writable; running in {tmp}")
        os.chdir(tmp)
    sys.stdout.flush()
    os.execve(exe, [command[0], *command[1:]], env)


# --- shims --------------------------------------------------------------------------------


def shims(name: str, node: str, directory: Path, load: Loader) -> list[str]:
    """:func:`write_shims` for the running fabric ``name``; the wrappers written."""
    inst = Instance.load(name)
    return write_shims(inst, load(inst.spec, inst.trays), node, directory)


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
        _script(directory / tool, f'{exports}exec {shlex.quote(real)} "$@"\n')
        written.append(tool)
    tray = node.replace("/", ":").split(":")[0]
    if cluster.tray(tray) is not None:
        # answered by the running fabric: its NVLink faults show
        _script(
            directory / "nvidia-smi",
            f"exec {shlex.join(fabriclab_argv())} nvidia-smi --name {shlex.quote(inst.name)} "
            f'{shlex.quote(tray)} -- "$@"\n',
        )
        written.append("nvidia-smi")
    _script(
        directory / "sudo",
        "# runs the command as the caller: the emulated tray's tools need no root\n"
        'while [ $# -gt 0 ]; do case "$1" in -[ugCDhpRrTU]) shift 2 ;; --) shift; break ;;'
        " -*) shift ;; *) break ;; esac; done\n"
        f'PATH={shlex.quote(str(directory))}:$PATH exec "$@"\n',
    )
    written.append("sudo")
    return written


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
