"""The real OpenSM and infiniband-diags against 'fabriclab up' (Debian opensm,
infiniband-diags and libumad2sim, unmodified).

Every fabric here is started with the real OpenSM (``--sm``), which must bring the
subnet up; the tools then must see exactly the model, at its real rates.  Each tool test
runs with every tool set the machine has (``toolset``, tests/toolsets.py): the system's
and, on a machine older than Debian 13, the Debian 13 root's rdma-core 56.
"""

from __future__ import annotations

import re

import pytest
from conftest import SPECS
from fabric_server import fabric_up
from helpers import counter, no_timestamp

from fabriclab.formats import ibnetdiscover, rdma_core
from fabriclab.model.cluster import find_port
from fabriclab.model.fabric import diff_signatures

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


@pytest.fixture
def run(up, toolset):
    """Run a real tool of ``toolset`` attached at the fabric's origin."""
    return lambda *argv, **kw: up.run(up.origin, *argv, tools=toolset, **kw)


def test_opensm_brings_the_subnet_up(up):
    log = up.opensm_log()
    assert "SUBNET UP" in log
    assert "ERR" not in log, [line for line in log.splitlines() if "ERR" in line][:5]


def test_ibnetdiscover_equals_the_renderer(up, toolset, run):
    """The real tool through the server prints exactly what the renderer prints for
    the model, at the model's rates (NDR, which ibsim cannot show)."""
    real = run("ibnetdiscover").stdout
    start, _ = find_port(up.cluster, up.origin)
    ours = ibnetdiscover.render(up.cluster.fabric, start, rdma_core=toolset.rdma_core)
    assert no_timestamp(real) == no_timestamp(ours)
    rates = set(re.findall(r" (\d+x[A-Z0-9?]+)$", real, re.M))
    assert rates == {up.rate}


def test_ibnetdiscover_ports_report_equals_the_renderer(up, toolset, run):
    real = run("ibnetdiscover", "-p").stdout
    start, _ = find_port(up.cluster, up.origin)
    assert real == ibnetdiscover.render_ports(up.cluster.fabric, start, rdma_core=toolset.rdma_core)


def test_iblinkinfo_sees_every_link_active_at_the_model_rate(up, toolset, run):
    """After OpenSM, every cabled port is Active/LinkUp, with the model's LIDs."""
    out = run("iblinkinfo", "--switches-only").stdout
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


def test_lid_routes_reach_their_destination(up, toolset, run):
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
        tools=toolset,
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


def test_smpquery_matches_the_model(up, toolset, run):
    sw = up.cluster.fabric.switches()[0]
    ni = run("smpquery", "nodeinfo", str(sw.lid)).stdout
    assert f"Guid:............................0x{sw.guid:016x}" in ni
    assert f"NumPorts:........................{sw.nports}" in ni
    assert f"DevId:...........................0x{sw.devid:04x}" in ni
    desc = run("smpquery", "nodedesc", str(sw.lid)).stdout
    assert sw.desc in desc
    port = next(p for p in sw.iter_ports() if p.num and p.peer is not None)
    pi = run("smpquery", "portinfo", str(sw.lid), str(port.num)).stdout
    assert "LinkState:.......................Active" in pi
    ext = {"4xNDR": "106.25 Gbps", "4xHDR": "53.125 Gbps"}[up.rate]
    assert f"LinkSpeedExtActive:..............{ext}" in pi


def test_sminfo_and_sa_queries_reach_opensm(up, toolset, run):
    sm = run("sminfo").stdout
    assert "SMINFO_MASTER" in sm
    # A NodeRecord from OpenSM's SA.  (Only one: a table longer than one MAD needs RMPP,
    # which libumad2sim does not do, so it would arrive cut to its first segment.)
    far = up.cluster.trays[-1].hcas[-1]
    lid = next(p for p in far.iter_ports() if p.peer is not None).lid
    rec = run("saquery", "NR", str(lid)).stdout
    assert f"lid.....................{lid}" in rec
    assert f"NodeDescription.........{far.desc}" in rec


def test_perfquery_counts_and_resets(up, toolset, run):
    base = run("perfquery", "-x").stdout
    assert re.search(r"CapMask: 0x5A00", base)
    xmit = counter(base, "PortXmitPkts")
    assert xmit > 0  # MADs cross the port too
    # a healthy fabric, just configured by the SM: no error counted anywhere
    plain = run("perfquery").stdout
    for name in (
        "SymbolErrorCounter",
        "LinkErrorRecoveryCounter",
        "LinkDownedCounter",
        "PortRcvErrors",
        "PortXmitDiscards",
        "PortRcvSwitchRelayErrors",
    ):
        assert re.search(rf"^{name}:\.+0$", plain, re.M), name
    run("perfquery", "-R")
    after = run("perfquery").stdout
    # only the MADs of this query crossed the port since the reset
    assert counter(after, "PortXmitPkts") <= 2
    assert re.search(r"SymbolErrorCounter:\.+0$", after, re.M)


