"""The Subnet Management Agent in-process, on the lab fabric: Get and Set of every SMA
attribute through the handlers the server dispatches to, with the specification's rules
(IBA Vol. 1, 14.2.5): port state order, 0 meaning "no change", an invalid Set leaving the
attribute as it was, read-only attributes, table bounds."""

from __future__ import annotations

import pytest

from fabriclab.ib.enums import PhysState, PortState
from fabriclab.ib.mad.consts import (
    STATUS_INVALID_FIELD,
    STATUS_METHOD_ATTR_UNSUPPORTED,
    STATUS_OK,
    Attr,
    Method,
)
from fabriclab.ib.mad.layouts import NODE_INFO, PORT_INFO, SWITCH_INFO
from fabriclab.model.build import build
from fabriclab.sim.fabric.sma import Sma
from fabriclab.sim.fabric.state import DEFAULT_SL2VL, SimFabric
from fabriclab.spec.load import load_spec, parse_spec_text

LEAF = "MF0;LAB-IBLEAF-01:MQM9701/U1"
SPINE = "MF0;LAB-IBSPINE-01:MQM9701/U1"
W1 = "sched-worker1 mlx5_0"
W2 = "sched-worker2 mlx5_0"
GET, SET = int(Method.GET), int(Method.SET)


class Events:
    """What the SMA asks the rest of the fabric to do (link changes), written down."""

    def __init__(self):
        self.calls: list[tuple[str, object]] = []

    def disable_port(self, p):
        self.calls.append(("disable", p))

    def enable_port(self, p):
        self.calls.append(("enable", p))

    def retrain_port(self, p):
        self.calls.append(("retrain", p))


@pytest.fixture()
def lab():
    """A fresh SimFabric of the lab, an SMA with recorded events, and a port finder."""
    cluster = build(load_spec("lab"))
    sim = SimFabric(cluster.fabric)
    events = Events()
    sma = Sma(events=events)

    def port(desc: str, num: int | None = None):
        node = sim.node_of(cluster.fabric.find(desc))
        return node.ports[num if num is not None else (0 if node.is_switch else 1)]

    return sim, sma, events, port


def smp(sma: Sma, port, attr: Attr, method: int = GET, mod: int = 0, data: bytes = bytes(64)):
    """One SMP to ``port``'s SMA: (status, the 64 attribute bytes answered)."""
    status, reply = sma.handlers[int(attr)](port, method, mod, data)
    assert len(reply) == 64
    return status, reply


def set_port_info(sma, at, mod: int = 0, **values):
    """A PortInfo Set through ``at``: the current PortInfo with ``values`` written over it
    and LinkState/PhysLinkState 0 (no change) unless given."""
    _, current = smp(sma, at, Attr.PORT_INFO, mod=mod)
    values = {"LinkState": 0, "PhysLinkState": 0, **values}
    return smp(sma, at, Attr.PORT_INFO, SET, mod, PORT_INFO.pack(values, base=current))


def field(reply: bytes, name: str) -> int:
    return PORT_INFO.get(reply, name)


# --- read-only attributes --------------------------------------------------------------


def test_node_info_is_read_through_the_port_it_is_asked_on(lab):
    _sim, sma, _, port = lab
    ca = port(W1)
    status, ni = smp(sma, ca, Attr.NODE_INFO)
    v = NODE_INFO.unpack(ni)
    assert status == STATUS_OK
    assert (v["NodeType"], v["NumPorts"], v["LocalPort"]) == (1, 1, 1)
    assert v["PortGuid"] == ca.guid and v["Guid"] == ca.node.fabric_node.guid
    leaf = port(LEAF, 3)
    v = NODE_INFO.unpack(smp(sma, leaf, Attr.NODE_INFO)[1])
    assert (v["NodeType"], v["NumPorts"], v["LocalPort"]) == (2, 65, 3)


@pytest.mark.parametrize("attr", [Attr.NODE_INFO, Attr.NODE_DESC])
def test_read_only_attributes_refuse_a_set_and_stay(lab, attr):
    _sim, sma, _, port = lab
    ca = port(W1)
    before = smp(sma, ca, attr)[1]
    status, reply = smp(sma, ca, attr, SET, data=b"\xff" * 64)
    assert status == STATUS_METHOD_ATTR_UNSUPPORTED
    assert reply == before == smp(sma, ca, attr)[1]


