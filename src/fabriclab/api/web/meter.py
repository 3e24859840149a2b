"""What the web view colours each link by: its state (down, degraded, erring, held by a
fault) and its current utilisation, the rate of ``PortXmitData`` between two readings of
the fabric's state over what the link can carry."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from ...ib.rates import data_bytes_per_s, speed_or_unknown, width_or_unknown
from ..view import Layout, State, speed_token, width_token

# PortInfo PortState (IBA vol 1, 14.2.5.6 table 146): 1 Down ... 4 Active
ACTIVE = 4
DOWN = 1
# PortInfo PortPhysicalState: 5 LinkUp
LINK_UP = 5
# the error counters of PortCounters (IBA vol 1, 16.1.3.5): any that counts up between
# two readings marks the link as erring
ERRORS = (
    "SymbolErrorCounter",
    "LinkErrorRecoveryCounter",
    "LinkDownedCounter",
    "PortRcvErrors",
    "PortRcvRemotePhysicalErrors",
    "PortXmitDiscards",
    "LocalLinkIntegrityErrors",
    "ExcessiveBufferOverrunErrors",
)
# link status codes, as the page's colours know them
UP, DEGRADED, LINK_DOWN = 0, 1, 2
STATUS = ("up", "degraded", "down")


@dataclass
class Links:
    """Every cable of the layout (``Layout.links`` order) at one moment."""

    status: np.ndarray  # int8: UP, DEGRADED (retrained or erring) or LINK_DOWN
    fault: np.ndarray  # bool: a fault holds one of its ends down
    util: np.ndarray  # float32: the busier direction's share of the link's rate, 0..1
    port_util: np.ndarray  # float32, a row per port: what it sends over its rate
    now: float  # the fabric clock's seconds of the reading


class Meter:
    """Keeps the last readings of a fabric's state, to give each link's status and the
    utilisation since the one before (shared by every request and stream)."""

    def __init__(self, layout: Layout):
        self.layout = layout
        self._lock = threading.Lock()
        self._prev: State | None = None
        self._port_util = np.zeros(layout.port_count, dtype=np.float32)
        self._erring = np.zeros(layout.port_count, dtype=bool)
        self._cabled_rate = _cabled_rates(layout)
        self._last: Links | None = None

    def links(self, state: State) -> Links:
        """The links as of ``state`` (utilisation over the time since the last reading
        of an earlier clock; unchanged when the clock has not moved)."""
        with self._lock:
            last = self._last
            if last is not None and self._prev is state:
                return last
            prev = self._prev
            if prev is None or state.now > prev.now:
                if prev is not None:
                    self._measure(prev, state)
                self._prev = state
            self._last = self._links(state)
            return self._last

    def _measure(self, prev: State, state: State) -> None:
        dt = state.now - prev.now
        words = _delta(state.col("PortXmitData"), prev.col("PortXmitData"))
        rate = self._rates(state)
        with np.errstate(divide="ignore", invalid="ignore"):
            util = np.where(rate > 0, words * 4.0 / dt / rate, 0.0)
        self._port_util = np.clip(util, 0.0, 1.0).astype(np.float32)
        err = np.zeros(self.layout.port_count, dtype=np.uint64)
        for c in ERRORS:
            err += _delta(state.col(c), prev.col(c))
        self._erring = err > 0

    def _rates(self, state: State) -> np.ndarray:
        rate = self._cabled_rate
        changed = np.nonzero((state.col("lanes") != 0) | (state.col("speed") != 0))[0]
        if len(changed):
            rate = rate.copy()
            for row in changed:
                w = width_or_unknown(width_token(self.layout, state, int(row)))
                s = speed_or_unknown(speed_token(self.layout, state, int(row)))
                rate[row] = data_bytes_per_s(w, s)
        return rate

    def _links(self, state: State) -> Links:
        a, b = self.layout.links[:, 0], self.layout.links[:, 1]
        st, phys, held = state.col("state"), state.col("phys"), state.col("held")
        retrained = (state.col("lanes") != 0) | (state.col("speed") != 0)
        down_port = (st <= DOWN) | (phys != LINK_UP)
        down = down_port[a] | down_port[b]
        degraded = retrained[a] | retrained[b] | self._erring[a] | self._erring[b]
        status = np.where(down, LINK_DOWN, np.where(degraded, DEGRADED, UP)).astype(np.int8)
        pu = self._port_util
        return Links(
            status=status,
            fault=(held[a] > 0) | (held[b] > 0),
            util=np.maximum(pu[a], pu[b]),
            port_util=pu,
            now=state.now,
        )


def _delta(now: np.ndarray, before: np.ndarray) -> np.ndarray:
    """Counter increase (0 where a counter went back: it was cleared)."""
    return np.where(now >= before, now - before, 0).astype(np.uint64)


def _cabled_rates(layout: Layout) -> np.ndarray:
    """Bytes per second each port carries as cabled."""
    cache: dict[tuple[str, str], float] = {}
    out = np.zeros(layout.port_count, dtype=np.float64)
    for row, (w, s) in enumerate(zip(layout.ports["width"], layout.ports["speed"], strict=True)):
        r = cache.get((w, s))
        if r is None:
            r = cache[(w, s)] = data_bytes_per_s(width_or_unknown(w), speed_or_unknown(s))
        out[row] = r
    return out
