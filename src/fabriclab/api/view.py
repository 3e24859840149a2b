"""The fabric as the API reads it: its layout (what never changes while it runs) and its
state at one moment (each port's LID, states, width, speed and counters), as arrays
with the look-ups every resource needs (a node by GUID, a port by UFM's name
``<guid>_<port>``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from ..ib.rates import SPEEDS, WIDTHS

# PortInfo PhysLinkState and PortState (IB spec vol. 1, 14.2.5.6) as UFM names them
# (ufm_sdk_3.0 plugins/UFM_NDT_Plugin/ufm_plugin_ndt/topoparse/src/topoparse/
# parse_utils.py, commit 16faf03, PHYSICAL_STATE_MAP / LOGICAL_STATE_MAP; others "N/A").
PHYSICAL = (
    "N/A",
    "Sleep",
    "Polling",
    "Disabled",
    "Port Configuration Training",
    "Link Up",
    "Link Error Recovery",
    "Phy Test",
)
LOGICAL = ("N/A", "Down", "Initialize", "Armed", "Active")


def state_name(names: tuple[str, ...], value: int) -> str:
    """A PortState or PhysLinkState value's name in :data:`LOGICAL` or :data:`PHYSICAL`
    ("Unknown" for one outside the table)."""
    return names[value] if 0 < value < len(names) else "Unknown"


class Layout:
    """Nodes and ports as columns (``nodes[key][i]``, ``ports[key][row]``), from the
    server's ``watch`` layout document (:mod:`fabriclab.sim.live.watch`)."""

    def __init__(self, doc: dict[str, Any]):
        self.doc = doc
        self.fabric: str = doc["fabric"]
        self.cluster: str = doc["cluster"]
        self.speeds: list[str] = doc["speeds"]
        self.nodes: dict[str, list] = doc["nodes"]
        self.ports: dict[str, list] = doc["ports"]
        self.domains: list[str] = doc["domains"]
        self.trays: list[str] = doc["trays"]
        self.node_count = len(self.nodes["guid"])
        self.port_count = len(self.ports["node"])
        # numeric columns as arrays
        self.port_node = np.asarray(self.ports["node"], dtype=np.int64)
        self.port_num = np.asarray(self.ports["num"], dtype=np.int64)
        self.port_peer = np.asarray(self.ports["peer"], dtype=np.int64)
        self.node_tier = np.asarray(self.nodes["tier"], dtype=np.int64)
        self.node_switch = np.asarray([k == "switch" for k in self.nodes["kind"]], dtype=bool)
        self.first_row = np.asarray(self.nodes["first_row"] + [self.port_count], dtype=np.int64)

    @cached_property
    def node_by_guid(self) -> dict[str, int]:
        """Node index by its GUID (16 hex digits, no ``0x``)."""
        return {g: i for i, g in enumerate(self.nodes["guid"])}

    @cached_property
    def row_by_name(self) -> dict[str, int]:
        """Port row by UFM's port name, ``<node guid>_<port number>`` (port 0 has none)."""
        guids = self.nodes["guid"]
        return {
            f"{guids[n]}_{num}": row
            for row, (n, num) in enumerate(zip(self.ports["node"], self.ports["num"], strict=True))
            if num
        }

    def rows_of(self, node: int) -> range:
        """The port rows of node ``node`` (port 0 first for a switch)."""
        return range(int(self.first_row[node]), int(self.first_row[node + 1]))

    def port_name(self, row: int) -> str:
        """UFM's name of the port at ``row``: ``<node guid>_<port number>``."""
        return f"{self.nodes['guid'][self.ports['node'][row]]}_{self.ports['num'][row]}"

    @cached_property
    def links(self) -> np.ndarray:
        """Each cable once: an array of (row, peer row) with row < peer row."""
        rows = np.arange(self.port_count)
        sel = (self.port_peer > rows) & (self.port_num > 0)
        return np.stack((rows[sel], self.port_peer[sel]), axis=1)


@dataclass
class State:
    """Every port's state and counters at one moment of the fabric's clock (``now``)."""

    columns: list[str]
    data: np.ndarray  # uint64, a row per port of the layout
    now: float
    virtual: bool
    taken: float  # the monotonic time it was read (for caching)
    _index: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._index = {c: i for i, c in enumerate(self.columns)}

    def col(self, name: str) -> np.ndarray:
        """One column, every port (``uint64``)."""
        return self.data[:, self._index[name]]

    def value(self, row: int, name: str) -> int:
        """One port's value of column ``name``."""
        return int(self.data[row, self._index[name]])


def width_token(layout: Layout, state: State, row: int) -> str:
    """The width a port runs at now (``4x``): a retrained link's, else as cabled."""
    lanes = state.value(row, "lanes")
    if lanes:
        return next((w.token for w in WIDTHS.values() if w.lanes == lanes), "")
    return layout.ports["width"][row]


def speed_token(layout: Layout, state: State, row: int) -> str:
    """The speed a port runs at now (``NDR``): a retrained link's, else as cabled."""
    s = state.value(row, "speed")
    if s:
        return layout.speeds[s - 1]
    return layout.ports["speed"][row]


__all__ = [
    "LOGICAL",
    "PHYSICAL",
    "SPEEDS",
    "Layout",
    "State",
    "speed_token",
    "state_name",
    "width_token",
]
