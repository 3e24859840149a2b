"""The records of running fabrics.

A running fabric is known by its name (``IBSIM_SOCKNAME``).  ``up`` writes a small JSON
record under the state directory (``$FABRICLAB_STATE_DIR``, else
``$XDG_RUNTIME_DIR/fabriclab``, else ``/tmp/fabriclab-<uid>``) saying which spec it
serves, its pid and how to reach it; ``down``, ``status``, ``exec`` and ``shims`` read it.

That directory may sit where other users can create files (``/tmp``), so it is created
0700 and used only when it is a real directory (not a symbolic link) owned by the user
and writable by nobody else; files in it are opened without following symbolic links.
A record names its processes by pid, start time and command: a pid alone may have been
reused by another process, which is never signalled.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import stat
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import FabriclabError, InputError, Problem
from . import procfs


class NotRunning(FabriclabError):
    """The named fabric is not up."""


class UnsafeState(InputError):
    """The state directory, or a file in it, could be someone else's."""


def state_dir(create: bool = False) -> Path:
    """The state directory, checked (and with ``create``, made 0700 if missing)."""
    d = os.environ.get("FABRICLAB_STATE_DIR")
    run = os.environ.get("XDG_RUNTIME_DIR")
    path = (
        Path(d)
        if d
        else Path(run) / "fabriclab"
        if run
        else Path(tempfile.gettempdir()) / f"fabriclab-{os.geteuid()}"
    )
    if create:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        except OSError as e:
            raise InputError(
                [Problem(str(path), f"cannot create the state directory: {e.strerror}")]
            ) from None
    _check_state_dir(path)
    return path


def _check_state_dir(path: Path) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as e:
        raise UnsafeState(
            [Problem(str(path), f"cannot use the state directory: {e.strerror}")]
        ) from None
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
        raise UnsafeState(
            [
                Problem(
                    str(path),
                    f"state directory {why}: refusing to use it "
                    "(remove it, or set FABRICLAB_STATE_DIR)",
                )
            ]
        )


def open_state_file(path: Path, flags: int, mode: int = 0o600) -> int:
    """A file in the state directory, never through a symbolic link, and only if it is
    the user's own regular file; a descriptor."""
    try:  # (O_NONBLOCK: a FIFO planted there must not hang us; no effect on a file)
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, mode)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UnsafeState(
                [Problem(str(path), "is a symbolic link: refusing to use it")]
            ) from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        os.close(fd)
        what = "not a regular file" if not stat.S_ISREG(st.st_mode) else f"owned by uid {st.st_uid}"
        raise UnsafeState([Problem(str(path), f"is {what}: refusing to use it")])
    return fd


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
        """Where this record is kept."""
        return record_path(self.name)

    def alive(self) -> bool:
        """Whether the recorded server is still running."""
        return self.process_state() == "alive"

    def process_state(self) -> str:
        """'alive' (pid is still the recorded process), 'gone', 'reused' (another
        process has the pid) or 'unknown' (no start time recorded)."""
        return _process_state(self.pid, self.start, self.cmdline)

    def note_server(self, pid: int) -> None:
        """Record the server's process (pid, start time, command)."""
        self.pid = pid
        self.start, self.cmdline = _identity(pid)

    def note_sm(self, pid: int) -> None:
        """Record OpenSM's process (pid, start time, command)."""
        self.sm_pid = pid
        self.sm_start, self.sm_cmdline = _identity(pid)

    def save(self) -> None:
        """Write the record (atomically, as the user's own file)."""
        state_dir(create=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.unlink(missing_ok=True)
        fd = open_state_file(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(asdict(self), indent=1))
        tmp.replace(self.path)

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
