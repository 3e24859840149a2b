"""Attaching real tools to a running fabric.

Two ways in, both preloaded into the tool:

- fabriclab's host library (:mod:`..host.hostlib`), for a tool on a tray: the tray's HCAs
  as a host sees them (``mlx5_0`` ... with their rates, GUIDs and a live /sys tree),
  any number of devices and agents in one process, whole RMPP tables, the kernel's
  timeouts; it speaks :mod:`fabriclab.ib.hostwire` to a local server.
- Debian's ``libumad2sim.so`` (ibsim's protocol, also over UDP to a remote server),
  with ``SIM_HOST`` naming the port it runs on (a tray, ``HOST:HCA[:PORT]``, a CA or
  switch: :meth:`fabriclab.model.cluster.Cluster.locate`).  That library has limits of
  its own, which no server can lift: it shows each process a single device ``ibsim0``
  of type "simulator", it creates a ``./sys-<pid>`` directory in the tool's working
  directory (so that must be writable), and the sysfs ``rate`` it writes is computed
  for speeds up to HDR (an NDR port reads about 104 Gb/sec).

``auto`` takes the host library for a tray of a local fabric, umad2sim for anything
else.  Before a tool is sent to a fabric, the fabric's control socket must be its
recorded server's; ``shims`` writes a bin directory of wrappers that attach each tool.
"""

from __future__ import annotations

import glob
import os
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from ... import safedir
from ...errors import FabriclabError, InputError, Problem
from ...formats import nccl_tests
from ...ib import hostwire, simwire
from ...model.cluster import Cluster
from ...statedir import state_dir
from ..host import hostlib
from ..host import sysfs as sysfs_tree
from ..lan import lldp as lan_lldp
from ..lan.names import endpoint_namespace, in_namespace
from ..wire import procfs
from ..wire.hostlink import host_socket
from . import admin
from .records import Instance, NotRunning, is_up

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


WAYS = ("auto", "hostlib", "umad2sim")


def host_env(inst: Instance, tray: str, base: dict | None = None) -> dict[str, str]:
    """The environment a real tool needs to run on tray ``tray`` through the host
    library: the fabric's name, its socket and its owner (the uid the library holds
    the server to: this user's, as the record is in this user's state directory)."""
    path = inst.host_socket or str(host_socket(state_dir(), inst.name))
    env = dict(os.environ if base is None else base)
    for k in ("SIM_HOST", "IBSIM_SOCKNAME", "IBSIM_SERVER_NAME", "IBSIM_SERVER_PORT"):
        env.pop(k, None)
    env["LD_PRELOAD"] = hostlib.library_path()
    env["FABRICLAB_SOCKNAME"] = inst.name
    env["FABRICLAB_HOST_SOCKET"] = path
    env["FABRICLAB_OWNER"] = str(os.geteuid())
    env["FABRICLAB_TRAY"] = tray
    return env


def attach_env(
    inst: Instance, cluster: Cluster, node: str, via: str = "auto", base: dict | None = None
) -> tuple[str, dict[str, str]]:
    """The way a tool at ``node`` attaches (``via``: one of WAYS) and its environment."""
    if via not in WAYS:
        raise InputError([Problem("--via", f"{via!r}: not one of {', '.join(WAYS)}")])
    tray = cluster.tray(node)
    if via == "auto":
        via = "hostlib" if tray is not None and not inst.listen else "umad2sim"
    if via == "umad2sim":
        return via, tool_env(inst, sim_host(cluster, node), base)
    if inst.listen:
        raise InputError(
            [Problem(inst.name, "is served over UDP; the host library attaches to a local fabric")]
        )
    if tray is None:
        port, problem = cluster.locate(node, switches=True)
        if port is None:
            raise InputError([Problem(node, problem)])
        raise InputError(
            [
                Problem(
                    node,
                    "the host library runs a tool on a tray (a host name; -C picks the HCA); "
                    "for a switch or a single port use --via umad2sim",
                )
            ]
        )
    return via, host_env(inst, tray.host, base)


