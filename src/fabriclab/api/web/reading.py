"""The web view's reading of the fabric, shared by every request and stream: the
layout's topology worked out once (:class:`.graph.Topo`), the link meter
(:class:`.meter.Meter`), both made again when the fabric comes back with another layout,
and one port's state and counters."""

from __future__ import annotations

import threading
from typing import Any

from ..errors import ApiError
from ..source import Source
from ..view import speed_token, width_token
from .graph import Topo
from .meter import Links, Meter

STATE_MAX_AGE = 0.25  # seconds a state reading serves every request and stream
# PortInfo PortState and PortPhysicalState names (IBA vol 1, 14.2.5.6 table 146), in the
# form UFM's port records give them (ufm_sdk_3.0 topoparse parse_utils.py)
LOGICAL = {1: "Down", 2: "Initialize", 3: "Armed", 4: "Active"}
PHYSICAL = {
    1: "Sleep",
    2: "Polling",
    3: "Disabled",
    4: "Port Configuration Training",
    5: "Link Up",
    6: "Link Error Recovery",
    7: "Phy Test",
}


class Reading:
    """The fabric ``source`` as the web view reads it."""

    def __init__(self, source: Source):
        self.source = source
        self._lock = threading.Lock()
        self._topo: Topo | None = None
        self._meter: Meter | None = None

    def current(self) -> tuple[Topo, Links]:
        """The topology and the links now."""
        layout = self.source.layout()
        with self._lock:
            if self._topo is None or self._topo.layout is not layout:
                self._topo, self._meter = Topo(layout), Meter(layout)
            topo, meter = self._topo, self._meter
        assert meter is not None
        return topo, meter.links(self.source.state(STATE_MAX_AGE))

    def port(self, name: str) -> dict[str, Any]:
        """Port ``<guid>_<port>``: where it is, its states, rate, utilisation and
        counters."""
        topo, links = self.current()
        lay = topo.layout
        row = lay.row_by_name.get(name.lower().removeprefix("0x"))
        if row is None:
            raise ApiError(404, f"port {name!r}: no such port (want <node guid>_<port>)")
        state = self.source.state(STATE_MAX_AGE)
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
            "logical_state": LOGICAL.get(state.value(row, "state"), "Unknown"),
            "physical_state": PHYSICAL.get(state.value(row, "phys"), "Unknown"),
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
