"""The MAD codec and layouts: one generic routine, checked by properties, and the layouts'
field tables checked against the specification's sizes and against libibmad's decoder.

The real smpquery and perfquery print an attribute field by field and, with ``-d -d``,
the 256 bytes they received.  For NodeInfo, SwitchInfo, PortInfo, MlnxExtPortInfo,
PortCounters, PortCountersExtended, PortRcvErrorDetails and PortXmitDiscardDetails,
every field of our layout must be among the printed ones (the few libibmad does not
print are named, with the reason) and equal to what our layout reads from those bytes
(the one field libibmad reads from another field's bytes is named too); of ClassPortInfo,
the two capability masks perfquery prints.  The values are also checked against what
the fabric holds.  The MAD headers, Notice
and SMInfo are printed by no tool here: test_specification_sizes anchors them.
"""

from __future__ import annotations

import random
import re

import pytest
import versions
from conftest import SPECS
from fabric_server import fabric_up
from helpers import run_tool, served
from hypothesis import given, settings
from hypothesis import strategies as st

from fabriclab.ib.mad import layouts
from fabriclab.ib.mad.codec import Layout
from fabriclab.ib.mad.consts import Attr
from fabriclab.model.build import build
from fabriclab.spec.load import load_spec

ALL = [v for v in vars(layouts).values() if isinstance(v, Layout)]


@st.composite
def values_for(draw, layout: Layout):
    return {name: draw(st.integers(0, (1 << width) - 1)) for name, _, width in layout.fields}


@pytest.mark.parametrize("layout", ALL, ids=lambda lay: lay.name)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_pack_unpack_round_trip(layout, data):
    values = data.draw(values_for(layout))
    raw = layout.pack(values)
    assert len(raw) == layout.size
    assert layout.unpack(raw) == values
    names = [f[0] for f in layout.fields]
    assert layout.getter(*names)(raw) == tuple(values[n] for n in names)
    assert layout.packer(*names)(**values) == raw
    assert layout.getter(*names, offset=3)(b"xyz" + raw) == tuple(values[n] for n in names)
    for name in names[:5]:
        assert layout.unpack(layout.splice(raw, name, 0))[name] == 0


def test_overlapping_or_outside_fields_are_refused():
    with pytest.raises(ValueError, match="overlaps"):
        Layout("X", 2, [("a", 0, 9), ("b", 8, 8)])
    with pytest.raises(ValueError, match="outside"):
        Layout("X", 2, [("a", 10, 8)])
    with pytest.raises(ValueError, match="does not fit"):
        Layout("X", 2, [("a", 0, 4)]).pack({"a": 16})


def test_specification_sizes():
    """Attribute sizes and a few anchor offsets from IBA Vol. 1 (and libibmad)."""
    assert layouts.NODE_INFO.size == layouts.PORT_INFO.size == layouts.SWITCH_INFO.size == 64
    assert layouts.PORT_INFO.fields[-1] == ("LinkSpeedExtEnabled", 507, 5)  # the last bits
    raw = layouts.PORT_INFO.pack({"Lid": 0x1234, "LocalPort": 7})
    assert raw[16:18] == b"\x12\x34" and raw[28] == 7
    raw = layouts.NODE_INFO.pack({"NodeType": 2, "Guid": 0x0102030405060708, "VendorId": 0x2C9})
    assert raw[2] == 2 and raw[12:20] == bytes(range(1, 9)) and raw[37:40] == b"\x00\x02\xc9"
    raw = layouts.PORT_COUNTERS.pack({"PortXmitData": 0xAABBCCDD})
    assert raw[24:28] == b"\xaa\xbb\xcc\xdd"


# --- libibmad reads what our layouts say ----------------------------------------------

_FIELD = re.compile(r"^(\w+):\.+(.*)$", re.M)  # libibmad's "Name:........value" lines
# libibmad's xdump of a received MAD (ibdebug > 1): 16 lines of 8 groups of 2 bytes
_RCV_BUF = re.compile(r"^rcv buf\n((?:[0-9a-f]{4}(?: [0-9a-f]{4}){7} ?\n){16})", re.M)
_CAP_MASKS = re.compile(r"\(CapMask: (0x[0-9A-F]+)(?: CapMask2: (0x[0-9A-F]+))?\)")

