"""The PMA's port counters as the specification defines them: which counters each
attribute carries and how wide they are (read from the layouts), and which
CounterSelect bit of each attribute resets which counter.

PortCounters (IBA Vol. 1, 16.1.3.5) carries narrow counters (4 to 32 bits) that stop
at their maximum; PortCountersExtended (16.1.4.11) 64-bit ones, the error counters
among them only where the PMA sets IsAdditionalPortCountersExtendedSupported
(ClassPortInfo.CapabilityMask2 bit 1).
"""

from __future__ import annotations

from .codec import Layout
from .layouts import (
    PORT_COUNTERS,
    PORT_COUNTERS_EXT,
    PORT_RCV_ERROR_DETAILS,
    PORT_XMIT_DISCARD_DETAILS,
)

# The fields of the counter attributes that are not counters.
SELECT_FIELDS = frozenset(("PortSelect", "CounterSelect", "CounterSelect2"))
# CounterSelect2 bit n is numbered SELECT2 + n below (CounterSelect has 16 bits).
SELECT2 = 16

# name -> (PortCounters select bit, PortCountersExtended select bit); None: the counter
# is not in that attribute.  PortCounters (16.1.3.5): CounterSelect bits 0-15 in field
# order, CounterSelect2 bit 0 PortXmitWait and bit 1 QP1Dropped; PortCountersExtended
# (16.1.4.11): CounterSelect bits 0-7 the data and packet counters, CounterSelect2 bits
# 0-13 the additional ones in field order.
COUNTER_SELECT: dict[str, tuple[int | None, int | None]] = {
    "SymbolErrorCounter": (0, SELECT2 + 0),
    "LinkErrorRecoveryCounter": (1, SELECT2 + 1),
    "LinkDownedCounter": (2, SELECT2 + 2),
    "PortRcvErrors": (3, SELECT2 + 3),
    "PortRcvRemotePhysicalErrors": (4, SELECT2 + 4),
    "PortRcvSwitchRelayErrors": (5, SELECT2 + 5),
    "PortXmitDiscards": (6, SELECT2 + 6),
    "PortXmitConstraintErrors": (7, SELECT2 + 7),
    "PortRcvConstraintErrors": (8, SELECT2 + 8),
    "LocalLinkIntegrityErrors": (9, SELECT2 + 9),
    "ExcessiveBufferOverrunErrors": (10, SELECT2 + 10),
    "VL15Dropped": (11, SELECT2 + 11),
    "PortXmitData": (12, 0),
    "PortRcvData": (13, 1),
    "PortXmitPkts": (14, 2),
    "PortRcvPkts": (15, 3),
    "PortXmitWait": (SELECT2 + 0, SELECT2 + 12),
    "QP1Dropped": (SELECT2 + 1, SELECT2 + 13),
    "PortUnicastXmitPkts": (None, 4),
    "PortUnicastRcvPkts": (None, 5),
    "PortMulticastXmitPkts": (None, 6),
    "PortMulticastRcvPkts": (None, 7),
}


def counter_widths(layout: Layout) -> dict[str, int]:
    """The counters ``layout`` carries, in its order, and their widths in bits."""
    return {name: width for name, _, width in layout.fields if name not in SELECT_FIELDS}


PORT_COUNTERS_WIDTHS = counter_widths(PORT_COUNTERS)
# Without IsAdditionalPortCountersExtendedSupported, PortCountersExtended carries only the
# counters before SymbolErrorCounter (the data and packet counters, bits 64-575).
_ADDITIONAL_FROM = next(o for n, o, _ in PORT_COUNTERS_EXT.fields if n == "SymbolErrorCounter")
PORT_COUNTERS_EXT_BASIC = frozenset(
    name
    for name, offset, _ in PORT_COUNTERS_EXT.fields
    if name not in SELECT_FIELDS and offset < _ADDITIONAL_FROM
)
# The error details (PortRcvErrorDetails, PortXmitDiscardDetails, 16.1.4): CounterSelect
# bit n resets the attribute's n-th counter.
RCV_ERROR_DETAILS = tuple(counter_widths(PORT_RCV_ERROR_DETAILS))
XMIT_DISCARD_DETAILS = tuple(counter_widths(PORT_XMIT_DISCARD_DETAILS))
DETAIL_WIDTHS = {
    **counter_widths(PORT_RCV_ERROR_DETAILS),
    **counter_widths(PORT_XMIT_DISCARD_DETAILS),
}
