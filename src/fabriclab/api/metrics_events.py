"""The fabric's events counted by severity for ``/metrics``, incrementally: the event
log is read once, then each scrape reads only the lines written since the last one
(:class:`fabriclab.eventlog.Tail`: by id, through the log's rotations), never the whole
log again."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

from .. import eventlog


class EventCounter:
    """How many events of each severity the log at ``path`` has held (counted from
    zero again when the fabric begins a new log: a counter reset, to Prometheus)."""

    def __init__(self, path: Path):
        self.tail = eventlog.Tail(path)
        self.counted: Counter[str] = Counter()
        self._restarts = 0
        self._lock = threading.Lock()

    @property
    def since(self) -> int:
        """The id of the last event counted."""
        return self.tail.since

    def counts(self, severities: tuple[str, ...]) -> dict[str, int]:
        """Every severity of ``severities`` (and any other seen) and its count, the log
        read up to its end now."""
        with self._lock:
            new = self.tail.new()
            if self.tail.restarts != self._restarts:
                self._restarts = self.tail.restarts
                self.counted.clear()
            self.counted.update(str(ev.get("severity", "")) for ev in new)
            out = dict.fromkeys(severities, 0)
            out.update(self.counted)
            return out