# The fields libibmad prints as words, read back into numbers.  Which words: rdma-core
# v44 (Debian 12), libibmad/fields.c names each field's mad_dump_* function and
# libibmad/dump.c holds their texts.
_WIDTHS = {"1X": 1, "4X": 2, "8X": 4, "12X": 8, "2X": 16}
_SPEEDS = {"2.5 Gbps": 1, "5.0 Gbps": 2, "10.0 Gbps": 4}
_EXT_SPEEDS = {"14.0625 Gbps": 1, "25.78125 Gbps": 2, "53.125 Gbps": 4, "106.25 Gbps": 8}
_MTUS = {"256": 1, "512": 2, "1024": 3, "2048": 4, "4096": 5}
_VLS = {"VL0": 1, "VL0-1": 2, "VL0-3": 3, "VL0-7": 4, "VL0-14": 5}
_ONE_OF = {  # by layout, then field (MlnxExtPortInfo's speeds, for one, are printed in hex)
    "NodeInfo": {"NodeType": {"Channel Adapter": 1, "Switch": 2, "Router": 3}},
}
_ONE_OF["PortInfo"] = {
    "LinkState": {"NoChange": 0, "Down": 1, "Initialize": 2, "Armed": 3, "Active": 4},
    "PhysLinkState": {
        "NoChange": 0,
        "Sleep": 1,
        "Polling": 2,
        "Disabled": 3,
        "PortConfigurationTraining": 4,
        "LinkUp": 5,
        "LinkErrorRecovery": 6,
        "PhyTest": 7,
    },
    "LinkDownDefState": {"NoChange": 0, "Sleep": 1, "Polling": 2},
    "LinkWidthActive": _WIDTHS,
    "LinkSpeedActive": {"Extended speed": 0, **_SPEEDS},
    "LinkSpeedExtActive": {"No Extended Speed": 0, **_EXT_SPEEDS},
    "NeighborMTU": _MTUS,
    "MtuCap": _MTUS,
    "VLCap": _VLS,
    "OperVLs": {"No change": 0, **_VLS},
}
_SET_OF = {
    "PortInfo": {  # bit masks, printed as "a or b or c"
        "LinkWidthEnabled": _WIDTHS,
        "LinkWidthSupported": _WIDTHS,
        "LinkSpeedSupported": _SPEEDS,
        "LinkSpeedEnabled": _SPEEDS,
        "LinkSpeedExtSupported": _EXT_SPEEDS,
        "LinkSpeedExtEnabled": _EXT_SPEEDS,
    }
}
# The XDR speeds of IBA 1.7: rdma-core 56 (Debian 13) prints them ("No Extended Speed 2"
# when none is active, "212.5 Gbps" for XDR: infiniband-diags 56.1 against an XDR fabric);
# rdma-core 44 (Debian 12) predates them and prints none.
_XDR = {"212.5 Gbps": 1}
_ONE_OF["PortInfo"]["LinkSpeedExtActive2"] = {"No Extended Speed 2": 0, **_XDR}
_SET_OF["PortInfo"]["LinkSpeedExtSupported2"] = _XDR
_SET_OF["PortInfo"]["LinkSpeedExtEnabled2"] = _XDR
_NOT_PRINTED = (
    {"PortInfo": {"LinkSpeedExtActive2", "LinkSpeedExtSupported2", "LinkSpeedExtEnabled2"}}
    if versions.rdma_core() < 56
    else {}
)
# A field libibmad reads from another field's bits: fields.c gives PortCounters'
# QP1Dropped as {160, 16} without BITSOFFS (rdma-core v44, and master still), which in
# its bit order is bytes 22-23, VL15Dropped's; the specification (IBA Vol. 1, 16.1.3.5)
# and our layout put QP1Dropped at bytes 20-21.
_READS_AS = {("PortCounters", "QP1Dropped"): "VL15Dropped"}


def _printed_number(layout: Layout, name: str, text: str) -> int:
    """The number behind libibmad's printed value of ``layout``'s field ``name``."""
    one_of, set_of = _ONE_OF.get(layout.name, {}), _SET_OF.get(layout.name, {})
    if name in one_of:
        return one_of[name][text]
    if name in set_of:
        if text == "0":  # dump_linkspeedext prints an empty mask as 0
            return 0
        if name == "LinkSpeedExtEnabled" and text == "Extended link speeds disabled":
            return 30
        return sum(set_of[name][w] for w in text.removesuffix(" (IBA extension)").split(" or "))
    return int(text, 16) if text.startswith("0x") else int(text)


