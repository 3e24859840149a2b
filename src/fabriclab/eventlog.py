"""A fabric's event log files, read: one JSON object a line, in ``<name>.events.jsonl``
and the files it was rotated to (``.1`` the newest, to ``.3``), streamed a line at a time
(never the whole file at once), oldest first, and followed through rotations.  The server
writes them (:mod:`fabriclab.sim.live.events`); ``fabriclab events`` and the Python
client read them.
"""

from __future__ import annotations

import json
import os
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from .statedir import open_state_file

KEEP = 3  # rotated files kept: <log>.1 (the newest) to <log>.3
MAX_LINE = 1 << 20  # a longer line is not an event (skipped unread)
_TAIL = 64 << 10  # bytes read from a log's end to find its last id


def events_path(state: Path, name: str) -> Path:
    """Where fabric ``name``'s events are kept."""
    return state / f"{name}.events.jsonl"


def rotated(path: Path, i: int) -> Path:
    """The ``i``-th newest rotated file of the log at ``path``."""
    return path.with_name(f"{path.name}.{i}")


def log_files(path: Path) -> list[Path]:
    """The files of the log at ``path`` that exist, oldest first."""
    old = [rotated(path, i) for i in range(KEEP, 0, -1)]
    return [p for p in [*old, path] if p.exists()]


def remove(path: Path) -> None:
    """Remove the log at ``path`` and its rotated files (a fabric brought up afresh)."""
    for i in range(1, KEEP + 1):
        rotated(path, i).unlink(missing_ok=True)
    path.unlink(missing_ok=True)


def _event(text: bytes) -> dict | None:
    """The event on a line; None for a line that is not one (a torn last line)."""
    try:
        ev = json.loads(text)
    except ValueError:
        return None
    return ev if isinstance(ev, dict) else None


def _lines(f: BinaryIO) -> Iterator[bytes]:
    """The whole lines of ``f`` from where it is, a line at a time (one longer than
    :data:`MAX_LINE` is skipped; a last line without its newline is not given)."""
    while True:
        text = f.readline(MAX_LINE)
        if not text.endswith(b"\n"):
            if len(text) < MAX_LINE:
                f.seek(-len(text), os.SEEK_CUR)  # a torn last line: read again later
                return
            while (more := f.readline(MAX_LINE)) and not more.endswith(b"\n"):
                pass
            continue
        yield text


def _open(path: Path) -> BinaryIO:
    return os.fdopen(open_state_file(path, os.O_RDONLY), "rb")


def last_id(path: Path) -> int:
    """The id of the last event in the log at ``path`` (0: none), from its files' ends."""
    for p in reversed(log_files(path)):
        with _open(p) as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - _TAIL))
            found = [e for t in f.read().split(b"\n") if (e := _event(t)) is not None]
        ids = [e["id"] for e in found if isinstance(e.get("id"), int)]
        if ids:
            return max(ids)
    return 0


def stream(path: Path, rotated_only: bool = False) -> Iterator[dict]:
    """Every event of the log at ``path``, oldest first, its rotated files first, read a
    line at a time (``rotated_only``: those of the rotated files)."""
    for p in log_files(path)[: -1 if rotated_only else None]:
        try:
            f = _open(p)
        except FileNotFoundError:
            continue  # rotated away meanwhile
        with f:
            for text in _lines(f):
                if (ev := _event(text)) is not None:
                    yield ev


def latest(path: Path, n: int) -> tuple[list[dict], int]:
    """The last ``n`` events of the log at ``path``, and how many it holds in all (read
    a line at a time: only ``n`` are kept)."""
    kept: deque[dict] = deque(maxlen=n)
    total = 0
    for ev in stream(path):
        kept.append(ev)
        total += 1
    return list(kept), total


def read(path: Path) -> list[dict]:
    """The events in the log at ``path`` (a small log: tests)."""
    return list(stream(path))


def follow(
    path: Path,
    since: int = 0,
    poll: float = 0.2,
    idle: Callable[[], object] | None = None,
    running: Callable[[], bool] | None = None,
) -> Iterator[dict]:
    """Each event with an id above ``since`` written to ``path`` from now on, as it is
    written (looked at every ``poll`` seconds), through rotations: the file being read
    is read to its end, then the files rotated since, then the new one.  It ends when
    ``running()`` says the fabric has stopped (what it wrote before is still given;
    ``fabriclab events --follow``), or by ``idle``, called before each wait, raising."""
    f = None
    while True:
        if f is None:
            try:
                f = _open(path)
            except FileNotFoundError:
                _wait(poll, idle)
                continue
            for ev in stream(path, rotated_only=True):  # what was rotated meanwhile
                if isinstance(ev.get("id"), int) and ev["id"] > since:
                    since = ev["id"]
                    yield ev
        try:
            moved = os.stat(path).st_ino != os.fstat(f.fileno()).st_ino
        except FileNotFoundError:
            moved = True
        got = False
        for text in _lines(f):  # (when moved: the rest of the file that was rotated)
            new = _event(text)
            if new is not None and isinstance(new.get("id"), int) and new["id"] > since:
                since = new["id"]
                got = True
                yield new
        if moved:
            f.close()
            f = None
        elif not got:
            if running is not None and not running():
                for text in _lines(f):  # what it wrote before it stopped
                    new = _event(text)
                    if new is not None and isinstance(new.get("id"), int) and new["id"] > since:
                        since = new["id"]
                        yield new
                f.close()
                return
            _wait(poll, idle)


class Tail:
    """The log at ``path`` read as it grows: each :meth:`new` gives the events written
    since the last one (the first: all of them), reading only the bytes added since,
    through rotations (the file it was reading is read to its end first, then the files
    rotated since, then the new one)."""

    def __init__(self, path: Path):
        self.path = path
        self.since = 0  # the last id given
        self.restarts = 0  # how often the log began anew (a fabric brought up afresh)
        self._f: BinaryIO | None = None

    def new(self) -> list[dict]:
        """The events written since the last call, oldest first (after the log began
        anew, under the same name: its events from the first; :attr:`restarts` counts)."""
        out: list[dict] = []
        if self._f is None:
            try:
                self._f = _open(self.path)
            except FileNotFoundError:
                return out
            if self.since and last_id(self.path) < self.since:
                self.since = 0
                self.restarts += 1
            self._take(stream(self.path, rotated_only=True), out)
        try:
            moved = os.stat(self.path).st_ino != os.fstat(self._f.fileno()).st_ino
        except FileNotFoundError:
            moved = True
        self._take((e for t in _lines(self._f) if (e := _event(t)) is not None), out)
        if moved:
            self.close()
            out += self.new()
        return out

    def _take(self, events: Iterator[dict], out: list[dict]) -> None:
        for ev in events:
            if isinstance(ev.get("id"), int) and ev["id"] > self.since:
                self.since = ev["id"]
                out.append(ev)

    def close(self) -> None:
        """Close the file being read."""
        if self._f is not None:
            self._f.close()
            self._f = None


def _wait(poll: float, idle: Callable[[], object] | None) -> None:
    if idle is not None:
        idle()
    time.sleep(poll)
