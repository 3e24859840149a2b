"""Port counters as the PMA shows them (IBA Vol. 1, 16.1.3.5 and 16.1.4.11).

Each counter is kept once, as a 64-bit running total.  PortCounters and
PortCountersExtended are two views of it, each with its own reset point: a reset
through one view does not touch the other, as on real hardware.  PortCounters fields
are narrow (4 to 32 bits) and stop at their maximum instead of wrapping; the extended
ones are 64 bits wide.
"""

from __future__ import annotations

# name -> (PortCounters width or 0 if not in PortCounters,
#          PortCounters CounterSelect bit (CounterSelect2 bits as 16 + n) or -1,
#          PortCountersExtended CounterSelect bit (CounterSelect2 bits as 16 + n) or -1)
COUNTERS: dict[str, tuple[int, int, int]] = {
    "SymbolErrorCounter": (16, 0, 16 + 0),
    "LinkErrorRecoveryCounter": (8, 1, 16 + 1),
    "LinkDownedCounter": (8, 2, 16 + 2),
    "PortRcvErrors": (16, 3, 16 + 3),
    "PortRcvRemotePhysicalErrors": (16, 4, 16 + 4),
    "PortRcvSwitchRelayErrors": (16, 5, 16 + 5),
    "PortXmitDiscards": (16, 6, 16 + 6),
    "PortXmitConstraintErrors": (8, 7, 16 + 7),
    "PortRcvConstraintErrors": (8, 8, 16 + 8),
    "LocalLinkIntegrityErrors": (4, 9, 16 + 9),
    "ExcessiveBufferOverrunErrors": (4, 10, 16 + 10),
    "VL15Dropped": (16, 11, 16 + 11),
    "PortXmitData": (32, 12, 0),
    "PortRcvData": (32, 13, 1),
    "PortXmitPkts": (32, 14, 2),
    "PortRcvPkts": (32, 15, 3),
    "PortXmitWait": (32, 16 + 0, 16 + 12),
    "QP1Dropped": (16, 16 + 1, 16 + 13),
    "PortUnicastXmitPkts": (0, -1, 4),
    "PortUnicastRcvPkts": (0, -1, 5),
    "PortMulticastXmitPkts": (0, -1, 6),
    "PortMulticastRcvPkts": (0, -1, 7),
}
NAMES = tuple(COUNTERS)
_MAX64 = (1 << 64) - 1
# Receive-error details (PortRcvErrorDetails) and transmit-discard details are 16-bit.
DETAILS = ("PortLocalPhysicalErrors", "PortMalformedPktErrors", "PortBufferOverrunErrors",
           "PortDLIDMappingErrors", "PortVLMappingErrors", "PortLoopingErrors",
           "PortInactiveDiscards", "PortNeighborMTUDiscards", "PortSwLifetimeLimitDiscards",
           "PortSwHOQLifetimeLimitDiscards")


class Counters:
    """One port's counters: running totals plus a reset point per view."""

    __slots__ = ("raw", "base", "base_ext", "details", "details_base")

    def __init__(self) -> None:
        self.raw = dict.fromkeys(NAMES, 0)
        self.base: dict[str, int] = {}
        self.base_ext: dict[str, int] = {}
        self.details = dict.fromkeys(DETAILS, 0)
        self.details_base: dict[str, int] = {}

    def add(self, name: str, n: int = 1) -> None:
        self.raw[name] = (self.raw[name] + n) & _MAX64

    def count_packets(self, sent: int, received: int, words: int) -> None:
        """Unicast packets of ``words`` 4-byte words each, sent and received."""
        raw = self.raw
        raw["PortXmitPkts"] += sent
        raw["PortXmitData"] += sent * words
        raw["PortUnicastXmitPkts"] += sent
        raw["PortRcvPkts"] += received
        raw["PortRcvData"] += received * words
        raw["PortUnicastRcvPkts"] += received

    def view(self) -> dict[str, int]:
        """The PortCounters view: since its last reset, saturated at each field's width."""
        out = {}
        for name, (width, _, _) in COUNTERS.items():
            if width:
                v = (self.raw[name] - self.base.get(name, 0)) & _MAX64
                out[name] = min(v, (1 << width) - 1)
        return out

    def view_ext(self) -> dict[str, int]:
        """The PortCountersExtended view: since its last reset, 64 bits wide."""
        return {name: (self.raw[name] - self.base_ext.get(name, 0)) & _MAX64 for name in NAMES}

    def reset(self, select: int, select2: int) -> None:
        """Reset through PortCounters: CounterSelect bits, then CounterSelect2 bits."""
        mask = (select & 0xFFFF) | ((select2 & 0xFF) << 16)
        for name, (_, bit, _) in COUNTERS.items():
            if bit >= 0 and mask >> bit & 1:
                self.base[name] = self.raw[name]

    def reset_ext(self, select: int, select2: int) -> None:
        mask = (select & 0xFFFF) | ((select2 & 0xFFFF) << 16)
        for name, (_, _, bit) in COUNTERS.items():
            if bit >= 0 and mask >> bit & 1:
                self.base_ext[name] = self.raw[name]

    def details_view(self) -> dict[str, int]:
        return {n: min((v - self.details_base.get(n, 0)) & _MAX64, 0xFFFF)
                for n, v in self.details.items()}

    def reset_details(self, names: tuple[str, ...], select: int) -> None:
        for i, n in enumerate(names):
            if select >> i & 1:
                self.details_base[n] = self.details[n]


def summed(counters: list[Counters], extended: bool) -> dict[str, int]:
    """AllPortSelect (PortSelect 0xFF): the views of several ports added up, each sum
    saturating at the field's width like the counters themselves."""
    out: dict[str, int] = {}
    for c in counters:
        v = c.view_ext() if extended else c.view()
        for k, x in v.items():
            out[k] = out.get(k, 0) + x
    if not extended:
        for k in out:
            out[k] = min(out[k], (1 << COUNTERS[k][0]) - 1)
    else:
        for k in out:
            out[k] = min(out[k], _MAX64)
    return out
