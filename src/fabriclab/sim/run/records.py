"""The records of running fabrics.

A running fabric is known by its name (``IBSIM_SOCKNAME``).  ``up`` writes a small JSON
record under the state directory (:mod:`fabriclab.statedir`) saying which spec it serves,
its pid and how to reach it; ``down``, ``status``, ``exec`` and ``shims`` read it.  A
record names its processes by pid, start time and command: a pid alone may have been
reused by another process, which is never signalled.
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ...errors import FabriclabError, InputError, Problem
from ...ib import simwire
from ...ib.simwire import DEFAULT_NAME
from ...statedir import open_state_file, replace_state_file, state_dir
from ..lan import names as lan_names
from ..wire import procfs


class NotRunning(FabriclabError):
    """The named fabric is not up."""


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
    host_socket: str | None = None  # the host library's socket (a local fabric's)
    host_listen: list | None = None  # [host, port]: the host library over TCP
    host_token: str | None = None  # ... and the file holding its token

    @property
    def path(self) -> Path:
        """Where this record is kept."""
        return record_path(self.name)

    def alive(self) -> bool:
        """Whether the recorded server is still running."""
        return self.process_state() == "alive"

    def process_state(self) -> str:
        """'alive' (pid is still the recorded process), 'gone', 'reused' (another
        process has the pid) or 'unknown' (no start time recorded)."""
        return process_state_of(self.pid, self.start, self.cmdline)

    def note_server(self, pid: int) -> None:
        """Record the server's process (pid, start time, command)."""
        self.pid = pid
        self.start, self.cmdline = process_identity(pid)

    def note_sm(self, pid: int) -> None:
        """Record OpenSM's process (pid, start time, command)."""
        self.sm_pid = pid
        self.sm_start, self.sm_cmdline = process_identity(pid)

    def save(self) -> None:
        """Write the record (atomically, as the user's own file)."""
        state_dir(create=True)
        data = json.dumps(asdict(self), indent=1).encode()
        replace_state_file(self.path, lambda f: f.write(data))

    @classmethod
    def load(cls, name: str) -> Instance:
        """The record of fabric ``name`` if its server still runs; NotRunning if not
        (a stale record is removed)."""
        p = record_path(name)
        try:
            with os.fdopen(open_state_file(p, os.O_RDONLY)) as f:
                data = json.loads(f.read())
            inst = cls(**data)
            if not isinstance(inst.pid, int) or not isinstance(inst.sm_pid, (int, type(None))):
                raise TypeError("pids are not numbers")
        except FileNotFoundError:
            raise NotRunning(
                [Problem(name, f"no fabric named {name!r} is up (nothing in {state_dir()})")]
            ) from None
        except (ValueError, TypeError) as e:
            raise NotRunning([Problem(str(p), f"unreadable state record: {e}")]) from None
        except OSError as e:
            raise NotRunning(
                [Problem(str(p), f"cannot read the state record: {e.strerror}")]
            ) from None
        state = inst.process_state()
        if state == "unknown":
            raise NotRunning(
                [
                    Problem(
                        str(p),
                        f"the record does not say which process pid "
                        f"{inst.pid} was (no start time): refusing to use it; "
                        "stop that fabric yourself and remove the record",
                    )
                ]
            )
        if state != "alive":
            p.unlink(missing_ok=True)
            why = "is gone" if state == "gone" else "is now another process"
            raise NotRunning(
                [
                    Problem(
                        name,
                        f"fabric {name!r} is not running "
                        f"(pid {inst.pid} {why}; stale record removed)",
                    )
                ]
            )
        return inst


def record_path(name: str) -> Path:
    """Where the record of fabric ``name`` is."""
    return state_dir() / f"{name}.json"


def process_identity(pid: int) -> tuple[int | None, list | None]:
    """Process ``pid``'s start time and command, to know it again later."""
    p = procfs.process(pid)
    return (p.start, list(p.cmdline)) if p else (None, None)


def process_state_of(pid: int, start: int | None, cmdline: list | None) -> str:
    """Whether ``pid`` is still the process of that start and command: 'alive', 'gone',
    'reused' or 'unknown'."""
    if start is None or cmdline is None:
        return "unknown"
    p = procfs.process(pid)
    if p is None:
        return "gone"
    return "alive" if (p.start, list(p.cmdline)) == (start, cmdline) else "reused"


