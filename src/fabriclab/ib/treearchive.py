"""A tray's /sys tree as the host protocol sends it over TCP (:mod:`.hostwire`): packed
from the directory the server would name on its unix socket, and read back checked.

An archive is a sequence of entries, each :data:`.hostwire.ENTRY` (type, 0, the
path's length, the data's length), the path (relative, '/'-separated, no '.' or '..'
component, no NUL, at most ENTRY_PATH_MAX bytes) and the data (a file's content, a
symlink's target, nothing for a directory); a directory comes before what it holds.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass
from pathlib import Path

from . import hostwire as hw


class TreeError(ValueError):
    """An archive (or a tree to pack) that breaks the rules above."""


@dataclass(frozen=True)
class Entry:
    """One entry of an archive."""

    kind: int  # ENTRY_DIR, ENTRY_FILE or ENTRY_SYMLINK
    path: str
    data: bytes = b""


def pack(root: Path, limit: int = hw.TREE_MAX) -> bytes:
    """The archive of the directory ``root`` (directories first, then what they hold, in
    name order); TreeError past ``limit`` bytes or for an entry it cannot carry."""
    out = bytearray()

    def put(kind: int, rel: str, data: bytes) -> None:
        path = rel.encode()
        if len(path) > hw.ENTRY_PATH_MAX:
            raise TreeError(f"{rel}: a path longer than {hw.ENTRY_PATH_MAX} bytes")
        out.extend(hw.ENTRY.pack(kind, 0, len(path), len(data)))
        out.extend(path)
        out.extend(data)
        if len(out) > limit:
            raise TreeError(f"{root}: the tree is larger than {limit} bytes")

    def walk(d: Path, rel: str) -> None:
        with os.scandir(d) as it:
            items = sorted(it, key=lambda e: e.name)
        for e in items:
            sub = f"{rel}/{e.name}" if rel else e.name
            if e.is_symlink():
                put(hw.ENTRY_SYMLINK, sub, os.readlink(e.path).encode())
            elif e.is_dir():
                put(hw.ENTRY_DIR, sub, b"")
                walk(Path(e.path), sub)
            elif e.is_file():
                put(hw.ENTRY_FILE, sub, _read(e.path, limit))

    walk(root, "")
    return bytes(out)


def _read(path: str, limit: int) -> bytes:
    """A file's bytes (at most ``limit`` + 1), in as few system calls as a file takes:
    a tree is hundreds of small files, packed at every ask."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        # a regular file's read gives what it holds, up to the count (read(2))
        return os.read(fd, min(os.fstat(fd).st_size, limit) + 1)
    finally:
        os.close(fd)


def check_path(path: str) -> None:
    """TreeError unless ``path`` is a relative path of plain components."""
    if not path or path.startswith("/") or "\0" in path:
        raise TreeError(f"{path!r}: not a relative path")
    if any(part in ("", ".", "..") for part in path.split("/")):
        raise TreeError(f"{path!r}: an empty, '.' or '..' component")


def unpack(data: bytes, limit: int = hw.TREE_MAX) -> list[Entry]:
    """The entries of archive ``data``, every length, path and link target checked (a
    target may hold '..' but must stay inside the tree); TreeError at the first fault."""
    if len(data) > limit:
        raise TreeError(f"an archive of {len(data)} bytes, more than {limit}")
    out: list[Entry] = []
    dirs = {""}
    at = 0
    while at < len(data):
        if len(data) - at < hw.ENTRY.size:
            raise TreeError(f"a truncated entry header at byte {at}")
        kind, zero, plen, dlen = hw.ENTRY.unpack_from(data, at)
        at += hw.ENTRY.size
        if kind not in (hw.ENTRY_DIR, hw.ENTRY_FILE, hw.ENTRY_SYMLINK) or zero:
            raise TreeError(f"entry type {kind}/{zero} at byte {at - hw.ENTRY.size}")
        if plen > hw.ENTRY_PATH_MAX or at + plen + dlen > len(data):
            raise TreeError(f"an entry's lengths ({plen}, {dlen}) run past the archive")
        try:
            path = data[at : at + plen].decode()
        except UnicodeDecodeError:
            raise TreeError(f"a path that is not UTF-8 at byte {at}") from None
        body = data[at + plen : at + plen + dlen]
        at += plen + dlen
        check_path(path)
        parent = posixpath.dirname(path)
        if parent not in dirs:
            raise TreeError(f"{path!r} comes before its directory")
        if kind == hw.ENTRY_DIR:
            if dlen:
                raise TreeError(f"directory {path!r} with data")
            dirs.add(path)
        elif kind == hw.ENTRY_SYMLINK:
            target = body.decode(errors="replace")
            inside = posixpath.normpath(posixpath.join(parent, target))
            out_of = inside == ".." or inside.startswith("../")
            if not target or target.startswith("/") or "\0" in target or out_of:
                raise TreeError(f"link {path!r} -> {target!r} leaves the tree")
        out.append(Entry(kind, path, bytes(body)))
    return out
