"""Real dumps from real clusters (tests/fixtures) parse into the right fabric."""

from __future__ import annotations

import pytest

from fabriclab.errors import InputError
from fabriclab.formats import ibnetdiscover
from fabriclab.ib.enums import NodeType
from fabriclab.model.build import build
from fabriclab.model.fabric import diff_signatures
from fabriclab.model.to_spec import spec_from_fabric
from fabriclab.spec.schema import Spec

REAL = "real"
TOPO = "topograph"


def parse(fixtures_dir, group, name):
    return ibnetdiscover.parse_file(str(fixtures_dir / group / name))


def links_of(fabric):
    return {
        frozenset([(a.node.label, a.num), (b.node.label, b.num)]): (a.width.token, a.speed.token)
        for a, b in fabric.links()
    }


def test_ibdiagnet_ndr_rail_optimized_cluster(fixtures_dir):
    d = parse(
        fixtures_dir,
        REAL,
        "gary-minghuili__infiniband-exporter__data__ibdiagnet2__ibdiagnet2.ibnetdiscover",
    )
    f = d.fabric
    assert d.warnings == []
    assert len(f.switches()) == 9
    assert len(f.cas()) == 263
    assert f.link_count() == 271  # the ibdiagnet log's "271 links"
    ans = [n for n in f.cas() if n.desc == "Mellanox Technologies Aggregation Node"]
    assert len(ans) == 7
    for an in ans:  # hangs on port 65 of its switch; GUID = switch GUID + 8
        sw = an.port(1).peer.node
        assert an.port(1).peer.num == 65 and an.guid == sw.guid + 8 and an.sysimgguid == sw.guid
        assert an.devid == 0xCF09
    core = f.by_guid[0xB0CF0E0300D33FC0]
    assert (
        core.desc == "MF0;ib-switch-sequoia:MQM9700/U1" and core.lid == 180 and core.enhanced_port0
    )
    assert core.nports == 65 and core.devid == 0xD2F2
    hca = f.by_label["H-5c25730300e6706e"]
    assert hca.desc == "is-north-7-compute-1 mlx5_8" and hca.devid == 0x1021
    assert hca.port(1).lid == 164
    assert hca.port(1).peer.node.label == "S-fc6a1c030091cf00" and hca.port(1).peer.num == 1
    assert all(v == ("4x", "NDR") for v in links_of(f).values())


def test_ports_report_with_down_ports(fixtures_dir):
    d = parse(
        fixtures_dir,
        REAL,
        "treydock__infiniband_exporter__collectors__fixtures__ibnetdiscover__test.out",
    )
    f = d.fabric
    assert d.kind == "ports"
    assert len(f.switches()) == 4 and len(f.cas()) == 3 and f.link_count() == 4
    sw = f.by_guid[0x7CFE9003009CE5B0]
    assert sw.desc == "ib-i1l1s01" and sw.lid == 1719
    assert sw.port(10).peer.node.desc == "o0001 HCA-1"
    assert sw.port(1).peer.node.desc == "ib-i1l2s01" and sw.port(1).peer.num == 1
    down = f.by_guid[0x506B4B03005C2740].port(37)
    assert down.peer is None and down.speed.token == "???"
    hdr = f.by_guid[0x08C0EB0300ADD20E]
    assert hdr.port(80).peer is None and hdr.port(80).speed.token == "SDR" and hdr.nports == 80


def test_ports_report_unquoted_description(fixtures_dir):
    d = parse(
        fixtures_dir,
        REAL,
        "treydock__infiniband_exporter__collectors__fixtures__ibnetdiscover__test3.out",
    )
    (sw,) = d.fabric.switches()
    assert sw.desc == "Infiniscale-IV Mellanox Technologies" and sw.lid == 479


def test_old_sdr_dump_with_spaces(fixtures_dir):
    d = parse(fixtures_dir, REAL, "jabl__ibtopotool__tests__2.topo")
    f = d.fabric
    assert d.warnings == []
    assert [n.desc for n in f.cas()] and len(f.switches()) == 1 and len(f.cas()) == 2
    assert all(v[1] == "SDR" for v in links_of(f).values())


def test_sun_qdr_dump_ca_on_port_2(fixtures_dir):
    d = parse(fixtures_dir, REAL, "jabl__ibtopotool__tests__4.topo")
    f = d.fabric
    ca = f.by_label["H-0003ba000100e388"]
    assert (
        ca.nports == 2 and ca.port(2).guid == 0x3BA000100E38A and ca.sysimgguid == 0x3BA000100E38B
    )
    assert (
        ca.port(2).peer.node.desc == "Sun DCS 36 QDR switch localhost" and ca.port(2).peer.num == 23
    )
    assert ca.port(1).peer is None
    assert d.from_guid == 0x0021283A8389A0A0


