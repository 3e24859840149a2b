"""Every writable PortInfo component (IBA Vol. 1, 14.2.5.6) holds what the SM set, in
process through the SMA's handlers: on a CA port, on switch port 0 and on a switch
external port, including partition enforcement, which OpenSM clears on inter-switch
links (osm_pkey_mgr.c) and which used to read back as 1 whatever was set."""

from __future__ import annotations

import pytest
from test_sma import LEAF, SET, SPINE, W1, field, lab, set_port_info, smp  # noqa: F401

from fabriclab.ib.mad.consts import STATUS_INVALID_FIELD, STATUS_OK, Attr
from fabriclab.ib.mad.layouts import SWITCH_INFO

# what an SM may write on any port, with values different from power-on
COMMON = {
    "LinkWidthEnabled": 0x02,  # 4X only
    "LinkDownDefState": 3,  # Disabled
    "LinkSpeedEnabled": 0x04,  # QDR only
    "NeighborMTU": 4,  # 2048
    "VLHighLimit": 5,
    "VLStallCount": 3,
    "HoqLife": 17,
    "OperVLs": 2,  # VL0-1
    "LinkSpeedExtEnabled": 0x08,  # NDR only
    "MkeyViolations": 3,
    "PkeyViolations": 4,
    "QkeyViolations": 5,
    "InitReply": 1,
    "LocalPhysErr": 8,  # OpenSM's OSM_DEFAULT_ERROR_THRESHOLD
    "OverrunErr": 8,
}
# what only an end port (CA port, switch port 0) has
END_PORT = {
    "Mkey": 0x1122334455667788,
    "GidPrefix": 0xFE80000000001234,
    "Lid": 0x33,
    "SMLid": 0x21,
    "MkeyLeasePeriod": 60,
    "ProtectBits": 1,
    "LMC": 2,
    "SMSL": 3,
    "ClientReregister": 1,
    "McastPkeyTrapSuppressionEnabled": 1,
    "SubnetTimeout": 18,
}


def _check(sma, at, mod, values):
    status, reply = set_port_info(sma, at, mod, **values)
    assert status == STATUS_OK
    again = smp(sma, at, Attr.PORT_INFO, mod=mod)[1]
    for reply_bytes in (reply, again):
        got = {name: field(reply_bytes, name) for name in values}
        assert got == values


def test_ca_port_holds_every_writable_component(lab):  # noqa: F811
    _sim, sma, _, port = lab
    _check(sma, port(W1), 0, {**COMMON, **END_PORT})


def test_switch_port0_holds_every_writable_component(lab):  # noqa: F811
    _sim, sma, _, port = lab
    _check(sma, port(LEAF), 0, {**COMMON, **END_PORT})


def test_switch_external_port_holds_every_writable_component(lab):  # noqa: F811
    _sim, sma, _, port = lab
    leaf0 = port(LEAF)
    values = {**COMMON, "PartEnforceInb": 0, "PartEnforceOutb": 1}
    _check(sma, leaf0, 9, values)  # an uplink to the spine, set through port 0
    _check(sma, leaf0, 9, {"PartEnforceInb": 1, "PartEnforceOutb": 0})


def test_opensm_clearing_enforcement_on_an_inter_switch_link_holds(lab):  # noqa: F811
    """The Set OpenSM's pkey manager sends to an ISL port: enforcement off, the rest as
    read.  Before the fix the port still showed PartEnforceInb/Outb 1."""
    _sim, sma, _, port = lab
    leaf0, spine0 = port(LEAF), port(SPINE)
    for at, num in ((leaf0, 9), (spine0, 1)):
        before = smp(sma, at, Attr.PORT_INFO, mod=num)[1]
        assert (field(before, "PartEnforceInb"), field(before, "PartEnforceOutb")) == (1, 1)
        status, _reply = set_port_info(sma, at, num, PartEnforceInb=0, PartEnforceOutb=0)
        assert status == STATUS_OK
        after = smp(sma, at, Attr.PORT_INFO, mod=num)[1]
        assert (field(after, "PartEnforceInb"), field(after, "PartEnforceOutb")) == (0, 0)
        assert at.node.ports[num].part_enf_in == at.node.ports[num].part_enf_out == 0
    # a CA-facing port keeps its own
    pi = smp(sma, leaf0, Attr.PORT_INFO, mod=1)[1]
    assert (field(pi, "PartEnforceInb"), field(pi, "PartEnforceOutb")) == (1, 1)


def test_enforcement_and_raw_filter_are_reserved_where_the_spec_says(lab):  # noqa: F811
    """A CA port and switch port 0 have no partition enforcement; raw packets are never
    filtered (SwitchInfo says so), so FilterRaw stays 0 on every port."""
    _sim, sma, _, port = lab
    for at, mod in ((port(W1), 0), (port(LEAF), 0), (port(LEAF), 1)):
        set_port_info(
            sma, at, mod, PartEnforceInb=1, PartEnforceOutb=1, FilterRawInb=1, FilterRawOutb=1
        )
        pi = smp(sma, at, Attr.PORT_INFO, mod=mod)[1]
        switch_ext = at.node.is_switch and mod != 0
        assert field(pi, "PartEnforceInb") == field(pi, "PartEnforceOutb") == int(switch_ext)
        assert field(pi, "FilterRawInb") == field(pi, "FilterRawOutb") == 0
    si = SWITCH_INFO.unpack(smp(sma, port(LEAF), Attr.SWITCH_INFO)[1])
    assert (si["InboundPartEnf"], si["OutboundPartEnf"]) == (1, 1)
    assert (si["FilterRawInbound"], si["FilterRawOutbound"]) == (0, 0)
    assert si["PartEnforceCap"] == 64


@pytest.mark.parametrize("bad", [{"OperVLs": 5}, {"NeighborMTU": 6}])
def test_an_invalid_set_changes_no_component(lab, bad):  # noqa: F811
    _sim, sma, _, port = lab
    leaf0 = port(LEAF)
    before = smp(sma, leaf0, Attr.PORT_INFO, mod=9)[1]
    status, _ = set_port_info(sma, leaf0, 9, PartEnforceInb=0, LocalPhysErr=8, **bad)
    assert status == STATUS_INVALID_FIELD
    assert smp(sma, leaf0, Attr.PORT_INFO, mod=9)[1] == before
