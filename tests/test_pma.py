"""The Performance Management Agent in-process, on the lab fabric (IBA Vol. 1, 16.1):
ClassPortInfo, PortCounters and PortCountersExtended through PortSelect (one port,
AllPortSelect), Set as a reset of the selected counters, the extended view of a device
without the additional counters, and the error details."""

from __future__ import annotations

import pytest

from fabriclab.ib.caps import PM_ALL_PORT_SELECT
from fabriclab.ib.mad.consts import (
    STATUS_INVALID_FIELD,
    STATUS_METHOD_ATTR_UNSUPPORTED,
    STATUS_OK,
    Attr,
    Method,
)
from fabriclab.ib.mad.layouts import (
    CLASS_PORT_INFO,
    PORT_COUNTERS,
    PORT_COUNTERS_EXT,
    PORT_RCV_ERROR_DETAILS,
    PORT_XMIT_DISCARD_DETAILS,
)
from fabriclab.model.build import build
from fabriclab.sim.fabric.pma import Pma
from fabriclab.sim.fabric.state import MAD_WORDS, SimFabric
from fabriclab.spec.load import load_spec, parse_spec_text

GET, SET = int(Method.GET), int(Method.SET)
LEAF = "MF0;LAB-IBLEAF-01:MQM9701/U1"
W1 = "sched-worker1 mlx5_0"


def _sim(spec):
    cluster = build(spec)
    sim = SimFabric(cluster.fabric)

    def node(desc: str):
        return sim.node_of(cluster.fabric.find(desc))

    return sim, node


@pytest.fixture()
def lab():
    return _sim(load_spec("lab"))


def gmp(port, attr: Attr, method: int = GET, **values):
    """One PMA request to ``port``'s node: (status, the attribute's fields)."""
    layout = {
        Attr.PORT_COUNTERS: PORT_COUNTERS,
        Attr.PORT_COUNTERS_EXT: PORT_COUNTERS_EXT,
        Attr.PORT_RCV_ERROR_DETAILS: PORT_RCV_ERROR_DETAILS,
        Attr.PORT_XMIT_DISCARD_DETAILS: PORT_XMIT_DISCARD_DETAILS,
        Attr.CLASS_PORT_INFO: CLASS_PORT_INFO,
    }[attr]
    data = layout.pack(values).ljust(192, b"\0")
    status, reply = Pma().handlers[int(attr)](port, method, 0, data)
    assert len(reply) == 192
    return status, layout.unpack(reply)


def test_class_port_info(lab):
    _, node = lab
    leaf, ca = node(LEAF), node(W1)
    status, cpi = gmp(leaf.ports[0], Attr.CLASS_PORT_INFO)
    assert status == STATUS_OK and cpi["CapabilityMask"] & PM_ALL_PORT_SELECT
    assert (cpi["BaseVersion"], cpi["ClassVersion"]) == (1, 1)
    status, cpi = gmp(ca.ports[1], Attr.CLASS_PORT_INFO)
    assert status == STATUS_OK and not cpi["CapabilityMask"] & PM_ALL_PORT_SELECT
    assert gmp(ca.ports[1], Attr.CLASS_PORT_INFO, SET)[0] == STATUS_METHOD_ATTR_UNSUPPORTED


def test_port_counters_of_the_selected_port(lab):
    _, node = lab
    leaf = node(LEAF)
    leaf.ports[3].counters.add("SymbolErrorCounter", 4)
    status, v = gmp(leaf.ports[0], Attr.PORT_COUNTERS, PortSelect=3)
    assert status == STATUS_OK and v["SymbolErrorCounter"] == 4 and v["PortSelect"] == 3
    assert gmp(leaf.ports[0], Attr.PORT_COUNTERS, PortSelect=2)[1]["SymbolErrorCounter"] == 0
    # a port the switch does not have
    status, v = gmp(leaf.ports[0], Attr.PORT_COUNTERS, PortSelect=70)
    assert status == STATUS_INVALID_FIELD and v["PortSelect"] == 70


def test_a_ca_answers_for_its_own_port_only(lab):
    _, node = lab
    ca = node(W1).ports[1]
    ca.counters.add("LinkDownedCounter", 2)
    for select in (0, 1):
        status, v = gmp(ca, Attr.PORT_COUNTERS, PortSelect=select)
        assert status == STATUS_OK and v["LinkDownedCounter"] == 2
    for select in (2, 0xFF):  # and no AllPortSelect on a ConnectX
        assert gmp(ca, Attr.PORT_COUNTERS, PortSelect=select)[0] == STATUS_INVALID_FIELD


def test_mads_that_crossed_a_port_are_counted_when_read(lab):
    """Packets and data (in 4-byte words: a MAD on the wire is 72) of the MADs through a
    port show in both views."""
    _, node = lab
    p = node(LEAF).ports[1]
    p.mad_out, p.mad_in = 5, 2
    _, v = gmp(node(LEAF).ports[0], Attr.PORT_COUNTERS, PortSelect=1)
    assert (v["PortXmitPkts"], v["PortXmitData"]) == (5, 5 * MAD_WORDS)
    assert (v["PortRcvPkts"], v["PortRcvData"]) == (2, 2 * MAD_WORDS)
    _status, v = gmp(node(LEAF).ports[0], Attr.PORT_COUNTERS_EXT, PortSelect=1)
    assert (v["PortUnicastXmitPkts"], v["PortUnicastRcvPkts"]) == (5, 2)
    assert p.mad_out == 0  # now in the counters