def test_node_description_is_the_models(lab):
    _sim, sma, _, port = lab
    assert smp(sma, port(LEAF), Attr.NODE_DESC)[1].rstrip(b"\0").decode() == LEAF


# --- PortInfo: what a Get shows ----------------------------------------------------------


def test_port_info_get_fresh_fabric(lab):
    """After power-on: cabled ports physically up and INIT, port 0 ACTIVE, uncabled ports
    Polling/Down; LIDs of the LID plan on end ports; LocalPort is the port asked on."""
    _sim, sma, _, port = lab
    ca = port(W1)
    pi = smp(sma, ca, Attr.PORT_INFO)[1]
    assert field(pi, "LinkState") == PortState.INIT
    assert field(pi, "PhysLinkState") == PhysState.LINKUP
    assert field(pi, "Lid") == 100 and field(pi, "LocalPort") == 1
    leaf0 = port(LEAF)
    pi = smp(sma, leaf0, Attr.PORT_INFO, mod=0)[1]
    assert field(pi, "LinkState") == PortState.ACTIVE and field(pi, "Lid") == 2
    # an uncabled port of the leaf, read through port 0
    pi = smp(sma, leaf0, Attr.PORT_INFO, mod=40)[1]
    assert field(pi, "LinkState") == PortState.DOWN
    assert field(pi, "PhysLinkState") == PhysState.POLLING
    assert field(pi, "Lid") == 0 and field(pi, "LocalPort") == 0


def test_port_info_of_a_port_that_does_not_exist_is_an_invalid_field(lab):
    _sim, sma, _, port = lab
    assert smp(sma, port(LEAF), Attr.PORT_INFO, mod=66)[0] == STATUS_INVALID_FIELD
    assert smp(sma, port(W1), Attr.PORT_INFO, mod=2)[0] == STATUS_INVALID_FIELD


# --- PortInfo Set: state order -----------------------------------------------------------


def test_port_state_goes_init_armed_active_in_order(lab):
    _sim, sma, _, port = lab
    ca, leaf = port(W1), port(LEAF, 1)
    # INIT -> ACTIVE skips ARMED: refused, and nothing changes
    status, reply = set_port_info(sma, ca, LinkState=PortState.ACTIVE)
    assert status == STATUS_INVALID_FIELD and field(reply, "LinkState") == PortState.INIT
    assert ca.state == PortState.INIT
    # INIT -> ARMED: the peer is in INIT, enough
    assert set_port_info(sma, ca, LinkState=PortState.ARMED)[0] == STATUS_OK
    assert ca.state == PortState.ARMED
    # ARMED -> ACTIVE needs the peer ARMED at least
    assert set_port_info(sma, ca, LinkState=PortState.ACTIVE)[0] == STATUS_INVALID_FIELD
    assert ca.state == PortState.ARMED
    assert set_port_info(sma, port(LEAF), mod=1, LinkState=PortState.ARMED)[0] == STATUS_OK
    assert leaf.state == PortState.ARMED
    status, reply = set_port_info(sma, ca, LinkState=PortState.ACTIVE)
    assert status == STATUS_OK and field(reply, "LinkState") == PortState.ACTIVE
    # ACTIVE again: allowed (no change)
    assert set_port_info(sma, ca, LinkState=PortState.ACTIVE)[0] == STATUS_OK


def test_a_port_without_a_link_cannot_be_armed(lab):
    _sim, sma, _, port = lab
    status, _ = set_port_info(sma, port(LEAF), mod=40, LinkState=PortState.ARMED)
    assert status == STATUS_INVALID_FIELD
    assert port(LEAF, 40).state == PortState.DOWN


@pytest.mark.parametrize(
    "values",
    [
        {"LinkState": PortState.INIT},
        {"LinkState": 5},
        {"PhysLinkState": 1},
        {"PhysLinkState": PhysState.LINKUP},
    ],
)
def test_states_a_set_may_not_ask_for(lab, values):
    """LinkState may be set to NOP, Down, Armed or Active; PhysLinkState to NOP, Polling
    or Disabled (14.2.5.6): anything else is an invalid field, and nothing changes."""
    _sim, sma, events, port = lab
    ca = port(W1)
    before = smp(sma, ca, Attr.PORT_INFO)[1]
    status, reply = set_port_info(sma, ca, Lid=555, **values)
    assert status == STATUS_INVALID_FIELD
    assert reply == before and ca.lid == 100 and not events.calls


