"""The real OpenSM and infiniband-diags against 'fabriclab up' (Debian opensm,
infiniband-diags and libumad2sim, unmodified).

Every fabric here is started with the real OpenSM (``--sm``), which must bring the
subnet up; the tools then must see exactly the model, at its real rates.
"""

from __future__ import annotations

import re

import pytest
from conftest import SPECS
from fabric_server import fabric_up
from helpers import no_timestamp

from fabriclab.formats import ibnetdiscover
from fabriclab.model.cluster import find_port

pytestmark = pytest.mark.realtools

CASES = [
    # (spec, where the tools run, native rate)
    ("lab", "sched-worker1", "4xNDR"),
    ("gb200-su", "gb-r03-t07:mlx5_2", "4xNDR"),
    (str(SPECS / "three-tier-hdr.yaml"), "node006:mlx5_1", "4xHDR"),
]


@pytest.fixture(scope="module", params=CASES, ids=lambda c: c[0].rsplit("/", 1)[-1])
def up(request, real_tools, tmp_path_factory):
    spec, origin, rate = request.param
    with fabric_up(spec, tmp_path_factory.mktemp("fabric"), sm=True) as f:
        f.origin, f.rate = origin, rate
        yield f


def test_opensm_brings_the_subnet_up(up):
    log = up.opensm_log()
    assert "SUBNET UP" in log
    assert "ERR" not in log, [line for line in log.splitlines() if "ERR" in line][:5]


def test_ibnetdiscover_equals_the_renderer(up):
    """The real tool through the server prints exactly what the renderer prints for
    the model, at the model's rates (NDR, which ibsim cannot show)."""
    real = up.run(up.origin, "ibnetdiscover").stdout
    start, _ = find_port(up.cluster, up.origin)
    ours = ibnetdiscover.render(up.cluster.fabric, start)
    assert no_timestamp(real) == no_timestamp(ours)
    rates = set(re.findall(r" (\d+x[A-Z0-9?]+)$", real, re.M))
    assert rates == {up.rate}


def test_ibnetdiscover_ports_report_equals_the_renderer(up):
    real = up.run(up.origin, "ibnetdiscover", "-p").stdout
    start, _ = find_port(up.cluster, up.origin)
    assert real == ibnetdiscover.render_ports(up.cluster.fabric, start)


def test_iblinkinfo_sees_every_link_active_at_the_model_rate(up):
    """After OpenSM, every cabled port is Active/LinkUp, with the model's LIDs."""
    out = up.run(up.origin, "iblinkinfo", "--switches-only").stdout
    links = re.findall(
        r"^\s*(\d+)\s+(\d+)\[\s*\]\s+==\(\s*(\d+X)\s+([\d.]+) Gbps\s+(\w+)/\s*(\w+)\)==>"
        r"\s+(\d+)\s+(\d+)\[",
        out,
        re.M,
    )
    fabric = up.cluster.fabric
    want = {
        (sw.lid, p.num)
        for sw in fabric.switches()
        for p in sw.iter_ports()
        if p.num and p.peer is not None
    }
    assert {(int(lid), int(port)) for lid, port, *_ in links} == want
    gbps = {"4xNDR": "106.25", "4xHDR": "53.125"}[up.rate]
    assert {(w, s, st, ph) for _, _, w, s, st, ph, _, _ in links} == {
        ("4X", gbps, "Active", "LinkUp")
    }


def test_lid_routes_reach_their_destination(up):
    """ibtracert follows the forwarding tables OpenSM wrote: from the first tray's HCA
    to the last tray's, through switches the model cables that way."""
    trays = up.cluster.trays
    src, dst = trays[0].hcas[0], trays[-1].hcas[-1]
    port = next(p for p in dst.iter_ports() if p.peer is not None)
    out = up.run(
        trays[0].host,
        "ibtracert",
        str(next(p for p in src.iter_ports() if p.peer).lid),
        str(port.lid),
    ).stdout
    assert out.splitlines()[0].startswith(f"From ca {{0x{src.guid:016x}}}")
    assert out.splitlines()[-1].startswith(f"To ca {{0x{dst.guid:016x}}}")
    hops = re.findall(r"-> switch port \{0x([0-9a-f]+)\}\[(\d+)\]", out)
    assert hops
    # each hop is a switch the previous one (or the source) is cabled to
    fabric = up.cluster.fabric
    prev = src
    for guid, inport in hops:
        sw = fabric.by_guid[int(guid, 16)]
        assert sw.ports[int(inport)].peer.node is prev
        prev = sw