def test_set_resets_the_selected_counters_and_answers_after_the_reset(lab):
    _, node = lab
    leaf = node(LEAF)
    c = leaf.ports[2].counters
    c.add("SymbolErrorCounter", 9)
    c.add("LinkDownedCounter", 1)
    c.add("PortXmitWait", 33)
    status, v = gmp(
        leaf.ports[0], Attr.PORT_COUNTERS, SET, PortSelect=2, CounterSelect=0x1, CounterSelect2=0x1
    )
    assert status == STATUS_OK
    assert (v["SymbolErrorCounter"], v["LinkDownedCounter"], v["PortXmitWait"]) == (0, 1, 0)
    assert (v["CounterSelect"], v["CounterSelect2"]) == (1, 1)
    # the extended view was not reset
    v = gmp(leaf.ports[0], Attr.PORT_COUNTERS_EXT, PortSelect=2)[1]
    assert (v["SymbolErrorCounter"], v["PortXmitWait"]) == (9, 33)
    v = gmp(leaf.ports[0], Attr.PORT_COUNTERS_EXT, SET, PortSelect=2, CounterSelect2=1 << 12)[1]
    assert (v["SymbolErrorCounter"], v["PortXmitWait"]) == (9, 0)


def test_all_port_select_sums_every_port_of_a_switch(lab):
    _, node = lab
    leaf = node(LEAF)
    for num in (1, 2, 9):
        leaf.ports[num].counters.add("LinkDownedCounter", 100)
        leaf.ports[num].counters.add("PortRcvErrors", num)
    status, v = gmp(leaf.ports[0], Attr.PORT_COUNTERS, PortSelect=0xFF)
    assert status == STATUS_OK and v["PortSelect"] == 0xFF
    assert v["LinkDownedCounter"] == 255 and v["PortRcvErrors"] == 12  # 8 bits: saturated
    v = gmp(leaf.ports[0], Attr.PORT_COUNTERS_EXT, PortSelect=0xFF)[1]
    assert v["LinkDownedCounter"] == 300
    # a Set through AllPortSelect resets every port
    gmp(leaf.ports[0], Attr.PORT_COUNTERS, SET, PortSelect=0xFF, CounterSelect=0xFFFF)
    assert all(
        gmp(leaf.ports[0], Attr.PORT_COUNTERS, PortSelect=n)[1]["PortRcvErrors"] == 0
        for n in (1, 2, 9)
    )


def test_extended_counters_without_the_additional_ones():
    """A device whose PMA does not set IsAdditionalPortCountersExtendedSupported
    (ConnectX-6, Quantum HDR) shows only the data and packet counters there."""
    spec = parse_spec_text(
        "name: hdr\ntrays:\n  - hosts: h[1-2]\n    gpus: 0\n    hcas: 1\n"
        "    hca_model: connectx-6\nfabric:\n  fat_tree:\n    tiers: 1\n    switch: quantum\n",
        "hdr.yaml",
    )
    sim, node = _sim(spec)
    ca = next(n for n in sim.nodes if not n.is_switch).ports[1]
    ca.counters.add("SymbolErrorCounter", 5)
    ca.counters.add("PortXmitData", 6)
    ca.counters.add("PortMulticastRcvPkts", 7)
    v = gmp(ca, Attr.PORT_COUNTERS_EXT, PortSelect=1)[1]
    assert v["SymbolErrorCounter"] == 0
    assert (v["PortXmitData"], v["PortMulticastRcvPkts"]) == (6, 7)
    # a ConnectX-7 shows them
    sim, node = _sim(load_spec("lab"))
    cx7 = node(W1).ports[1]
    cx7.counters.add("SymbolErrorCounter", 5)
    assert gmp(cx7, Attr.PORT_COUNTERS_EXT, PortSelect=1)[1]["SymbolErrorCounter"] == 5


def test_error_details(lab):
    _, node = lab
    leaf = node(LEAF)
    for attr, layout in (
        (Attr.PORT_RCV_ERROR_DETAILS, PORT_RCV_ERROR_DETAILS),
        (Attr.PORT_XMIT_DISCARD_DETAILS, PORT_XMIT_DISCARD_DETAILS),
    ):
        status, v = gmp(leaf.ports[0], attr, PortSelect=4)
        assert status == STATUS_OK and v["PortSelect"] == 4
        assert not any(
            v[name] for name, _, _ in layout.fields if name not in ("PortSelect", "CounterSelect")
        )
        assert gmp(leaf.ports[0], attr, PortSelect=70)[0] == STATUS_INVALID_FIELD
        assert gmp(leaf.ports[0], attr, SET, PortSelect=4, CounterSelect=0xF)[0] == STATUS_OK