def signal_recorded(pid: int, start: int | None, cmdline: list | None, sig: int) -> bool:
    """Send ``sig`` to ``pid`` if it is still the recorded process; whether it was.  A
    pidfd pins the process between the check and the signal (Linux 5.3+)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    except (OSError, AttributeError):
        fd = None
    try:
        if process_state_of(pid, start, cmdline) != "alive":
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
    """A fabric's name must be a short file name (it names its record and sockets)."""
    if not name or len(name) > 80 or any(c in name for c in "/\0 \t\n"):
        raise InputError(
            [Problem("--name", f"{name!r}: use a short name without '/', spaces or NULs")]
        )


def running() -> list[Instance]:
    """The fabrics that are up, by name (records of fabrics that are not are removed)."""
    d = state_dir()
    out = []
    for rec in sorted(d.glob("*.json")) if d.is_dir() else []:
        try:
            out.append(Instance.load(rec.stem))
        except FabriclabError:
            continue
    return out


def choose(name: str | None, default: str = DEFAULT_NAME) -> str:
    """The fabric a command means: ``name`` when given; else ``default`` if it is up;
    else the only fabric that is up; else NotRunning listing those that are up (or saying
    none is)."""
    if name is not None:
        check_name(name)
        return name
    up = [inst.name for inst in running()]
    if default in up:
        return default
    if len(up) == 1:
        return up[0]
    if not up:
        raise NotRunning(
            [Problem(default, f"no fabric named {default!r} is up, nor any other ({state_dir()})")]
        )
    raise NotRunning(
        [
            Problem(
                default,
                f"no fabric named {default!r} is up; up: {', '.join(up)} — name one with --name",
            )
        ]
    )


def is_up(name: str) -> bool:
    """Whether fabric ``name`` is up (its server still the recorded process)."""
    try:
        Instance.load(name)
    except FabriclabError:
        return False
    return True


def stop(name: str, timeout: float = 10.0) -> Instance:
    """SIGTERM the fabric's server (which stops its SM and removes its networks' namespaces);
    SIGKILL after ``timeout`` (and its SM, if it is still there, and the namespaces)."""
    inst = Instance.load(name)  # its pid is the recorded process, or this fails
    server = (inst.pid, inst.start, inst.cmdline)
    signal_recorded(*server, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while inst.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    if signal_recorded(*server, signal.SIGKILL):
        while inst.alive():
            time.sleep(0.05)
    if inst.sm_pid:
        signal_recorded(inst.sm_pid, inst.sm_start, inst.sm_cmdline, signal.SIGKILL)
    clean_networks(name)
    inst.path.unlink(missing_ok=True)
    return inst


def clean_networks(name: str) -> int:
    """Remove what a killed server of fabric ``name`` left of its networks (root only):
    its namespaces and the processes in them; how many namespaces."""
    if os.geteuid() != 0 or not lan_names.existing(name):
        return 0
    from ..lan.build import teardown  # (netlink loaded only when there is work for it)

    return len(teardown(name))


def check_name_free(name: str, local: bool) -> None:
    """No fabric named ``name`` may be up, and (``local``) its control socket name, an
    abstract one (libumad2sim knows no other) that any local user can bind, must be
    free: who holds it is said."""
    try:
        already = Instance.load(name)
        raise InputError(
            [
                Problem(
                    name,
                    f"fabric {name!r} is already up (pid {already.pid}, {already.spec}); "
                    f"'fabriclab down --name {name}' first",
                )
            ]
        )
    except NotRunning:
        pass
    address = simwire.sockname(name, "ctl")
    try:
        taken = local and procfs.abstract_bound(address)
    except OSError:
        return  # no socket table to read: bind() will say
    if taken:
        shown = procfs.shown_name(address).decode(errors="replace").rstrip("@")
        raise InputError(
            [
                Problem(
                    name,
                    f"the socket name '{shown}' is held by {procfs.abstract_holder(address)}",
                )
            ]
        )