def test_smpquery_matches_the_model(up):
    sw = up.cluster.fabric.switches()[0]
    ni = up.run(up.origin, "smpquery", "nodeinfo", str(sw.lid)).stdout
    assert f"Guid:............................0x{sw.guid:016x}" in ni
    assert f"NumPorts:........................{sw.nports}" in ni
    assert f"DevId:...........................0x{sw.devid:04x}" in ni
    desc = up.run(up.origin, "smpquery", "nodedesc", str(sw.lid)).stdout
    assert sw.desc in desc
    port = next(p for p in sw.iter_ports() if p.num and p.peer is not None)
    pi = up.run(up.origin, "smpquery", "portinfo", str(sw.lid), str(port.num)).stdout
    assert "LinkState:.......................Active" in pi
    ext = {"4xNDR": "106.25 Gbps", "4xHDR": "53.125 Gbps"}[up.rate]
    assert f"LinkSpeedExtActive:..............{ext}" in pi


def test_sminfo_and_sa_queries_reach_opensm(up):
    sm = up.run(up.origin, "sminfo").stdout
    assert "SMINFO_MASTER" in sm
    # A NodeRecord from OpenSM's SA.  (Only one: a table longer than one MAD needs RMPP,
    # which libumad2sim does not do, so it would arrive cut to its first segment.)
    far = up.cluster.trays[-1].hcas[-1]
    lid = next(p for p in far.iter_ports() if p.peer is not None).lid
    rec = up.run(up.origin, "saquery", "NR", str(lid)).stdout
    assert f"lid.....................{lid}" in rec
    assert f"NodeDescription.........{far.desc}" in rec


def test_perfquery_counts_and_resets(up):
    base = up.run(up.origin, "perfquery", "-x").stdout
    assert re.search(r"CapMask: 0x5A00", base)
    xmit = int(re.search(r"PortXmitPkts:\.+(\d+)", base).group(1))
    assert xmit > 0  # MADs cross the port too
    # a healthy fabric, just configured by the SM: no error counted anywhere
    plain = up.run(up.origin, "perfquery").stdout
    for name in (
        "SymbolErrorCounter",
        "LinkErrorRecoveryCounter",
        "LinkDownedCounter",
        "PortRcvErrors",
        "PortXmitDiscards",
        "PortRcvSwitchRelayErrors",
    ):
        assert re.search(rf"^{name}:\.+0$", plain, re.M), name
    up.run(up.origin, "perfquery", "-R")
    after = up.run(up.origin, "perfquery").stdout
    # only the MADs of this query crossed the port since the reset
    assert int(re.search(r"PortXmitPkts:\.+(\d+)", after).group(1)) <= 2
    assert re.search(r"SymbolErrorCounter:\.+0$", after, re.M)


def test_xdr_as_rdma_core_v44_sees_it(real_tools, tmp_path):
    """An XDR fabric: the PortInfo carries XDR in LinkSpeedExtActive2 (IBA 1.7), which
    Debian 12's rdma-core v44 predates.  Its ibnetdiscover, reading LinkSpeedExtActive
    (0 on an XDR link) and falling back to LinkSpeedActive, prints 4xQDR where current
    rdma-core (and fabriclab's renderer) prints 4xXDR: everything else is identical."""
    spec = str(SPECS / "xdr-lab.yaml")
    with fabric_up(spec, tmp_path, sm=True) as f:
        real = f.run("xw1", "ibnetdiscover").stdout
        pi = f.run("xw1", "smpquery", "-D", "portinfo", "0", "1").stdout
    start, _ = find_port(f.cluster, "xw1")
    ours = ibnetdiscover.render(f.cluster.fabric, start)
    assert "4xXDR" in ours
    assert no_timestamp(real) == no_timestamp(ours.replace("4xXDR", "4xQDR"))
    assert "LinkSpeedExtActive:..............No Extended Speed" in pi
    assert "CapabilityMask2:.................0x1c30" in pi  # ExtSpeeds2 and XDR supported
    assert re.search(
        r"LinkSpeedExtSupported:\.+14\.0625 Gbps or 25\.78125 Gbps or "
        r"53\.125 Gbps or 106\.25 Gbps",
        pi,
    )


def test_perfquery_all_ports_of_a_switch(up):
    sw = up.cluster.fabric.switches()[0]
    r = up.run(up.origin, "perfquery", "-a", str(sw.lid))
    out = r.stdout
    # the switch's PMA sums its ports itself (CapMask bit 8, AllPortSelect): perfquery
    # asks once, with PortSelect 255, instead of emulating it port by port
    assert out.startswith(f"# Port counters: Lid {sw.lid} port 255 (CapMask: 0x5B00)\n")
    assert "Emulating AllPortSelect" not in r.stderr
    assert int(re.search(r"PortRcvPkts:\.+(\d+)", out).group(1)) > 0