def test_xdr_as_each_rdma_core_sees_it(real_tools, toolset, tmp_path):
    """An XDR fabric: the PortInfo carries XDR in LinkSpeedExtActive2 (IBA 1.7).
    rdma-core 56 reads that field and prints 4xXDR; rdma-core 44 predates it, reads
    LinkSpeedExtActive (0 on an XDR link), falls back to LinkSpeedActive and prints
    4xQDR.  The renderer, told the tool set's release, prints what its ibnetdiscover
    prints, line for line, default and -p."""
    spec = str(SPECS / "xdr-lab.yaml")
    with fabric_up(spec, tmp_path, sm=True) as f:
        real = f.run("xw1", "ibnetdiscover", tools=toolset).stdout
        ports = f.run("xw1", "ibnetdiscover", "-p", tools=toolset).stdout
        pi = f.run("xw1", "smpquery", "-D", "portinfo", "0", "1", tools=toolset).stdout
    start, _ = find_port(f.cluster, "xw1")
    release = rdma_core.release(toolset.rdma_core)
    shown = {44: "4xQDR", 56: "4xXDR"}[release]
    ours = ibnetdiscover.render(f.cluster.fabric, start, rdma_core=release)
    assert no_timestamp(real) == no_timestamp(ours), toolset
    assert ports == ibnetdiscover.render_ports(f.cluster.fabric, start, rdma_core=release)
    assert set(re.findall(r" (\d+x[A-Z0-9?]+)$", real, re.M)) == {shown}, toolset
    assert "LinkSpeedExtActive:..............No Extended Speed" in pi
    assert "CapabilityMask2:.................0x1c30" in pi  # ExtSpeeds2 and XDR supported
    assert re.search(
        r"LinkSpeedExtSupported:\.+14\.0625 Gbps or 25\.78125 Gbps or "
        r"53\.125 Gbps or 106\.25 Gbps",
        pi,
    )
    if release >= 56:  # the field 44 does not know, printed
        assert "LinkSpeedExtActive2:.............212.5 Gbps" in pi, toolset
    else:
        assert "LinkSpeedExtActive2" not in pi, toolset


def test_perfquery_all_ports_of_a_switch(up, toolset, run):
    sw = up.cluster.fabric.switches()[0]
    r = run("perfquery", "-a", str(sw.lid))
    out = r.stdout
    # the switch's PMA sums its ports itself (CapMask bit 8, AllPortSelect): perfquery
    # asks once, with PortSelect 255, instead of emulating it port by port
    assert out.startswith(f"# Port counters: Lid {sw.lid} port 255 (CapMask: 0x5B00)\n")
    assert "Emulating AllPortSelect" not in r.stderr
    assert counter(out, "PortRcvPkts") > 0


def test_ibroute_shows_the_forwarding_table_opensm_wrote(up, toolset, run):
    """The leaf above the origin forwards each LID of a CA cabled to it out of the port
    the model cables that CA to."""
    start, _ = find_port(up.cluster, up.origin)
    leaf = start.peer.node
    out = run("ibroute", str(leaf.lid)).stdout
    assert out.startswith("Unicast lids [0x0-0x"), out[:200]
    cabled = [p for p in leaf.iter_ports() if p.num and p.peer and not p.peer.node.is_switch]
    assert cabled
    for p in cabled:
        q = p.peer
        line = (
            f"0x{q.lid:04x} {p.num:03d} : (Channel Adapter portguid 0x{q.guid:016x}: "
            f"'{q.node.desc}')"
        )
        assert line in out.splitlines(), line


# Counters ibqueryerrors reads from PortCountersExtended beyond what the server fills
# for a libumad2sim client: they read back as client memory (a defect of the PMA path
# shared by rdma-core 44 and 56, reported apart), so they are left out here.
_UNFILLED = "VL15Dropped,PortXmitWait,QP1Dropped"


def test_ibqueryerrors_checks_every_port_and_clears_the_errors(up, toolset, run):
    """ibqueryerrors reaches every node's PMA; with -k it clears the error counters it
    read (a PMA Set per port), so a second run finds no node over its thresholds."""
    fabric = up.cluster.fabric
    r = run("ibqueryerrors", "-s", _UNFILLED, "-k", check=False)
    assert f"## Summary: {len(fabric.nodes)} nodes checked" in r.stdout, r.stdout[-2000:]
    r = run("ibqueryerrors", "-s", _UNFILLED, check=False)
    assert r.returncode == 0, r.stdout[-2000:]
    assert f"## Summary: {len(fabric.nodes)} nodes checked, 0 bad nodes found" in r.stdout


@pytest.mark.parametrize(
    "spec, origin",
    [("lab", "sched-worker1"), (str(SPECS / "three-tier-hdr.yaml"), "node006:mlx5_1")],
    ids=["lab", "three-tier-hdr"],
)
def test_opensm_of_each_tool_set_brings_the_subnet_up(real_tools, toolset, spec, origin, tmp_path):
    """The tool set's own OpenSM (the root's is linked with rdma-core 56's libibumad)
    configures a fabric started without one: SUBNET UP, no error, and the tools then
    discover the model (LIDs aside: this OpenSM, unlike 'up --sm', gets no LID plan)."""
    with fabric_up(spec, tmp_path) as f:
        host, inner = toolset.workdir(tmp_path)
        log = f"opensm-{f.name}.log"
        r = f.run(
            origin, "opensm", "-o", "-e", "-f", f"{inner}/{log}", "-d", "0",
            tools=toolset, timeout=300, check=False,
        )  # fmt: skip
        text = (host / log).read_text(errors="replace")
        assert "SUBNET UP" in text, (r.returncode, text[-3000:])
        assert not [line for line in text.splitlines() if "ERR" in line], text[-3000:]
        real = f.run(origin, "ibnetdiscover", tools=toolset).stdout
    dump = ibnetdiscover.parse(real, "ibnetdiscover")
    assert dump.warnings == []
    assert dump.fabric.same_as(f.cluster.fabric, lids=False), "\n".join(
        diff_signatures(dump.fabric, f.cluster.fabric, lids=False)
    )
    assert all(sw.lid for sw in dump.fabric.switches())  # OpenSM gave every switch a LID