def test_link_changes_go_to_the_fabric(lab):
    """PhysLinkState Disabled, Polling on a disabled port and LinkState Down are the
    fabric's to carry out (both ends of the link change)."""
    _sim, sma, events, port = lab
    leaf = port(LEAF)
    assert set_port_info(sma, leaf, mod=3, PhysLinkState=PhysState.DISABLED)[0] == STATUS_OK
    assert events.calls == [("disable", port(LEAF, 3))]
    port(LEAF, 3).phys = PhysState.DISABLED  # what the fabric does
    assert set_port_info(sma, leaf, mod=3, PhysLinkState=PhysState.POLLING)[0] == STATUS_OK
    assert events.calls[-1] == ("enable", port(LEAF, 3))
    assert set_port_info(sma, leaf, mod=4, LinkState=PortState.DOWN)[0] == STATUS_OK
    assert events.calls[-1] == ("retrain", port(LEAF, 4))
    # Polling on a port that is not disabled: nothing to do
    assert set_port_info(sma, leaf, mod=5, PhysLinkState=PhysState.POLLING)[0] == STATUS_OK
    assert len(events.calls) == 3


# --- PortInfo Set: fields ------------------------------------------------------------------


def test_port_info_set_applies_end_port_fields(lab):
    _sim, sma, _, port = lab
    ca = port(W1)
    status, reply = set_port_info(
        sma,
        ca,
        Lid=0x1234,
        SMLid=7,
        LMC=2,
        SMSL=3,
        SubnetTimeout=18,
        ClientReregister=1,
        Mkey=0xAB,
        MkeyLeasePeriod=9,
        GidPrefix=0xFE80000000000001,
    )
    assert status == STATUS_OK
    assert (field(reply, "Lid"), field(reply, "SMLid"), field(reply, "LMC")) == (0x1234, 7, 2)
    assert (field(reply, "SMSL"), field(reply, "SubnetTimeout")) == (3, 18)
    assert (field(reply, "Mkey"), field(reply, "MkeyLeasePeriod")) == (0xAB, 9)
    assert field(reply, "GidPrefix") == 0xFE80000000000001
    assert (ca.lid, ca.smlid, ca.lmc) == (0x1234, 7, 2)
    assert smp(sma, ca, Attr.PORT_INFO)[1] == reply  # what a Get shows from now on


def test_a_switch_external_port_has_no_lid_of_its_own(lab):
    """LID, SM LID, LMC, M_Key ... belong to end ports: a Set of them on a switch's
    external port is accepted and changes nothing there."""
    _sim, sma, _, port = lab
    status, reply = set_port_info(sma, port(LEAF), mod=1, Lid=77, SMLid=5, LMC=3, HoqLife=12)
    assert status == STATUS_OK
    assert (field(reply, "Lid"), field(reply, "SMLid"), field(reply, "LMC")) == (0, 0, 0)
    assert field(reply, "HoqLife") == 12  # a per-port field does change
    assert port(LEAF, 1).lid == 0


def test_zero_means_no_change_in_enabled_fields(lab):
    _sim, sma, _, port = lab
    ca = port(W1)
    assert (
        set_port_info(
            sma,
            ca,
            LinkWidthEnabled=1,
            LinkSpeedEnabled=3,
            NeighborMTU=4,
            OperVLs=2,
            LinkDownDefState=PhysState.DISABLED,
            LinkSpeedExtEnabled=2,
        )[0]
        == STATUS_OK
    )
    status, reply = set_port_info(
        sma,
        ca,
        LinkWidthEnabled=0,
        LinkSpeedEnabled=0,
        NeighborMTU=0,
        OperVLs=0,
        LinkDownDefState=0,
        LinkSpeedExtEnabled=0,
        LinkSpeedExtEnabled2=0,
    )
    assert status == STATUS_OK
    assert (field(reply, "LinkWidthEnabled"), field(reply, "LinkSpeedEnabled")) == (1, 3)
    assert (field(reply, "NeighborMTU"), field(reply, "OperVLs")) == (4, 2)
    assert field(reply, "LinkDownDefState") == PhysState.DISABLED
    assert field(reply, "LinkSpeedExtEnabled") == 2


