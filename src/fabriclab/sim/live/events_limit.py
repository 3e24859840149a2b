"""The event log's rate limit: events of one kind about one object are written at most
:data:`BURST` to a :data:`WINDOW` of clock time; the rest are counted, and written as one
event standing for them all (its ``counter`` the number, as UFM's events carry a
``counter``) once the window is over.
"""

from __future__ import annotations

from dataclasses import dataclass, field

WINDOW = 1.0  # seconds of the fabric's clock
BURST = 16  # events of one kind about one object written in a window; the rest coalesced


@dataclass
class _Window:
    start: float
    written: int = 1
    held: int = 0  # events coalesced so far
    last: tuple = field(default=())  # the latest of them: (kind, object_name, description)


@dataclass(frozen=True)
class Coalesced:
    """Events held back in a window: the latest of them (kind, object, description), how
    many they were, and when the window began."""

    kind: object
    object_name: str
    description: str
    count: int
    since: float

    def text(self) -> str:
        """The description of the one event written for them all."""
        return (
            f"{self.description} [{self.count} events like this from t={self.since:g} s "
            "coalesced into this one]"
        )


class Limiter:
    """Which events to write now, and which coalesced events are due."""

    def __init__(self, window: float = WINDOW, burst: int = BURST):
        self.window, self.burst = window, burst
        self._open: dict[tuple, _Window] = {}

    def admit(self, kind, object_name: str, description: str, t: float) -> list[Coalesced]:
        """An event of ``kind`` about ``object_name`` at clock time ``t`` is to be
        written: what must be written before it (its key's last window, ended with events
        held back); :class:`Held` when it is held back itself."""
        key = (kind.event_type, object_name)
        w = self._open.get(key)
        if w is None or not w.start <= t < w.start + self.window:
            self._open[key] = _Window(t)
            return [_coalesced(w)] if w is not None and w.held else []
        if w.written < self.burst:
            w.written += 1
            return []
        w.held += 1
        w.last = (kind, object_name, description)
        raise Held

    def due(self, t: float, everything: bool = False) -> list[Coalesced]:
        """The coalesced events whose window is over at ``t`` (``everything``: all, the
        log closing); windows that are over are forgotten."""
        out = []
        for key, w in list(self._open.items()):
            if everything or not w.start <= t < w.start + self.window:
                del self._open[key]
                if w.held:
                    out.append(_coalesced(w))
        return out


class Held(Exception):
    """The event is held back (counted in its window)."""


def _coalesced(w: _Window) -> Coalesced:
    kind, name, desc = w.last
    return Coalesced(kind, name, desc, w.held, w.start)
