"""The fabric's events counted by severity for ``/metrics``, incrementally: the event
log is read once, then each scrape reads only the lines written since the last one
(by id, through the log's rotations), never the whole log again."""

from __future__ import annotations

import os
import threading
from collections import Counter
from pathlib import Path
from typing import BinaryIO

from .. import eventlog


class EventCounter:
    """How many events of each severity the log at ``path`` has held."""

    def __init__(self, path: Path):
        self.path = path
        self.since = 0  # the last id counted
        self.counted: Counter[str] = Counter()
        self._f: BinaryIO | None = None
        self._lock = threading.Lock()

    def counts(self, severities: tuple[str, ...]) -> dict[str, int]:
        """Every severity of ``severities`` (and any other seen) and its count, the log
        read up to its end now."""
        with self._lock:
            self._read()
            out = dict.fromkeys(severities, 0)
            out.update(self.counted)
            return out

    def _count(self, ev: dict) -> None:
        i = ev.get("id")
        if isinstance(i, int) and i > self.since:
            self.since = i
            self.counted[str(ev.get("severity", ""))] += 1

    def _read(self) -> None:
        for _ in range(2):  # the file being read to its end, then (once) the new one
            if self._f is None:
                try:
                    self._f = eventlog._open(self.path)
                except FileNotFoundError:
                    return
                for ev in eventlog.stream(self.path, rotated_only=True):
                    self._count(ev)  # what was rotated since the last read (by id)
            f = self._f
            try:
                moved = os.stat(self.path).st_ino != os.fstat(f.fileno()).st_ino
            except FileNotFoundError:
                moved = True
            for text in eventlog._lines(f):
                got = eventlog._event(text)
                if got is not None:
                    self._count(got)
            if not moved:
                return
            f.close()
            self._f = None
