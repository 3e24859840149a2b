"""The PortInfo table (fabriclab.sim.fabric.portinfo): each component once, in the
layout's order, and exactly the specification's RW components writable."""

from __future__ import annotations

from fabriclab.ib.mad.layouts import PORT_INFO
from fabriclab.model.build import build
from fabriclab.sim.fabric import portinfo
from fabriclab.sim.fabric.state import SimFabric
from fabriclab.spec.load import load_spec

# IBA Vol. 1, 14.2.5.6, Table 155 (PortInfo): the components marked RW, as libibmad
# names them (fields.c); LocalPortNum is RO and set per SMP, the rest are RO.
RW = {
    "Mkey", "GidPrefix", "Lid", "SMLid", "MkeyLeasePeriod", "LinkWidthEnabled",
    "LinkState", "PhysLinkState", "LinkDownDefState", "ProtectBits", "LMC",
    "LinkSpeedEnabled", "NeighborMTU", "SMSL", "VLHighLimit", "VLStallCount", "HoqLife",
    "OperVLs", "PartEnforceInb", "PartEnforceOutb", "FilterRawInb", "FilterRawOutb",
    "MkeyViolations", "PkeyViolations", "QkeyViolations", "ClientReregister",
    "McastPkeyTrapSuppressionEnabled", "SubnetTimeout", "InitReply", "LocalPhysErr",
    "OverrunErr", "LinkSpeedExtEnabled", "LinkSpeedExtEnabled2",
}  # fmt: skip


def test_each_component_once_in_the_layouts_order():
    fields = [c.field for c in portinfo.COMPONENTS]
    assert len(fields) == len(set(fields))
    order = [name for name, _, _ in PORT_INFO.fields]
    assert fields == sorted(fields, key=order.index)


def test_the_writable_components_are_the_specifications_rw_ones():
    assert {c.field for c in portinfo.SETTABLE} == RW


def test_encode_reads_each_component_from_the_port():
    sim = SimFabric(build(load_spec("lab")).fabric)
    node = next(n for n in sim.nodes if not n.is_switch)
    p = node.ports[1]
    v = PORT_INFO.unpack(portinfo.encode(p))
    assert (v["Lid"], v["CapMask"], v["LinkState"], v["PhysLinkState"]) == (
        p.lid,
        p.cap_mask,
        int(p.state),
        int(p.phys),
    )
    assert v["MtuCap"] == node.caps.mtu_cap and v["LinkSpeedSupported"] == 0x7
    assert v["LinkWidthActive"] == p.fabric_port.width.value
    assert v["LinkSpeedExtActive"] == p.fabric_port.speed.ext
    assert v["LocalPort"] == 0  # spliced in per SMP