def _received(stderr: str) -> dict[int, bytes]:
    """The MADs a tool received (from its -d -d dump), by attribute ID; the last of each."""
    out = {}
    for block in _RCV_BUF.findall(stderr):
        mad = bytes.fromhex(block.replace(" ", "").replace("\n", ""))
        out[int.from_bytes(mad[16:18], "big")] = mad
    return out


def _read_alike(layout: Layout, stdout: str, mad: bytes) -> dict[str, int]:
    """Every field of ``layout`` that libibmad printed equals what ``layout`` reads from
    the MAD libibmad decoded, and it printed every field but those it cannot; the
    values."""
    printed = dict(_FIELD.findall(stdout))
    ours = layout.unpack(mad[layouts.SMP_DATA : layouts.SMP_DATA + layout.size])  # = GMP_DATA
    assert set(printed) == set(ours) - _NOT_PRINTED.get(layout.name, set()), (
        layout.name,
        sorted(set(printed) ^ set(ours)),
    )
    for name, text in printed.items():
        want = ours[_READS_AS.get((layout.name, name), name)]
        assert _printed_number(layout, name, text) == want, (layout.name, name, text, want)
    return ours


@pytest.mark.realtools
def test_libibmad_reads_our_sma_attributes(real_tools, tmp_path):
    """smpquery's NodeInfo, SwitchInfo, PortInfo and MlnxExtPortInfo of a switch and of an
    HCA of a fabric the real OpenSM brought up (HDR: Quantum and ConnectX-6 answer
    MlnxExtPortInfo)."""
    from fabriclab.sim.fabric.state import MAD_WORDS, SimFabric

    with fabric_up(str(SPECS / "three-tier-hdr.yaml"), tmp_path, sm=True) as f:
        fabric = f.cluster.fabric
        sim = SimFabric(fabric)
        hca = fabric.find("node010 mlx5_1")
        sw, sw_port = hca.port(1).peer.node, hca.port(1).peer.num  # its leaf, and the port to it
        sm_lid = int(re.search(r"sm lid (\d+)", f.run("node001", "sminfo").stdout)[1])

        def smpquery(attr: int, *args: str) -> tuple[str, bytes]:
            r = f.run("node001", "smpquery", "-d", "-d", "--show_keys", *args)
            return r.stdout, _received(r.stderr)[attr]

        for node, lid, port in [(sw, sw.lid, 0), (hca, hca.port(1).lid, 1)]:
            out, mad = smpquery(Attr.NODE_INFO, "nodeinfo", str(lid))
            ours = _read_alike(layouts.NODE_INFO, out, mad)
            assert layouts.NODE_INFO.pack(ours) == sim.node_of(node).node_info(port)

        out, mad = smpquery(Attr.SWITCH_INFO, "switchinfo", str(sw.lid))
        ours = _read_alike(layouts.SWITCH_INFO, out, mad)
        # ibsim's defaults, which follow Mellanox switches (see ib.devices.ManagementCaps)
        assert ours["LinearFdbCap"] == 49152 and ours["EnhancedPort0"] == 1
        assert 0 < ours["LinearFdbTop"] < 49152  # OpenSM filled the forwarding table

        for lid, num, ext in [
            (sw.lid, 0, False),
            (sw.lid, sw_port, True),
            (hca.port(1).lid, 1, False),
        ]:
            out, mad = smpquery(Attr.PORT_INFO, "portinfo", str(lid), str(num))
            ours = _read_alike(layouts.PORT_INFO, out, mad)
            # LocalPortNum is the port the SMP came in by (ibsim sim_mad.c, do_portinfo):
            # a switch's port 0 when LID-routed to it, the HCA's own port
            assert ours["LocalPort"] == (0 if lid == sw.lid else 1)
            assert ours["Lid"] == (0 if ext else lid) and ours["SMLid"] == (0 if ext else sm_lid)
            assert ours["LinkState"] == 4 and ours["VLArbHighCap"] == 8
            # GUIDs per port (ib.devices): none on a switch's external port, 1 on its
            # port 0, 8 on a ConnectX
            assert ours["GuidCap"] == (0 if ext else 1 if lid == sw.lid else 8)

        for lid, num in [(sw.lid, sw_port), (hca.port(1).lid, 1)]:
            out, mad = smpquery(Attr.MLNX_EXT_PORT_INFO, "mlnxextportinfo", str(lid), str(num))
            _read_alike(layouts.MLNX_EXT_PORT_INFO, out, mad)

        # the MADs of the SM's sweeps crossed the switch: counted as packets of 72 words
        perf = f.run("node001", "perfquery", "-x", str(sw.lid), str(sw_port)).stdout
        perf = dict(_FIELD.findall(perf))
        assert int(perf["PortXmitPkts"]) > 0
        assert int(perf["PortXmitData"]) == MAD_WORDS * int(perf["PortXmitPkts"])