def test_all_ones_means_every_supported_value(lab):
    """LinkWidthEnabled 0xFF, LinkSpeedEnabled 15 and LinkSpeedExtEnabled 31 set the
    enabled values to what the port supports."""
    _sim, sma, _, port = lab
    ca = port(W1)
    set_port_info(sma, ca, LinkWidthEnabled=1, LinkSpeedEnabled=1, LinkSpeedExtEnabled=1)
    status, reply = set_port_info(
        sma, ca, LinkWidthEnabled=0xFF, LinkSpeedEnabled=0xF, LinkSpeedExtEnabled=31
    )
    assert status == STATUS_OK
    assert field(reply, "LinkWidthEnabled") == field(reply, "LinkWidthSupported")
    assert field(reply, "LinkSpeedEnabled") == 0x7  # SDR, DDR, QDR
    assert field(reply, "LinkSpeedExtEnabled") == field(reply, "LinkSpeedExtSupported")
    # a width outside what is supported is masked to it
    assert field(set_port_info(sma, ca, LinkWidthEnabled=0x20)[1], "LinkWidthEnabled") == 0


def test_an_invalid_port_info_set_changes_nothing(lab):
    """NeighborMTU above MtuCap or OperVLs above VLCap: invalid field, and none of the
    other fields of the same Set are applied."""
    _sim, sma, _, port = lab
    ca = port(W1)
    before = smp(sma, ca, Attr.PORT_INFO)[1]
    for bad in (
        {"NeighborMTU": field(before, "MtuCap") + 1},
        {"OperVLs": field(before, "VLCap") + 1},
    ):
        status, reply = set_port_info(sma, ca, Lid=999, SMLid=9, HoqLife=3, **bad)
        assert status == STATUS_INVALID_FIELD
        assert reply == before == smp(sma, ca, Attr.PORT_INFO)[1]
    assert ca.lid == 100


def test_read_only_port_info_fields_ignore_a_set(lab):
    _sim, sma, _, port = lab
    ca = port(W1)
    before = smp(sma, ca, Attr.PORT_INFO)[1]
    status, reply = set_port_info(
        sma,
        ca,
        CapMask=0,
        LinkWidthSupported=0,
        MtuCap=1,
        VLCap=1,
        GuidCap=0,
        LinkSpeedSupported=0,
        CapabilityMask2=0,
    )
    assert status == STATUS_OK and reply == before


def test_a_ca_sma_sets_only_the_port_it_is_reached_on():
    """A two-port CA: a Set through port 1 naming port 2 is an invalid field; a Get of
    port 2 through port 1 is answered."""
    spec = parse_spec_text(
        "name: two-port\ntrays:\n  - hosts: h[1-2]\n    gpus: 0\n    hcas: 1\n"
        "    hca_ports: 2\nfabric:\n  fat_tree:\n    tiers: 1\n    switch: quantum-2\n"
        "    rail_optimized: false\n",
        "two-port.yaml",
    )
    cluster = build(spec)
    sim = SimFabric(cluster.fabric)
    sma = Sma(events=Events())
    ca = next(n for n in sim.nodes if not n.is_switch and n.ports[2] is not None)
    p1 = ca.ports[1]
    assert smp(sma, p1, Attr.PORT_INFO, mod=2)[0] == STATUS_OK
    status, reply = set_port_info(sma, p1, mod=2, HoqLife=5)
    assert status == STATUS_INVALID_FIELD and field(reply, "HoqLife") != 5
    assert field(set_port_info(sma, p1, mod=0, HoqLife=5)[1], "HoqLife") == 5


# --- switch attributes -------------------------------------------------------------------