def test_partial_dump_with_trunk(fixtures_dir):
    d = parse(fixtures_dir, REAL, "junousi__ibtopotool__tests__test2.topo")
    f = d.fabric
    assert len(f.switches()) == 2 and f.link_count() == 25
    a, b = f.switches()
    trunk = [p.num for p in a.iter_ports() if p.peer is not None and p.peer.node is b]
    assert trunk == [19, 20, 21, 22, 23]
    # the HCAs have no blocks of their own: each is reported, not dropped
    assert sum("only named as the far end" in w.what for w in d.warnings) == 20


def test_topograph_snippets(fixtures_dir):
    one = parse(
        fixtures_dir, TOPO, "pkg_ib_ib_test.ParseIbnetdiscoverFile.01_Single_CA.in.txt"
    ).fabric
    assert [(n.label, n.desc) for n in one.nodes] == [
        ("H-043f720300f4bc9e", "ngcprd10-luna3086 mlx5_3")
    ]
    two = parse(
        fixtures_dir, TOPO, "pkg_ib_ib_test.ParseIbnetdiscoverFile.02_Single_Switch.in.txt"
    ).fabric
    (sw,) = two.switches()
    assert sw.label == "Switch-1" and sw.desc == "switch1" and sw.nports == 1
    three = parse(
        fixtures_dir,
        TOPO,
        "pkg_ib_ib_test.ParseIbnetdiscoverFile.03_Switch_with_connections.in.txt",
    ).fabric
    spine = three.by_label["S-08c0eb03008cc87c"]
    assert spine.desc == "MF0;IB-ComputeSpine-03:MQM8700/U1" and spine.lid == 304
    assert spine.port(1).peer.node.desc == "MF0;IB-ComputeLeaf-101:MQM8700/U1"
    assert spine.port(2).peer.node.lid == 383 and spine.port(2).speed.token == "???"
    four = parse(
        fixtures_dir, TOPO, "pkg_ib_ib_test.ParseIbnetdiscoverFile.04_Multiple_entries.in.txt"
    ).fabric
    assert len(four.switches()) == 6 and len(four.cas()) == 1 and four.link_count() == 5
    leaf = four.by_label["S-b8cef603008032b8"]
    assert [p.peer.node.label for p in leaf.iter_ports() if p.peer] == [
        "S-08c0eb03008ccc3c",
        "S-08c0eb03008ccb5c",
        "S-08c0eb03008cc87c",
    ]


def test_topograph_invalid_snippet_is_a_clear_error(fixtures_dir):
    with pytest.raises(InputError) as e:
        parse(fixtures_dir, TOPO, "pkg_ib_ib_test.ParseIbnetdiscoverFile.05_Invalid_format.in.txt")
    assert "no nodes found" in str(e.value)


def test_gb200_tray_alone(fixtures_dir):
    d = parse(fixtures_dir, TOPO, "tests__output__ibnetdiscover__example-bad.out")
    (ca,) = d.fabric.nodes
    assert ca.type == NodeType.CA and ca.devid == 0x1021 and ca.desc == "dgx-gb200-n01-c1 HCA-1"
    assert d.from_guid == ca.guid and d.generated == "Fri Aug  8 06:33:24 2025"


ALL_DUMPS = [
    (REAL, "gary-minghuili__infiniband-exporter__data__ibdiagnet2__ibdiagnet2.ibnetdiscover"),
    (REAL, "jabl__ibtopotool__tests__2.topo"),
    (REAL, "jabl__ibtopotool__tests__4.topo"),
    (REAL, "junousi__ibtopotool__tests__test2.topo"),
    (REAL, "treydock__infiniband_exporter__collectors__fixtures__ibnetdiscover__test.out"),
    (TOPO, "pkg_ib_ib_test.ParseIbnetdiscoverFile.04_Multiple_entries.in.txt"),
    (TOPO, "tests__output__ibnetdiscover__example-bad.out"),
]


@pytest.mark.parametrize("group,name", ALL_DUMPS, ids=[n[:40] for _, n in ALL_DUMPS])
def test_import_builds_the_same_fabric(fixtures_dir, group, name):
    """A real dump imported as an explicit spec builds back into the same fabric."""
    f = parse(fixtures_dir, group, name).fabric
    spec = Spec.model_validate(spec_from_fabric(f, "imported"))
    g = build(spec).fabric
    assert g.same_as(f), "\n".join(diff_signatures(g, f))


def test_every_fixture_dump_parses(fixtures_dir):
    """Nothing under tests/fixtures that looks like ibnetdiscover output is left out."""
    names = sorted(
        p
        for p in (fixtures_dir / REAL).iterdir()
        if "ibnetdiscover" in p.name or p.suffix == ".topo"
    )
    names += sorted(
        p
        for p in (fixtures_dir / TOPO).iterdir()
        if "ibnetdiscover" in p.name.lower() and "Invalid" not in p.name
    )
    assert len(names) >= 11
    for p in names:
        d = ibnetdiscover.parse_file(str(p))
        assert d.fabric.nodes, p.name
