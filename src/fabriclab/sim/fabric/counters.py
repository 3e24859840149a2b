"""Port counters as the PMA shows them (IBA Vol. 1, 16.1.3.5 and 16.1.4.11).

Each counter is kept once, as a 64-bit running total.  PortCounters and
PortCountersExtended are two views of it, each with its own reset point: a reset
through one view does not touch the other, as on real hardware.  PortCounters fields
are narrow (4 to 32 bits) and stop at their maximum instead of wrapping; the extended
ones are 64 bits wide.
"""

from __future__ import annotations

from ...ib.mad.counters import COUNTER_SELECT, DETAIL_WIDTHS, PORT_COUNTERS_WIDTHS, SELECT2

NAMES = tuple(COUNTER_SELECT)
DETAILS = tuple(DETAIL_WIDTHS)
_MAX64 = (1 << 64) - 1
# PortCounters: each field's maximum, where it stops
_PORT_COUNTERS_MAX = {name: (1 << width) - 1 for name, width in PORT_COUNTERS_WIDTHS.items()}
# (counter, its CounterSelect bit) for each view; CounterSelect2 bits from bit SELECT2 on
_SELECT = tuple((name, bit) for name, (bit, _) in COUNTER_SELECT.items() if bit is not None)
_SELECT_EXT = tuple((name, bit) for name, (_, bit) in COUNTER_SELECT.items() if bit is not None)
_DETAILS_MAX = {name: (1 << width) - 1 for name, width in DETAIL_WIDTHS.items()}


class Counters:
    """One port's counters: running totals plus a reset point per view."""

    __slots__ = (
        "base",
        "base_ext",
        "details",
        "details_base",
        "dirty",
        "moved",
        "raw",
        "version",
    )

    def __init__(self) -> None:
        self.raw = dict.fromkeys(NAMES, 0)
        self.base: dict[str, int] = {}
        self.base_ext: dict[str, int] = {}
        self.details = dict.fromkeys(DETAILS, 0)
        self.details_base: dict[str, int] = {}
        # whether anything changed since the journal last took them, so that a save
        # after each fault costs the ports that moved, not the fabric; ``dirty``: the
        # set they join when they move (the journal's, once it has taken them)
        self.moved = True
        self.dirty: set[Counters] | None = None
        # grows with every change of the raw totals or the extended view's reset point, so
        # that a watcher (:mod:`...live.watch`) takes only the ports that changed
        self.version = 0

    def touch(self) -> None:
        """They moved: the journal takes them at its next save."""
        self.moved = True
        if self.dirty is not None:
            self.dirty.add(self)

    def add(self, name: str, n: int = 1) -> None:
        """Count ``n`` more of counter ``name``."""
        self.raw[name] = (self.raw[name] + n) & _MAX64
        if not self.moved:
            self.touch()
        self.version += 1

    def count_packets(self, sent: int, received: int, words: int) -> None:
        """Unicast packets of ``words`` 4-byte words each, sent and received."""
        raw = self.raw
        if not self.moved:
            self.touch()
        self.version += 1
        raw["PortXmitPkts"] += sent
        raw["PortXmitData"] += sent * words
        raw["PortUnicastXmitPkts"] += sent
        raw["PortRcvPkts"] += received
        raw["PortRcvData"] += received * words
        raw["PortUnicastRcvPkts"] += received

    def view(self) -> dict[str, int]:
        """The PortCounters view: since its last reset, saturated at each field's width."""
        raw, base = self.raw, self.base
        return {
            name: min((raw[name] - base.get(name, 0)) & _MAX64, top)
            for name, top in _PORT_COUNTERS_MAX.items()
        }

    def view_ext(self) -> dict[str, int]:
        """The PortCountersExtended view: since its last reset, 64 bits wide."""
        return {name: (self.raw[name] - self.base_ext.get(name, 0)) & _MAX64 for name in NAMES}

    def reset(self, select: int, select2: int, extended: bool = False) -> None:
        """Reset through PortCounters, or through PortCountersExtended: the counters whose
        CounterSelect bit is set, then those of CounterSelect2 (8 bits in PortCounters,
        16 in PortCountersExtended)."""
        base, selects = (self.base_ext, _SELECT_EXT) if extended else (self.base, _SELECT)
        mask = (select & 0xFFFF) | ((select2 & (0xFFFF if extended else 0xFF)) << SELECT2)
        if not self.moved:
            self.touch()
        self.version += 1
        for name, bit in selects:
            if mask >> bit & 1:
                base[name] = self.raw[name]

    def details_view(self) -> dict[str, int]:
        """The error details since their last reset, saturated at their width."""
        return {
            n: min((v - self.details_base.get(n, 0)) & _MAX64, _DETAILS_MAX[n])
            for n, v in self.details.items()
        }

    def reset_details(self, names: tuple[str, ...], select: int) -> None:
        """Reset the detail ``names[i]`` for each CounterSelect bit i set."""
        if not self.moved:
            self.touch()
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
    if extended:
        return {k: min(v, _MAX64) for k, v in out.items()}
    return {k: min(v, _PORT_COUNTERS_MAX[k]) for k, v in out.items()}
