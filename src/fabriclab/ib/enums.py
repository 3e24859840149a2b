"""The states and types every layer speaks of: node types, port states and physical
port states, with the values PortInfo and NodeInfo carry (IBA Vol. 1, 14.2.5.3 and
14.2.5.6)."""

from __future__ import annotations

from enum import IntEnum


class NodeType(IntEnum):
    """NodeInfo.NodeType values."""

    CA = 1
    SWITCH = 2
    ROUTER = 3

    @property
    def prefix(self) -> str:
        """The letter ibnetdiscover puts before the GUID: S-, H-, R-."""
        return _PREFIX[self]


_PREFIX = {NodeType.CA: "H", NodeType.SWITCH: "S", NodeType.ROUTER: "R"}


class PortState(IntEnum):
    """PortInfo.PortState values."""

    NOP = 0
    DOWN = 1
    INIT = 2
    ARMED = 3
    ACTIVE = 4


class PhysState(IntEnum):
    """PortInfo.PortPhysicalState values."""

    NOP = 0
    SLEEP = 1
    POLLING = 2
    DISABLED = 3
    TRAINING = 4
    LINKUP = 5
    ERROR_RECOVERY = 6
