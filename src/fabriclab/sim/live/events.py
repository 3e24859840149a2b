"""The live fabric's event log: one JSON object a line, with the fields of UFM's events
(``GET /ufmRest/app/events``: id, name, type, event_type, severity, timestamp, counter,
category, object_name, object_path, write_to_syslog, description), kept in the state
directory as ``<name>.events.jsonl`` and read by ``fabriclab events``.

The log stays bounded: events of one kind about one object beyond a burst are coalesced
(:mod:`.events_limit`, the one written carries their number in ``counter``), and the file
is rotated at :data:`MAX_BYTES` (``.events.jsonl.1`` the newest of :data:`KEEP` old
ones).  Readers stream it a line at a time, oldest file first.

Where UFM documents an id for the event it is used (UFM-SDN 4.18 "Supported Traps and
Events": 130 Non-optimal link width, 916 High BER reported); for the rest fabriclab
numbers its own from 9001 (UFM's own lists were not available to check, so no id of
theirs is guessed).  Each event also carries ``sim_time``: the fabric clock's seconds,
which a virtual clock makes exact.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ...statedir import open_state_file
from .events_limit import Held, Limiter

MAX_BYTES = 16 << 20  # a log file is rotated when the next event would take it past this
KEEP = 3  # rotated files kept: <log>.1 (the newest) to <log>.3
MAX_LINE = 1 << 20  # a longer line is not an event (skipped unread)
_TAIL = 64 << 10  # bytes read from a log's end to find its last id


@dataclass(frozen=True)
class Kind:
    """An event kind: its id (``event_type``), name, severity, category and object type."""

    event_type: int
    name: str
    severity: str
    category: str
    type: str


# UFM-documented ids (UFM-SDN 4.18.x "Supported Traps and Events")
NON_OPTIMAL_WIDTH = Kind(130, "Non-optimal link width", "Minor", "Hardware", "Port")
HIGH_BER = Kind(916, "High BER reported", "Major", "Hardware", "Port")
# fabriclab's own (names as UFM's event log writes them where known: "Link went down",
# "Link is up", "... is Down")
LINK_DOWN = Kind(9001, "Link went down", "Critical", "Fabric Topology", "Link")
LINK_UP = Kind(9002, "Link is up", "Info", "Fabric Topology", "Link")
SWITCH_DOWN = Kind(9003, "Switch is down", "Critical", "Fabric Topology", "Switch")
SWITCH_UP = Kind(9004, "Switch is up", "Info", "Fabric Topology", "Switch")
TRAY_DOWN = Kind(9005, "Computer is down", "Critical", "Fabric Topology", "Computer")
TRAY_UP = Kind(9006, "Computer is up", "Info", "Fabric Topology", "Computer")
NON_OPTIMAL_SPEED = Kind(9007, "Non-optimal link speed", "Minor", "Hardware", "Port")
LINK_OPTIMAL = Kind(9008, "Link width and speed restored", "Info", "Hardware", "Port")
BER_CLEARED = Kind(9009, "BER back to normal", "Info", "Hardware", "Port")
COUNTER_THRESHOLD = Kind(9010, "Counter threshold exceeded", "Minor", "Communication Error", "Port")
MAD_DROP = Kind(9011, "MAD drop rate set", "Warning", "Fabric Notification", "Port")
MAD_DROP_CLEARED = Kind(9012, "MAD drop rate cleared", "Info", "Fabric Notification", "Port")
LINK_RETRAINED = Kind(9013, "Link retrained after errors", "Warning", "Hardware", "Link")
# an NVLink fault is not an InfiniBand event: UFM has no id for it
NVLINK_FAULT = Kind(9014, "NVLink fault", "Critical", "Hardware", "Computer")
NVLINK_CLEARED = Kind(9015, "NVLink fault cleared", "Info", "Hardware", "Computer")
# faults stack: a fault cleared (or added) while others still hold its target says so;
# object_name is what it held (a link, a switch, a tray, a port)
STILL_HELD = Kind(9016, "Still held by another fault", "Info", "Fabric Notification", "Link")
# a run of a flap's downs and ups coalesced into one event (its counter: the flaps)
LINK_FLAPPING = Kind(9017, "Link flapping", "Warning", "Fabric Topology", "Link")
# the server's loop could not keep up with the clock: what was due was carried out at once
FELL_BEHIND = Kind(9018, "Fabric clock fell behind", "Warning", "Fabric Notification", "Site")

KINDS = {
    k.event_type: k
    for k in (
        NON_OPTIMAL_WIDTH,
        HIGH_BER,
        LINK_DOWN,
        LINK_UP,
        SWITCH_DOWN,
        SWITCH_UP,
        TRAY_DOWN,
        TRAY_UP,
        NON_OPTIMAL_SPEED,
        LINK_OPTIMAL,
        BER_CLEARED,
        COUNTER_THRESHOLD,
        MAD_DROP,
        MAD_DROP_CLEARED,
        LINK_RETRAINED,
        NVLINK_FAULT,
        NVLINK_CLEARED,
        STILL_HELD,
        LINK_FLAPPING,
        FELL_BEHIND,
    )
}


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


class EventLog:
    """Appends events to a fabric's log file, numbering them on from the last one there
    (a resumed fabric continues its log), coalescing bursts (:mod:`.events_limit`) and
    rotating the file past ``max_bytes``."""

    def __init__(
        self,
        path: Path,
        clock,
        site: str = "default",
        max_bytes: int = MAX_BYTES,
        keep: int = KEEP,
    ):
        self.path = path
        self.clock = clock
        self.site = site
        self.max_bytes, self.keep = max_bytes, keep
        self.limit = Limiter()
        self.next_id = 1 + last_id(path)
        self._fd = open_state_file(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        self._size = os.fstat(self._fd).st_size

    def emit(self, kind: Kind, object_name: str, description: str, counter: int = 0) -> dict:
        """Write one event (at once: a reader following the log sees it), unless a burst
        of its like holds it back (then it is counted, and written later as part of one
        event standing for them); the event.  ``counter``: how many happenings the
        event stands for (more than 1: a run coalesced)."""
        now = round(self.clock.now(), 6)
        try:
            before = self.limit.admit(kind, object_name, description, now)
        except Held:
            return {"name": kind.name, "object_name": object_name, "held": True}
        for c in before:
            self._write(c.kind, c.object_name, c.text(), c.count)
        return self._write(kind, object_name, description, counter)

    def flush(self, everything: bool = False) -> None:
        """Write the coalesced events whose window is over (``everything``: all)."""
        for c in self.limit.due(self.clock.now(), everything):
            self._write(c.kind, c.object_name, c.text(), c.count)

    def _write(self, kind, object_name: str, description: str, counter: int) -> dict:
        now = time.time()
        ev = {
            "id": self.next_id,
            "name": kind.name,
            "type": kind.type,
            "event_type": str(kind.event_type),
            "severity": kind.severity,
            "timestamp": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(now))
            + f".{int(now * 1000) % 1000:03d}",
            # UFM writes "N/A" (its events' sample); a coalesced event, how many it holds
            "counter": counter if counter > 1 else "N/A",
            "category": kind.category,
            "object_name": object_name,
            "object_path": f"{self.site} / {object_name}",
            "write_to_syslog": False,
            "description": description,
            "sim_time": round(self.clock.now(), 6),
        }
        self.next_id += 1
        data = (line(ev) + "\n").encode()
        if self._size and self._size + len(data) > self.max_bytes:
            self._rotate()
        os.write(self._fd, data)
        self._size += len(data)
        return ev

    def _rotate(self) -> None:
        """The log file becomes ``.1`` (``.1`` becomes ``.2`` ..., the oldest goes)."""
        os.close(self._fd)
        for i in range(self.keep, 0, -1):
            older = rotated(self.path, i - 1) if i > 1 else self.path
            if older.exists():
                os.replace(older, rotated(self.path, i))
        self._fd = open_state_file(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        self._size = 0

    def close(self) -> None:
        """Write what is coalesced and close the log file."""
        self.flush(everything=True)
        os.close(self._fd)


def line(ev: dict) -> str:
    """An event as the log keeps it: one JSON object on one line (no newline)."""
    return json.dumps(ev)


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


def read(path: Path) -> list[dict]:
    """The events in the log at ``path`` (a small log: tests)."""
    return list(stream(path))


def follow(path: Path, since: int = 0, poll: float = 0.2) -> Iterator[dict]:
    """Each event with an id above ``since`` written to ``path`` from now on, as it is
    written (looked at every ``poll`` seconds), through rotations: the file being read
    is read to its end, then the files rotated since, then the new one.  It never ends
    (``fabriclab events --follow``)."""
    f = None
    while True:
        if f is None:
            try:
                f = _open(path)
            except FileNotFoundError:
                time.sleep(poll)
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
            time.sleep(poll)
