"""A port's counters in-process (IBA Vol. 1, 16.1.3.5 PortCounters, 16.1.4.11
PortCountersExtended): one running total per counter, two views with their own widths
and reset points, CounterSelect bits, and AllPortSelect sums."""

from __future__ import annotations

import pytest

from fabriclab.ib.mad.layouts import PORT_COUNTERS, PORT_COUNTERS_EXT
from fabriclab.sim.fabric.counters import Counters, summed

MAX64 = (1 << 64) - 1


def widths(layout) -> dict[str, int]:
    return {
        name: width
        for name, _, width in layout.fields
        if name not in ("PortSelect", "CounterSelect", "CounterSelect2")
    }


def test_a_fresh_port_counts_nothing():
    c = Counters()
    assert set(c.view()) == set(widths(PORT_COUNTERS))
    assert set(c.view_ext()) == set(widths(PORT_COUNTERS_EXT))
    assert not any(c.view().values()) and not any(c.view_ext().values())


@pytest.mark.parametrize("name,width", sorted(widths(PORT_COUNTERS).items()))
def test_port_counters_saturate_at_their_width(name, width):
    """A PortCounters field stops at its maximum instead of wrapping; the extended view
    of the same counter goes on counting."""
    c = Counters()
    top = (1 << width) - 1
    c.add(name, top - 1)
    assert c.view()[name] == top - 1
    c.add(name, 5)
    assert c.view()[name] == top
    assert c.view_ext()[name] == top + 4


def test_the_extended_view_is_64_bits_and_wraps():
    c = Counters()
    c.add("PortXmitData", MAX64)
    assert c.view_ext()["PortXmitData"] == MAX64
    assert c.view()["PortXmitData"] == 0xFFFFFFFF
    c.add("PortXmitData", 2)
    assert c.view_ext()["PortXmitData"] == 1


def test_packets_count_in_packets_data_words_and_unicast():
    c = Counters()
    c.count_packets(3, 2, 72)
    v = c.view_ext()
    assert (v["PortXmitPkts"], v["PortXmitData"], v["PortUnicastXmitPkts"]) == (3, 216, 3)
    assert (v["PortRcvPkts"], v["PortRcvData"], v["PortUnicastRcvPkts"]) == (2, 144, 2)
    assert v["PortMulticastXmitPkts"] == 0


def test_each_view_resets_on_its_own():
    """A reset through PortCounters leaves PortCountersExtended as it was, and the other
    way round (as on real hardware)."""
    c = Counters()
    c.add("SymbolErrorCounter", 10)
    c.add("PortXmitData", 1000)
    c.reset(0xFFFF, 0xFF)
    assert c.view()["SymbolErrorCounter"] == 0 and c.view()["PortXmitData"] == 0
    assert c.view_ext()["SymbolErrorCounter"] == 10 and c.view_ext()["PortXmitData"] == 1000
    c.add("PortXmitData", 5)
    c.reset(0xFF, 0xFFFF, extended=True)
    assert c.view_ext()["PortXmitData"] == 0 and c.view_ext()["SymbolErrorCounter"] == 0
    assert c.view()["PortXmitData"] == 5


# CounterSelect (and CounterSelect2 as 16 + n) bits of each view (16.1.3.5, 16.1.4.11)
PORT_COUNTERS_BITS = {
    "SymbolErrorCounter": 0,
    "LinkErrorRecoveryCounter": 1,
    "LinkDownedCounter": 2,
    "PortRcvErrors": 3,
    "PortRcvRemotePhysicalErrors": 4,
    "PortRcvSwitchRelayErrors": 5,
    "PortXmitDiscards": 6,
    "PortXmitConstraintErrors": 7,
    "PortRcvConstraintErrors": 8,
    "LocalLinkIntegrityErrors": 9,
    "ExcessiveBufferOverrunErrors": 10,
    "VL15Dropped": 11,
    "PortXmitData": 12,
    "PortRcvData": 13,
    "PortXmitPkts": 14,
    "PortRcvPkts": 15,
    "PortXmitWait": 16,
    "QP1Dropped": 17,
}
EXT_BITS = {
    "PortXmitData": 0,
    "PortRcvData": 1,
    "PortXmitPkts": 2,
    "PortRcvPkts": 3,
    "PortUnicastXmitPkts": 4,
    "PortUnicastRcvPkts": 5,
    "PortMulticastXmitPkts": 6,
    "PortMulticastRcvPkts": 7,
    "SymbolErrorCounter": 16,
    "LinkErrorRecoveryCounter": 17,
    "LinkDownedCounter": 18,
    "PortRcvErrors": 19,
    "PortRcvRemotePhysicalErrors": 20,
    "PortRcvSwitchRelayErrors": 21,
    "PortXmitDiscards": 22,
    "PortXmitConstraintErrors": 23,
    "PortRcvConstraintErrors": 24,
    "LocalLinkIntegrityErrors": 25,
    "ExcessiveBufferOverrunErrors": 26,
    "VL15Dropped": 27,
    "PortXmitWait": 28,
    "QP1Dropped": 29,
}


def _filled() -> Counters:
    c = Counters()
    for name in c.view_ext():
        c.add(name, 3)
    return c


@pytest.mark.parametrize(
    "extended,name,bit",
    [(False, n, b) for n, b in sorted(PORT_COUNTERS_BITS.items())]
    + [(True, n, b) for n, b in sorted(EXT_BITS.items())],
)
def test_counter_select_resets_exactly_its_counter_in_its_view(extended, name, bit):
    c = _filled()
    c.reset(1 << bit if bit < 16 else 0, 1 << (bit - 16) if bit >= 16 else 0, extended)
    this, other = (c.view_ext(), c.view()) if extended else (c.view(), c.view_ext())
    assert this[name] == 0
    assert all(x == 3 for k, x in this.items() if k != name)
    assert all(x == 3 for x in other.values())


def test_all_port_select_sums_saturate_at_the_field_width():
    ports = [Counters() for _ in range(3)]
    for c in ports:
        c.add("LinkDownedCounter", 100)  # 8 bits: 300 does not fit
        c.add("SymbolErrorCounter", 7)
        c.add("PortXmitData", 1 << 63)
    s = summed(ports, extended=False)
    assert s["LinkDownedCounter"] == 255 and s["SymbolErrorCounter"] == 21
    assert s["PortXmitData"] == 0xFFFFFFFF
    s = summed(ports, extended=True)
    assert s["LinkDownedCounter"] == 300 and s["PortXmitData"] == MAX64


def test_error_details_are_16_bits_and_reset_by_select():
    c = Counters()
    c.details["PortLocalPhysicalErrors"] += 70000
    c.details["PortMalformedPktErrors"] += 2
    v = c.details_view()
    assert v["PortLocalPhysicalErrors"] == 0xFFFF and v["PortMalformedPktErrors"] == 2
    c.reset_details(("PortLocalPhysicalErrors", "PortMalformedPktErrors"), 0b10)
    v = c.details_view()
    assert v["PortLocalPhysicalErrors"] == 0xFFFF and v["PortMalformedPktErrors"] == 0
