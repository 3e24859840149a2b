"""Warnings that a flood of bad datagrams cannot turn into a flood of log lines.

Each kind of warning is logged for its first ``burst`` occurrences in an interval;
the rest are counted, and one line says how many were left out once the interval is
over.  (The standard library's logging has no rate limit, and the filters that exist
elsewhere count per message text, where here the text carries the sender.)
"""

from __future__ import annotations

import logging
import time


class RateLimitedLog:
    """A logger's warnings, a few per kind and interval (see the module)."""

    def __init__(
        self, logger: logging.Logger, burst: int = 10, interval: float = 10.0, clock=time.monotonic
    ):
        self.log = logger
        self.burst = burst
        self.interval = interval
        self.clock = clock
        self._windows: dict[str, list] = {}  # kind -> [window start, logged, suppressed]

    def warning(self, kind: str, msg: str, *args, **kw) -> None:
        """Log a warning of ``kind``, unless that kind's burst is spent."""
        now = self.clock()
        w = self._windows.get(kind)
        if w is None or now - w[0] >= self.interval:
            if w is not None:
                self._summary(kind, w)
            w = self._windows[kind] = [now, 0, 0]
        if w[1] < self.burst:
            w[1] += 1
            self.log.warning(msg, *args, **kw)
        else:
            w[2] += 1

    def flush(self, everything: bool = False) -> None:
        """Say how many were suppressed in intervals that are over (call it now and
        then: a flood that stopped has no next warning to carry its summary), or in
        every interval (``everything``: when stopping)."""
        now = self.clock()
        for kind, w in list(self._windows.items()):
            if everything or now - w[0] >= self.interval:
                self._summary(kind, w)
                del self._windows[kind]

    def _summary(self, kind: str, w: list) -> None:
        if w[2]:
            self.log.warning(
                "%d more %s suppressed (at most %d logged per %g s)",
                w[2],
                kind,
                self.burst,
                self.interval,
            )
