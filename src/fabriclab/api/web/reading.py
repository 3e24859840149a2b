"""The web view's reading of the fabric, shared by every request and stream: the
layout's topology worked out once (:class:`.graph.Topo`), the link meter
(:class:`.meter.Meter`), both made again when the fabric comes back with another layout,
and one port's state and counters."""

from __future__ import annotations

import time
from typing import Any

from ..errors import ApiError
from ..source import Source
from ..view import LOGICAL, PHYSICAL, State, speed_token, state_name, width_token
from .graph import Topo
from .meter import Links, Meter

STATE_MAX_AGE = 0.25  # seconds a state reading serves every request and stream, at least
READ_SHARE = 0.2  # at most this share of the time reading the state (a large fabric's
# reading takes the server's loop a while: 0.3-0.5 s at 8,192 trays): a reading then
# serves for 1 / READ_SHARE times as long as it took


class Reading:
    """The fabric ``source`` as the web view reads it."""

    def __init__(self, source: Source):
        self.source = source
        self._cost = 0.0  # seconds the last reading of the state took

    def current(self) -> tuple[Topo, Links]:
        """The topology and the links now."""
        topo, meter = self.source.derived(Topo), self.source.derived(Meter)
        return topo, meter.links(self.state())

    def state(self) -> State:
        """The fabric's state, read again only when the last reading is old enough."""
        t = time.monotonic()
        s = self.source.state(max(STATE_MAX_AGE, self._cost / READ_SHARE))
        if s.taken >= t:  # read now, not cached
            self._cost = time.monotonic() - t
        return s

    def port(self, name: str) -> dict[str, Any]:
        """Port ``<guid>_<port>``: where it is, its states, rate, utilisation and
        counters."""
        topo, links = self.current()
        lay = topo.layout
        row = lay.row_by_name.get(name.lower().removeprefix("0x"))
        if row is None:
            raise ApiError(404, f"port {name!r}: no such port (want <node guid>_<port>)")
        state = self.state()
        node = lay.ports["node"][row]
        peer = int(lay.ports["peer"][row])
        counters = {c: state.value(row, c) for c in lay.doc["counters"]}
        rec: dict[str, Any] = {
            "name": lay.port_name(row),
            "node": lay.nodes["name"][node],
            "node_guid": lay.nodes["guid"][node],
            "port": int(lay.ports["num"][row]),
            "target": f"{lay.nodes['name'][node]}[{lay.ports['num'][row]}]",
            "lid": state.value(row, "lid"),
            "logical_state": state_name(LOGICAL, state.value(row, "state")),
            "physical_state": state_name(PHYSICAL, state.value(row, "phys")),
            "held": state.value(row, "held"),
            "width": width_token(lay, state, row),
            "speed": speed_token(lay, state, row),
            "utilisation": round(float(links.port_util[row]), 4),
            "now": state.now,
            "counters": counters,
            "peer": None,
        }
        if peer >= 0:
            pn = lay.ports["node"][peer]
            rec["peer"] = {
                "name": lay.port_name(peer),
                "node": lay.nodes["name"][pn],
                "port": int(lay.ports["num"][peer]),
                "target": f"{lay.nodes['name'][pn]}[{lay.ports['num'][peer]}]",
            }
        return rec
