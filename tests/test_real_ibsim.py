"""fabriclab's model against the real tools: Debian ibsim serves fabriclab's net file,
the real opensm brings the subnet up, the real ibnetdiscover discovers it.  With every
tool set the machine has (tests/toolsets.py): Debian 12's ibsim 0.10 stops at HDR (an NDR
link comes up SDR), Debian 13's ibsim 0.12 parses NDR, so there NDR rates compare exactly."""

from __future__ import annotations

import re

import pytest
import toolsets
from conftest import SPECS
from realtools import ibsim

from fabriclab.formats import ibnetdiscover, ibsim_net
from fabriclab.model.build import build
from fabriclab.model.cluster import find_port
from fabriclab.model.fabric import diff_signatures
from fabriclab.spec.load import load_spec

pytestmark = pytest.mark.realtools

CASES = [
    # (spec, tray to run from)
    ("lab", "sched-worker1"),
    ("gb200-su", "gb-r03-t07:mlx5_2"),
    (str(SPECS / "three-tier-hdr.yaml"), "node006:mlx5_1"),
    (str(SPECS / "quirks.yaml"), "q4:mlx4_0"),
]


def _without_timestamp(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.startswith("# Topology file:")]


@pytest.fixture(
    scope="module",
    params=[(c, t) for t in toolsets.names() for c in CASES],
    ids=lambda p: f"{p[0][0].rsplit('/', 1)[-1]}-{p[1]}",
)
def discovered(request, real_tools, tmp_path_factory):
    (spec_name, origin), tools_name = request.param
    tools = toolsets.get(tools_name)
    cluster = build(load_spec(spec_name))
    cluster.spec_arg = spec_name
    cluster.tools = tools
    work = tmp_path_factory.mktemp("ibsim")
    net = work / "fabric.net"
    net.write_text(ibsim_net.render(cluster.fabric))
    start, problem = find_port(cluster, origin)
    assert start is not None, problem
    lim = ibsim_net.limits(cluster.fabric)
    with ibsim(net, work, lim.args(), tools) as sim:
        sim.opensm_once(start.node.desc)
        default = sim.run(start.node.desc, "ibnetdiscover")
        ports = sim.run(start.node.desc, "ibnetdiscover", "-p")
        variants = {
            flag: sim.run(start.node.desc, "ibnetdiscover", flag).stdout
            for flag in ("-g", "-f", "-m")
        }
    assert default.returncode == 0, default.stderr
    assert ports.returncode == 0, ports.stderr
    return cluster, start, default.stdout, ports.stdout, variants


def test_real_ibnetdiscover_finds_the_model(discovered):
    """Nodes (GUIDs, types, descriptions, port counts, LIDs) and links (GUID:port <->
    GUID:port) equal the model.  Two things ibsim cannot express are left out: CA port
    GUIDs (ibsim makes them node+N) and link rates (ibsim 0.10 stops at HDR, 0.12 at
    NDR); with those applied to the model (``as_ibsim_shows`` of the set's ibsim)
    everything is equal, rates included."""
    cluster, start, text, _, _ = discovered
    dump = ibnetdiscover.parse(text, "real ibnetdiscover")
    assert dump.warnings == []
    model = cluster.fabric
    kw = {"rates": False, "ca_port_guids": False}
    assert dump.fabric.same_as(model, **kw), "\n".join(diff_signatures(dump.fabric, model, **kw))
    assert dump.from_guid == start.node.guid
    assert len(dump.fabric.nodes) == len(model.nodes)
    assert dump.fabric.link_count() == model.link_count()
    view = ibsim_net.as_ibsim_shows(build(load_spec(cluster.spec_arg)).fabric, cluster.tools.ibsim)
    assert dump.fabric.same_as(view), "\n".join(diff_signatures(dump.fabric, view))


def test_renderer_equals_real_ibnetdiscover_line_for_line(discovered):
    """The renderer, given the fabric as ibsim serves it, prints exactly what the real
    tool printed: same node order, port order, spacing; only the timestamp differs."""
    cluster, start, text, _, _ = discovered
    ibsim_net.as_ibsim_shows(cluster.fabric, cluster.tools.ibsim)
    ours = ibnetdiscover.render(cluster.fabric, start, rdma_core=cluster.tools.rdma_core)
    assert _without_timestamp(ours) == _without_timestamp(text)


def test_renderer_equals_real_ports_report(discovered):
    cluster, start, _, ports, _ = discovered
    ibsim_net.as_ibsim_shows(cluster.fabric, cluster.tools.ibsim)
    assert (
        ibnetdiscover.render_ports(cluster.fabric, start, rdma_core=cluster.tools.rdma_core)
        == ports
    )


def test_ports_report_parses_to_the_same_links(discovered):
    cluster, _start, _, ports, _ = discovered
    dump = ibnetdiscover.parse(ports, "real ibnetdiscover -p")
    assert dump.kind == "ports"
    model = cluster.fabric
    want = {
        frozenset(
            [
                (a.node.guid if a.node.is_switch else None, a.num, a.node.desc),
                (b.node.guid if b.node.is_switch else None, b.num, b.node.desc),
            ]
        )
        for a, b in model.links()
    }
    got = {
        frozenset(
            [
                (a.node.guid if a.node.is_switch else None, a.num, a.node.desc),
                (b.node.guid if b.node.is_switch else None, b.num, b.node.desc),
            ]
        )
        for a, b in dump.fabric.links()
    }
    assert got == want
    # every switch port is listed, connected or not
    for sw in model.switches():
        parsed = dump.fabric.by_guid[sw.guid]
        assert parsed.nports == sw.nports


@pytest.mark.parametrize("flag", ["-g", "-f", "-m"])
def test_real_variants_parse_to_the_same_fabric(discovered, flag):
    """Grouping (-g), full port fields (-f) and hop counts (-m) do not confuse the parser."""
    _cluster, _start, text, _, variants = discovered
    base = ibnetdiscover.parse(text, "default").fabric
    dump = ibnetdiscover.parse(variants[flag], flag)
    assert dump.warnings == []
    assert dump.fabric.same_as(base)


def test_max_hops_and_mad_count_match_the_real_tool(discovered):
    cluster, start, _, _, variants = discovered
    ours = ibnetdiscover.render(cluster.fabric, start, report_max_hops=True)
    want = [
        line
        for line in variants["-m"].splitlines()
        if line.startswith(("# Reported", "# Total MADs"))
    ]
    got = [line for line in ours.splitlines() if line.startswith(("# Reported", "# Total MADs"))]
    assert got == want and len(want) == 2


def test_ndr_links_come_up_at_ndr_from_ibsim_0_12(discovered):
    """What each ibsim makes of an NDR link in the net file: 0.12 parses NDR and serves
    it as NDR; 0.10 does not know the token and serves SDR."""
    cluster, _start, text, _, _ = discovered
    model = {p.speed.token for n in cluster.fabric.nodes for p in n.iter_ports() if p.peer}
    if "NDR" not in model:
        return  # an HDR or older fabric: both releases know every rate in it
    seen = set(re.findall(r" \d+x([A-Z0-9?]+)$", text, re.M))
    want = "NDR" if cluster.tools.ibsim >= (0, 12) else "SDR"
    assert want in seen, (str(cluster.tools), seen)
