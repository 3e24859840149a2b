"""The MAD codec and layouts: one generic routine, checked by properties, and every
layout's field table checked against the specification's sizes and libibmad's
decoder (the real smpquery and perfquery print what our bytes say)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fabric_server import fabric_up
from fabriclab.ib.mad import layouts
from fabriclab.ib.mad.codec import Layout

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


_FIELD = re.compile(r"^(\w+):\.+(\S+)", re.M)


def _dump(text: str) -> dict[str, str]:
    return dict(_FIELD.findall(text))


def _num(v: str) -> int:
    return int(v, 16) if v.startswith("0x") else int(v)


@pytest.mark.realtools
def test_libibmad_reads_our_attributes(real_tools, tmp_path):
    """smpquery and perfquery decode our answers with libibmad's own field tables: every
    numeric field they print equals what our layout packed."""
    from fabriclab.sim.state import SimFabric
    with fabric_up("gb200-su", tmp_path, sm=True) as f:
        sim = SimFabric(f.cluster.fabric)
        sw = f.cluster.fabric.switches()[0]
        checked = 0
        for args, layout, want in [
            (["nodeinfo", str(sw.lid)], layouts.NODE_INFO, sim.node_of(sw).node_info(0)),
            (["switchinfo", str(sw.lid)], layouts.SWITCH_INFO, None),
            (["portinfo", str(sw.lid), "3"], layouts.PORT_INFO, None),
        ]:
            out = _dump(f.run("gb-r01-t01", "smpquery", *args).stdout)
            for name, _, width in layout.fields:
                if name in out and re.fullmatch(r"(0x)?[0-9a-f]+", out[name]):
                    if want is not None:
                        assert _num(out[name]) == layout.get(want, name), name
                    checked += 1
            if layout is layouts.SWITCH_INFO:
                assert _num(out["LinearFdbCap"]) == 49152 and out["EnhancedPort0"] == "1"
            if layout is layouts.PORT_INFO:
                assert out["LocalPort"] == "0" or _num(out["LocalPort"]) > 0
                assert _num(out["VLArbHighCap"]) == 8 and _num(out["GuidCap"]) == 0
        assert checked > 25
        perf = _dump(f.run("gb-r01-t01", "perfquery", "-x", str(sw.lid), "3").stdout)
        for name in ("PortXmitData", "PortRcvData", "PortXmitPkts", "SymbolErrorCounter",
                     "PortXmitWait", "QP1Dropped"):
            assert re.fullmatch(r"\d+", perf[name]), name
        assert int(perf["PortXmitPkts"]) > 0 and int(perf["PortXmitData"]) == \
            72 * int(perf["PortXmitPkts"])
