"""The event log of a live fabric without a state directory (in-process use): the
events kept in a list, as :class:`.events.EventLog` would write them."""

from __future__ import annotations

from .events_limit import Held, Limiter


class MemoryLog:
    """Events in memory (``events``), numbered from 1, timed by ``clock``."""

    def __init__(self, clock):
        self.clock = clock
        self.events: list[dict] = []
        self.next_id = 1
        self.limit = Limiter()

    def emit(self, kind, object_name: str, description: str, counter: int = 0) -> dict:
        """Log an event of ``kind`` (an :class:`.events.Kind`) about ``object_name``
        (standing for ``counter`` happenings), unless a burst of its like holds it back
        (:mod:`.events_limit`); the event."""
        try:
            before = self.limit.admit(kind, object_name, description, self.clock.now())
        except Held:
            return {"name": kind.name, "object_name": object_name, "held": True}
        for c in before:
            self._log(c.kind, c.object_name, c.text(), c.count)
        return self._log(kind, object_name, description, counter)

    def flush(self, everything: bool = False) -> None:
        """Log the coalesced events whose window is over (``everything``: all)."""
        for c in self.limit.due(self.clock.now(), everything):
            self._log(c.kind, c.object_name, c.text(), c.count)

    def _log(self, kind, object_name: str, description: str, counter: int) -> dict:
        e = {
            "id": self.next_id,
            "name": kind.name,
            "event_type": str(kind.event_type),
            "severity": kind.severity,
            "object_name": object_name,
            "counter": counter if counter > 1 else "N/A",
            "description": description,
            "sim_time": round(self.clock.now(), 6),
        }
        self.next_id += 1
        self.events.append(e)
        return e

    def close(self) -> None:
        """Log what is coalesced."""
        self.flush(everything=True)