@pytest.mark.realtools
def test_libibmad_reads_our_pma_attributes(real_tools, tmp_path):
    """perfquery's PortCounters, PortCountersExtended, PortRcvErrorDetails and
    PortXmitDiscardDetails of an HCA port whose counters were given distinct values with
    bits across each field, so that a field read at the wrong offset or width reads
    something else; and ClassPortInfo's capability masks."""
    from fabriclab.ib.mad.counters import PORT_COUNTERS_WIDTHS
    from fabriclab.sim.fabric.counters import DETAILS, NAMES

    lab = build(load_spec("lab"))
    rng = random.Random(20250101)
    wide = {name: rng.getrandbits(62) | 1 << 62 for name in NAMES}
    narrow = {
        name: rng.randrange(1, (1 << width) - 1) for name, width in PORT_COUNTERS_WIDTHS.items()
    }
    details = {name: rng.randrange(1, 0xFFFF) for name in DETAILS}
    with served(lab) as srv:
        counters = srv.sim.port_of(lab.fabric.find("sched-worker1 mlx5_0").port(1)).counters
        for name in NAMES:
            counters.add(name, wide[name] - narrow.get(name, 0))
        counters.reset(0xFFFF, 0xFF)  # PortCounters counts from here, the extended view from 0
        for name, value in narrow.items():
            counters.add(name, value)
        for name, value in details.items():
            counters.details[name] = value

        def perfquery(*args: str) -> tuple[str, dict[int, bytes]]:
            r = run_tool(srv.name, "sched-worker1", ["perfquery", "-d", "-d", *args], tmp_path)
            assert r.returncode == 0, r.stderr[-2000:]
            return r.stdout, _received(r.stderr)

        out, mads = perfquery()
        ours = _read_alike(layouts.PORT_COUNTERS, out, mads[Attr.PORT_COUNTERS])
        assert ours == {**narrow, "PortSelect": 1, "CounterSelect": 0, "CounterSelect2": 0}

        out, mads = perfquery("-x")
        ours = _read_alike(layouts.PORT_COUNTERS_EXT, out, mads[Attr.PORT_COUNTERS_EXT])
        # libumad2sim 0.10 hands a tool only the first 224 bytes of each MAD it receives
        # (umad2sim.c: receiver() reads into alloc_umad_buf(sizeof(struct sim_request)),
        # 288 bytes, and umad2sim_read() copies at most that less umad_size(), 64): the
        # last 32 bytes hold these three, so what perfquery -x prints for them is not ours
        unseen = {"VL15Dropped", "PortXmitWait", "QP1Dropped"}
        assert {k: v for k, v in ours.items() if k not in unseen} == {
            **{k: v for k, v in wide.items() if k not in unseen},
            "PortSelect": 1,
            "CounterSelect": 0,
            "CounterSelect2": 0,
        }
        cpi = mads[Attr.CLASS_PORT_INFO][layouts.GMP_DATA :]
        cpi = layouts.CLASS_PORT_INFO.unpack(cpi[: layouts.CLASS_PORT_INFO.size])
        masks = _CAP_MASKS.search(out)
        # a ConnectX's masks (ib.devices.ManagementCaps): 0x5A00 as a real perfquery -x
        # shows it, and IsAdditionalPortCountersExtendedSupported
        assert int(masks[1], 16) == cpi["CapabilityMask"] == 0x5A00
        assert int(masks[2], 16) == cpi["CapabilityMask2"] == 0x2

        for flag, layout, attr in [
            ("-E", layouts.PORT_RCV_ERROR_DETAILS, Attr.PORT_RCV_ERROR_DETAILS),
            ("-D", layouts.PORT_XMIT_DISCARD_DETAILS, Attr.PORT_XMIT_DISCARD_DETAILS),
        ]:
            out, mads = perfquery(flag)
            ours = _read_alike(layout, out, mads[attr])
            assert ours == {
                **{k: v for k, v in details.items() if k in ours},
                "PortSelect": 1,
                "CounterSelect": 0,
            }
