"""The running fabric's time: wall time by default, or a virtual clock that only moves when told."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """What the live fabric reads time from (seconds, monotonic)."""

    virtual: bool

    def now(self) -> float:
        """Seconds since an arbitrary start; never goes backwards."""
        ...


class WallClock:
    """Monotonic wall time: counters move as real seconds pass."""

    virtual = False

    def __init__(self, start: float = 0.0) -> None:
        self._start = time.monotonic() - start

    def now(self) -> float:
        """Seconds since this clock was made (plus ``start``: a resumed fabric's time
        goes on from where it was)."""
        return time.monotonic() - self._start


class VirtualClock:
    """Time that moves only by :meth:`advance`, so every counter value is predictable."""

    virtual = True

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)

    def now(self) -> float:
        """The virtual time reached so far."""
        return self._now

    def advance(self, seconds: float) -> float:
        """Move time forward by ``seconds`` (not negative); the new time."""
        if seconds < 0:
            raise ValueError(f"a clock cannot go back ({seconds} s)")
        self._now += seconds
        return self._now
