"""The state directory: where running fabrics keep their records, sockets, logs, event
logs, journals and trays' trees.

It is ``$FABRICLAB_STATE_DIR``, else ``$XDG_RUNTIME_DIR/fabriclab``, else
``/tmp/fabriclab-<uid>``.  That may sit where other users can create files (``/tmp``), so
it is created 0700 and used only when it is a real directory (not a symbolic link) owned
by the user and writable by nobody else; files in it are opened without following
symbolic links.
"""

from __future__ import annotations

import errno
import os
import socket
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from .errors import InputError, Problem

SUN_PATH_MAX = 107  # sockaddr_un.sun_path is 108 bytes with its NUL (unix(7))


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


def replace_state_file(path: Path, write: Callable[[BinaryIO], object], tag: str = "") -> None:
    """Replace ``path`` (a file in the state directory) atomically with what ``write``
    writes to a new file beside it (``<name>[.tag].tmp``: ``tag`` keeps writers in
    several processes apart), made 0600 and never through a symbolic link."""
    tmp = path.with_name(f"{path.name}{'.' + tag if tag else ''}.tmp")
    tmp.unlink(missing_ok=True)
    fd = open_state_file(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    with os.fdopen(fd, "wb") as f:
        write(f)
    tmp.replace(path)


def bind_socket(path: Path, kind: int) -> socket.socket:
    """A Unix socket of ``kind`` bound at ``path`` in the state directory, born 0600 (a
    stale socket of ours, left by a killed server, is replaced; any other file there
    is refused)."""
    if len(os.fsencode(path)) > SUN_PATH_MAX:
        raise InputError(
            [Problem(str(path), "path too long for a Unix socket (set FABRICLAB_STATE_DIR)")]
        )
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None:
        if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.geteuid():
            raise UnsafeState([Problem(str(path), "exists and is not our socket")])
        os.unlink(path)
    s = socket.socket(socket.AF_UNIX, kind)
    old = os.umask(0o177)
    try:
        s.bind(os.fspath(path))
    except OSError:
        s.close()
        raise
    finally:
        os.umask(old)
    return s