def tray_tree(name: str, tray: str, timeout: float = 10.0) -> Path:
    """Where the running fabric ``name`` keeps tray ``tray``'s /sys tree (made fresh)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(timeout)
    try:
        s.connect(str(host_socket(state_dir(), name)))
        s.send(
            hostwire.HELLO.pack(
                hostwire.MAGIC,
                hostwire.VERSION,
                hostwire.KIND_TREE,
                os.getpid(),
                0,
                0,
                0,
                tray.encode()[: hostwire.TRAY_MAX],
            )
        )
        raw = s.recv(hostwire.REPLY.size + hostwire.TEXT_MAX)
    except OSError as e:
        raise NotRunning(
            [Problem(name, f"its host socket does not answer: {e.strerror or e}")]
        ) from None
    finally:
        s.close()
    if len(raw) < hostwire.REPLY.size:
        raise NotRunning([Problem(name, "its host socket closed without an answer")])
    _magic, err, _token, _value = hostwire.REPLY.unpack_from(raw)
    text = raw[hostwire.REPLY.size :].decode(errors="replace")
    if err:
        raise InputError([Problem(tray, text.split(": ", 1)[-1] if text else os.strerror(err))])
    return Path(text)


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


def exec_tool(
    name: str, node: str, command: list[str], load: Loader, say: Say, via: str = "auto"
) -> None:
    """Replace this process with ``command`` run as if on ``node`` of the running fabric
    ``name``, attached ``via`` the host library or umad2sim (umad2sim: in a fresh
    directory when this one is not writable, as it writes ./sys-<pid>)."""
    inst = Instance.load(name)
    check_serving(inst)
    cluster = load(inst.spec, inst.trays)
    ns = endpoint_namespace(name, cluster.networks, node)
    if ns is not None and cluster.tray(node) is None:  # a BMC, service node or switch
        way, env = "netns", dict(os.environ)
    else:
        way, env = attach_env(inst, cluster, node, via)
    exe = _which(command[0], env)
    argv = [command[0], *command[1:]]
    if ns is not None:
        if command[0] in ("lldpctl", "lldpcli") and "-u" not in command:
            argv[1:1] = ["-u", str(lan_lldp.socket(name, node))]
        argv, exe = [*in_namespace(ns), exe, *argv[1:]], _which("ip", env)
    if way == "umad2sim" and not os.access(os.getcwd(), os.W_OK):
        tmp = tempfile.mkdtemp(prefix="fabriclab-exec-")
        say(f"warning: {os.getcwd()} is not writable; running in {tmp}")
        os.chdir(tmp)
    sys.stdout.flush()
    os.execve(exe, argv, env)


def _which(tool: str, env: dict[str, str]) -> str:
    exe = shutil.which(tool, path=env.get("PATH", "") + ":/usr/sbin:/sbin")
    if exe is None:
        raise InputError([Problem(tool, "command not found")])
    return exe


# The private mount namespace ``exec --mount`` runs a command in: /sys/class becomes a
# tmpfs holding the machine's classes again (bound back one by one) and the tray's
# infiniband and infiniband_mad trees, so a program reading sysfs directly (a static
# binary, a script) sees the tray.  Arguments: the machine's /sys/class bound aside, the
# tray's tree, then the command.
_MOUNT_SCRIPT = """set -e
aside=$1 tree=$2; shift 2
mount --bind /sys/class "$aside"
mount -t tmpfs -o mode=0755 fabriclab-class /sys/class
for d in "$aside"/*; do
    n=${d##*/}
    case $n in infiniband|infiniband_mad) continue ;; esac
    mkdir "/sys/class/$n" && mount --bind "$d" "/sys/class/$n"
done
for n in infiniband infiniband_mad; do
    mkdir "/sys/class/$n" && mount --bind "$tree/class/$n" "/sys/class/$n"
done
exec "$@"
"""
_TREE_REFRESH = 10.0  # seconds between asks for the tree while the command runs


def exec_mounted(name: str, tray: str, command: list[str], load: Loader) -> int:
    """Run ``command`` in a private mount namespace where /sys/class/infiniband is tray
    ``tray``'s live tree (root only); its exit status."""
    inst = Instance.load(name)
    check_serving(inst)
    cluster = load(inst.spec, inst.trays)
    if cluster.tray(tray) is None:
        hint = cluster.did_you_mean(tray, trays=True)
        raise InputError(
            [Problem(tray, f"no such tray in this fabric{hint} (--mount takes a tray)")]
        )
    if os.geteuid() != 0:
        raise InputError([Problem("--mount", "needs root (it makes a private mount namespace)")])
    unshare = shutil.which("unshare")
    if unshare is None:
        raise InputError([Problem("--mount", "unshare not found (util-linux)")])
    exe = _which(command[0], dict(os.environ))
    tree = tray_tree(name, tray)
    ns = endpoint_namespace(name, cluster.networks, tray)  # (its own /sys first: see there)
    with tempfile.TemporaryDirectory(prefix="fabriclab-mount-") as aside:
        argv = [unshare, "-m", "--propagation", "private", "sh", "-c", _MOUNT_SCRIPT, "sh"]
        argv = [*in_namespace(ns), *argv] if ns is not None else argv
        proc = subprocess.Popen([*argv, aside, str(tree), exe, *command[1:]])
        while True:
            try:
                return proc.wait(_TREE_REFRESH)
            except subprocess.TimeoutExpired:
                try:
                    tray_tree(name, tray)  # keeps the server writing it
                except FabriclabError:
                    pass
            except KeyboardInterrupt:
                proc.wait()
                raise