def test_switch_info_set(lab):
    _sim, sma, _, port = lab
    leaf = port(LEAF)
    status, si = smp(sma, leaf, Attr.SWITCH_INFO)
    v = SWITCH_INFO.unpack(si)
    assert status == STATUS_OK and v["LinearFdbCap"] == 49152 and v["StateChange"] == 1
    # write 1 to StateChange clears it; LinearFdbTop, LifeTime, DefPort are taken
    status, si = smp(
        sma,
        leaf,
        Attr.SWITCH_INFO,
        SET,
        data=SWITCH_INFO.pack(
            {"LinearFdbTop": 200, "LifeTime": 17, "StateChange": 1, "DefPort": 3}, base=si
        ),
    )
    v = SWITCH_INFO.unpack(si)
    assert status == STATUS_OK
    assert (v["LinearFdbTop"], v["LifeTime"], v["StateChange"], v["DefPort"]) == (200, 17, 0, 3)
    # LinearFdbTop at or beyond the cap: invalid, and nothing of the Set is applied
    status, si2 = smp(
        sma,
        leaf,
        Attr.SWITCH_INFO,
        SET,
        data=SWITCH_INFO.pack({"LinearFdbTop": 49152, "LifeTime": 2}, base=si),
    )
    assert status == STATUS_INVALID_FIELD and si2 == si
    # read-only fields stay
    status, si3 = smp(
        sma,
        leaf,
        Attr.SWITCH_INFO,
        SET,
        data=SWITCH_INFO.pack({"LinearFdbCap": 7, "EnhancedPort0": 0}, base=si),
    )
    assert SWITCH_INFO.unpack(si3)["LinearFdbCap"] == 49152
    assert SWITCH_INFO.unpack(si3)["EnhancedPort0"] == 1


@pytest.mark.parametrize("attr", [Attr.SWITCH_INFO, Attr.LINEAR_FDB, Attr.MCAST_FDB])
def test_switch_attributes_on_a_ca_are_unsupported(lab, attr):
    _sim, sma, _, port = lab
    assert smp(sma, port(W1), attr)[0] == STATUS_METHOD_ATTR_UNSUPPORTED


