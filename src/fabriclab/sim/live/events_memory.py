"""The event log of a live fabric without a state directory (in-process use): the
events kept in a list, as :class:`.events.EventLog` would write them."""

from __future__ import annotations


class MemoryLog:
    """Events in memory (``events``), numbered from 1, timed by ``clock``."""

    def __init__(self, clock):
        self.clock = clock
        self.events: list[dict] = []
        self.next_id = 1

    def emit(self, kind, object_name: str, description: str) -> dict:
        """Log an event of ``kind`` (an :class:`.events.Kind`) about ``object_name``;
        the event."""
        e = {
            "id": self.next_id,
            "name": kind.name,
            "event_type": str(kind.event_type),
            "severity": kind.severity,
            "object_name": object_name,
            "description": description,
            "sim_time": round(self.clock.now(), 6),
        }
        self.next_id += 1
        self.events.append(e)
        return e

    def close(self) -> None:
        """Nothing to close."""