# --- what a tray's programs read: nvidia-smi, /sys/class/infiniband ------------------------


def nvidia_smi(name: str, tray: str, args: list[str]) -> str:
    """What ``nvidia-smi ARGS`` prints on ``tray`` of the running fabric ``name`` now."""
    return admin.request(name, {"op": "nvidia-smi", "tray": tray, "args": args})["text"]


def keep_sysfs(name: str, tray: str, root: Path, period: float, once: bool = False) -> int:
    """Write ``tray``'s /sys/class/infiniband under ``root`` from the running fabric
    ``name`` every ``period`` seconds until the fabric stops (or once); how many times it
    was written.  Only a first request that fails is an error: a fabric that stops later
    (its connection refused or reset on the way) leaves the tree as it last was."""
    first = True

    def fetch() -> dict | None:
        nonlocal first
        try:
            view = admin.request(name, {"op": "tray", "host": tray}, timeout=60)
        except (FabriclabError, OSError):
            if first or is_up(name):
                raise
            return None
        first = False
        return view

    return sysfs_tree.keep_live(fetch, root, period, once=once)


# --- shims --------------------------------------------------------------------------------


def shims(name: str, node: str, directory: Path, load: Loader, via: str = "auto") -> list[str]:
    """:func:`write_shims` for the running fabric ``name``; the wrappers written."""
    inst = Instance.load(name)
    return write_shims(inst, load(inst.spec, inst.trays), node, directory, via)


def write_shims(
    inst: Instance, cluster: Cluster, node: str, directory: Path, via: str = "auto"
) -> list[str]:
    """A bin directory making ``node`` look like a tray with real IB tools: one wrapper
    per tool found on this machine (attached at ``node`` ``via`` the host library or
    umad2sim), an ``nvidia-smi`` answering for the tray's GPUs, and a ``sudo`` that just
    runs its command (topograph runs ``sudo ibnetdiscover``)."""
    _way, env = attach_env(inst, cluster, node, via, base={})
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in sorted(env.items()))
    scripts: dict[str, str] = {}
    for tool in TOOLS:
        real = shutil.which(tool, path="/usr/sbin:/usr/bin:/sbin:/bin")
        if real is not None:
            scripts[tool] = f'{exports}exec {shlex.quote(real)} "$@"\n'
    tray = node.replace("/", ":").split(":")[0]
    if cluster.tray(tray) is not None:
        # answered by the running fabric: its NVLink faults show
        scripts["nvidia-smi"] = (
            f"exec {shlex.join(fabriclab_argv())} nvidia-smi --name {shlex.quote(inst.name)} "
            f'{shlex.quote(tray)} -- "$@"\n'
        )
        # nccl-tests' binaries, timed on the model, their bytes put on the fabric
        for binary in nccl_tests.BINARIES:
            scripts[binary] = (
                f"exec {shlex.join(fabriclab_argv())} nccl-tests --name {shlex.quote(inst.name)} "
                f'--on {shlex.quote(tray)} --apply -- {binary} "$@"\n'
            )
    scripts["sudo"] = (
        "# runs the command as the caller: the emulated tray's tools need no root\n"
        'while [ $# -gt 0 ]; do case "$1" in -[ugCDhpRrTU]) shift 2 ;; --) shift; break ;;'
        " -*) shift ;; *) break ;; esac; done\n"
        f'PATH={shlex.quote(str(directory))}:$PATH exec "$@"\n'
    )
    # a directory another user could reach: nothing in it may be theirs, no link followed
    with safedir.open_dir(directory) as d:
        d.check_entries()
        for tool, body in scripts.items():
            d.write(tool, f"#!/bin/sh\n# written by fabriclab shims\n{body}".encode(), 0o755)
    return list(scripts)


def python_argv() -> list[str]:
    """How to run this fabriclab again (for ``up --detach``)."""
    return [sys.executable, "-m", "fabriclab.cli"]


def fabriclab_argv() -> list[str]:
    """This fabriclab's command, for scripts: the entry point beside the interpreter
    (a virtualenv's bin), else the interpreter running the module."""
    script = Path(sys.executable).parent / "fabriclab"
    return [str(script)] if script.exists() else python_argv()
