"""The live fabric's event log: one JSON object a line, with the fields of UFM's events
(``GET /ufmRest/app/events``: id, name, type, event_type, severity, timestamp, counter,
category, object_name, object_path, write_to_syslog, description), kept in the state
directory as ``<name>.events.jsonl`` and read by ``fabriclab events``.

The log stays bounded: events of one kind about one object beyond a burst are coalesced
(:mod:`.events_limit`, the one written carries their number in ``counter``), and the file
is rotated at :data:`MAX_BYTES` (``.events.jsonl.1`` the newest of :data:`KEEP` old
ones).  :mod:`fabriclab.eventlog` reads it, a line at a time.

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
from dataclasses import dataclass
from pathlib import Path

from ... import eventlog
from ...statedir import open_state_file
from .events_limit import Held, Limiter

MAX_BYTES = 16 << 20  # a log file is rotated when the next event would take it past this
KEEP = eventlog.KEEP  # rotated files kept: <log>.1 (the newest) to <log>.3


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
# the other networks (fault net): a link's rate capped or its netem set, and lifted
NET_SHAPED = Kind(9019, "Ethernet link shaped", "Warning", "Fabric Notification", "Link")
NET_SHAPED_CLEARED = Kind(
    9020, "Ethernet link shaping lifted", "Info", "Fabric Notification", "Link"
)
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
    return eventlog.events_path(state, name)


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
        self.next_id = 1 + eventlog.last_id(path)
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
            older = eventlog.rotated(self.path, i - 1) if i > 1 else self.path
            if older.exists():
                os.replace(older, eventlog.rotated(self.path, i))
        self._fd = open_state_file(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        self._size = 0

    def close(self) -> None:
        """Write what is coalesced and close the log file."""
        self.flush(everything=True)
        os.close(self._fd)


def line(ev: dict) -> str:
    """An event as the log keeps it: one JSON object on one line (no newline)."""
    return json.dumps(ev)


# what a fault on the other networks reports, by its name (sim/lan/faults.py)
NET_KINDS = {
    "link-down": LINK_DOWN,
    "link-up": LINK_UP,
    "switch-down": SWITCH_DOWN,
    "switch-up": SWITCH_UP,
    "rate": NET_SHAPED,
    "rate-cleared": NET_SHAPED_CLEARED,
}
