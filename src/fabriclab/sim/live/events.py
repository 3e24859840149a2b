"""The live fabric's event log: one JSON object a line, with the fields of UFM's events
(``GET /ufmRest/app/events``: id, name, type, event_type, severity, timestamp, counter,
category, object_name, object_path, write_to_syslog, description), kept in the state
directory as ``<name>.events.jsonl`` and read by ``fabriclab events``.

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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ...statedir import open_state_file


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
    )
}


def events_path(state: Path, name: str) -> Path:
    """Where fabric ``name``'s events are kept."""
    return state / f"{name}.events.jsonl"


class EventLog:
    """Appends events to a fabric's log file, numbering them on from the last one there
    (a resumed fabric continues its log)."""

    def __init__(self, path: Path, clock, site: str = "default"):
        self.path = path
        self.clock = clock
        self.site = site
        self.next_id = 1 + max((e.get("id", 0) for e in read(path)), default=0)
        self._fd = open_state_file(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)

    def emit(self, kind: Kind, object_name: str, description: str) -> dict:
        """Write one event (at once: a reader following the log sees it); the event."""
        now = time.time()
        ev = {
            "id": self.next_id,
            "name": kind.name,
            "type": kind.type,
            "event_type": str(kind.event_type),
            "severity": kind.severity,
            "timestamp": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(now))
            + f".{int(now * 1000) % 1000:03d}",
            "counter": "N/A",
            "category": kind.category,
            "object_name": object_name,
            "object_path": f"{self.site} / {object_name}",
            "write_to_syslog": False,
            "description": description,
            "sim_time": round(self.clock.now(), 6),
        }
        self.next_id += 1
        os.write(self._fd, (line(ev) + "\n").encode())
        return ev

    def close(self) -> None:
        """Close the log file."""
        os.close(self._fd)


def line(ev: dict) -> str:
    """An event as the log keeps it: one JSON object on one line (no newline)."""
    return json.dumps(ev)


def _tail(path: Path, offset: int) -> bytes:
    """What ``path`` holds from byte ``offset`` on (nothing when there is no such file)."""
    try:
        with os.fdopen(open_state_file(path, os.O_RDONLY), "rb") as f:
            f.seek(offset)
            return f.read()
    except FileNotFoundError:
        return b""


def _events(data: bytes) -> list[dict]:
    """The events of some lines of a log; a line that is not an event, as a torn last line
    after a crash, is skipped."""
    out = []
    for text in data.split(b"\n"):
        try:
            ev = json.loads(text)
        except ValueError:
            continue
        if isinstance(ev, dict):
            out.append(ev)
    return out


def read(path: Path, offset: int = 0) -> list[dict]:
    """The events in ``path`` from byte ``offset`` on."""
    return _events(_tail(path, offset))


def read_new(path: Path, offset: int) -> tuple[list[dict], int]:
    """The events written to ``path`` after byte ``offset`` (complete lines only), and the
    offset to read on from."""
    data = _tail(path, offset)
    end = data.rfind(b"\n") + 1
    return _events(data[:end]), offset + end


def follow(
    path: Path, offset: int, poll: float = 0.2, running: Callable[[], bool] = lambda: True
) -> Iterator[dict]:
    """Each event written to ``path`` after byte ``offset``, as it is written (the log is
    looked at every ``poll`` seconds), until ``running()`` says the fabric has stopped
    (the events it wrote before are still given) (``fabriclab events --follow``)."""
    while True:
        time.sleep(poll)
        up = running()
        evs, offset = read_new(path, offset)
        yield from evs
        if not up:
            return