def test_linear_forwarding_table_blocks(lab):
    _sim, sma, _, port = lab
    leaf = port(LEAF)
    status, block = smp(sma, leaf, Attr.LINEAR_FDB, mod=1)
    assert status == STATUS_OK and block == b"\xff" * 64  # nothing routed yet
    table = bytes(range(64))
    assert smp(sma, leaf, Attr.LINEAR_FDB, SET, mod=1, data=table) == (STATUS_OK, table)
    assert smp(sma, leaf, Attr.LINEAR_FDB, mod=1)[1] == table
    assert smp(sma, leaf, Attr.LINEAR_FDB, mod=0)[1] == b"\xff" * 64
    assert leaf.node.sw.out_port(64 + 5) == 0xFF  # beyond LinearFdbTop: not routed
    leaf.node.sw.lft_top = 127
    assert leaf.node.sw.out_port(64 + 5) == 5
    # the last block of LinearFDBCap, and one past it
    assert smp(sma, leaf, Attr.LINEAR_FDB, mod=49152 // 64 - 1)[0] == STATUS_OK
    assert smp(sma, leaf, Attr.LINEAR_FDB, mod=49152 // 64)[0] == STATUS_INVALID_FIELD


def test_multicast_forwarding_table_blocks(lab):
    _sim, sma, _, port = lab
    leaf = port(LEAF)
    data = bytes(range(1, 65))
    mod = (1 << 28) | 3  # ports 16-31 of MLID block 3
    assert smp(sma, leaf, Attr.MCAST_FDB, SET, mod, data) == (STATUS_OK, data)
    assert smp(sma, leaf, Attr.MCAST_FDB, mod=mod)[1] == data
    assert smp(sma, leaf, Attr.MCAST_FDB, mod=3)[1] == bytes(64)
    assert smp(sma, leaf, Attr.MCAST_FDB, mod=(5 << 28))[0] == STATUS_INVALID_FIELD  # 65 ports
    assert smp(sma, leaf, Attr.MCAST_FDB, mod=1024 // 32)[0] == STATUS_INVALID_FIELD


# --- tables of every port -----------------------------------------------------------------


def test_guid_info(lab):
    """GUID 0 is the port's own and cannot be set; entries beyond GuidCap read 0."""
    _sim, sma, _, port = lab
    ca = port(W1)
    status, block = smp(sma, ca, Attr.GUID_INFO)
    assert status == STATUS_OK
    assert block == ca.guid.to_bytes(8, "big") + bytes(56)
    alias = b"".join((0x1111 * i).to_bytes(8, "big") for i in range(8))
    status, block = smp(sma, ca, Attr.GUID_INFO, SET, data=alias)
    assert status == STATUS_OK and block == ca.guid.to_bytes(8, "big") + alias[8:]
    assert smp(sma, ca, Attr.GUID_INFO)[1] == block
    assert smp(sma, ca, Attr.GUID_INFO, mod=1)[0] == STATUS_INVALID_FIELD  # GuidCap 8
    # a switch has one GUID (GuidCap 1), on port 0, whichever port is asked
    leaf = port(LEAF, 5)
    status, block = smp(sma, leaf, Attr.GUID_INFO, SET, data=alias)
    assert status == STATUS_OK and block == leaf.guid.to_bytes(8, "big") + bytes(56)


def test_pkey_table(lab):
    _sim, sma, _, port = lab
    ca = port(W1)
    status, block = smp(sma, ca, Attr.PKEY_TABLE)
    assert status == STATUS_OK and block == b"\xff\xff" + bytes(62)  # default partition
    keys = b"\xff\xff\x80\x01" + bytes(60)
    assert smp(sma, ca, Attr.PKEY_TABLE, SET, data=keys) == (STATUS_OK, keys)
    assert smp(sma, ca, Attr.PKEY_TABLE, mod=1)[0] == STATUS_OK  # PartitionCap 128: 4 blocks
    assert smp(sma, ca, Attr.PKEY_TABLE, mod=4)[0] == STATUS_INVALID_FIELD
    # a switch names the port in the modifier's high half; an external port has
    # PartitionEnforcementCap (64) entries: two blocks
    leaf = port(LEAF)
    assert smp(sma, leaf, Attr.PKEY_TABLE, mod=(3 << 16) | 1)[0] == STATUS_OK
    assert smp(sma, leaf, Attr.PKEY_TABLE, mod=(3 << 16) | 2)[0] == STATUS_INVALID_FIELD
    assert smp(sma, leaf, Attr.PKEY_TABLE, mod=(70 << 16))[0] == STATUS_INVALID_FIELD


def test_sl_to_vl(lab):
    _sim, sma, _, port = lab
    ca, leaf = port(W1), port(LEAF)
    assert smp(sma, ca, Attr.SL_TO_VL)[1][:8] == DEFAULT_SL2VL
    table = bytes.fromhex("0011223344556677")
    assert smp(sma, ca, Attr.SL_TO_VL, SET, data=table)[1][:8] == table
    # a switch: input port in bits 15-8, output port in 7-0, each pair its own table
    assert smp(sma, leaf, Attr.SL_TO_VL, SET, mod=(1 << 8) | 2, data=table)[1][:8] == table
    assert smp(sma, leaf, Attr.SL_TO_VL, mod=(2 << 8) | 1)[1][:8] == DEFAULT_SL2VL
    assert smp(sma, leaf, Attr.SL_TO_VL, mod=(1 << 8) | 70)[0] == STATUS_INVALID_FIELD


def test_vl_arbitration(lab):
    _sim, sma, _, port = lab
    ca = port(W1)
    # VLArbLowCap = VLArbHighCap = 8: blocks 1 (low) and 3 (high), 8 entries each
    entries = bytes(range(1, 65))
    status, block = smp(sma, ca, Attr.VL_ARB, SET, mod=1 << 16, data=entries)
    assert status == STATUS_OK and block == entries[:16] + bytes(48)
    assert smp(sma, ca, Attr.VL_ARB, mod=3 << 16) == (STATUS_OK, bytes(64))
    for block_num in (0, 2, 4, 5):
        assert smp(sma, ca, Attr.VL_ARB, mod=block_num << 16)[0] == STATUS_INVALID_FIELD


def test_mellanox_extended_port_info_only_where_libibnetdisc_expects_it():
    """Quantum-2 and ConnectX-7 do not answer it; Quantum (HDR) and ConnectX-6 do."""
    lab_sim = SimFabric(build(load_spec("lab")).fabric)
    sma = Sma(events=Events())
    sw = next(n for n in lab_sim.nodes if n.is_switch)
    assert smp(sma, sw.ports[0], Attr.MLNX_EXT_PORT_INFO)[0] == STATUS_METHOD_ATTR_UNSUPPORTED
    spec = parse_spec_text(
        "name: hdr\ntrays:\n  - hosts: h[1-2]\n    gpus: 0\n    hcas: 1\n"
        "    hca_model: connectx-6\nfabric:\n  fat_tree:\n    tiers: 1\n    switch: quantum\n",
        "hdr.yaml",
    )
    sim = SimFabric(build(spec).fabric)
    sw = next(n for n in sim.nodes if n.is_switch)
    status, _ = smp(sma, sw.ports[0], Attr.MLNX_EXT_PORT_INFO, mod=1)
    assert status == STATUS_OK
