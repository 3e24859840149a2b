"""fabriclab's model against the real tools: Debian ibsim serves fabriclab's net file,
the real opensm brings the subnet up, the real ibnetdiscover discovers it."""

from __future__ import annotations

import pytest

from conftest import SPECS
from fabriclab.formats import ibnetdiscover, ibsim_net
from fabriclab.model.build import build
from fabriclab.model.cluster import find_port
from fabriclab.model.fabric import diff_signatures
from fabriclab.spec.load import load_spec
from realtools import ibsim

pytestmark = pytest.mark.realtools

CASES = [
    # (spec, tray to run from)
    ("lab", "sched-worker1"),
    ("gb200-su", "gb-r03-t07:mlx5_2"),
    (str(SPECS / "three-tier-hdr.yaml"), "node006:mlx5_1"),
]


def _without_timestamp(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.startswith("# Topology file:")]


@pytest.fixture(scope="module", params=CASES, ids=lambda c: c[0].rsplit("/", 1)[-1])
def discovered(request, real_tools, tmp_path_factory):
    spec_name, origin = request.param
    cluster = build(load_spec(spec_name))
    work = tmp_path_factory.mktemp("ibsim")
    net = work / "fabric.net"
    net.write_text(ibsim_net.render(cluster.fabric))
    start, problem = find_port(cluster, origin)
    assert start is not None, problem
    lim = ibsim_net.limits(cluster.fabric)
    with ibsim(net, work, lim.args()) as sim:
        sim.opensm_once(start.node.desc)
        default = sim.run(start.node.desc, "ibnetdiscover")
        ports = sim.run(start.node.desc, "ibnetdiscover", "-p")
    assert default.returncode == 0, default.stderr
    assert ports.returncode == 0, ports.stderr
    return cluster, start, default.stdout, ports.stdout


def test_real_ibnetdiscover_finds_the_model(discovered):
    """Nodes (GUIDs, types, descriptions, port counts, LIDs) and links (GUID:port <->
    GUID:port) equal the model.  Two things ibsim cannot express are left out: CA port
    GUIDs (ibsim makes them node+N) and NDR rates (ibsim 0.10 stops at HDR)."""
    cluster, start, text, _ = discovered
    dump = ibnetdiscover.parse(text, "real ibnetdiscover")
    assert dump.warnings == []
    model = cluster.fabric
    exact_rates = all(a.speed.token in ibsim_net.KNOWN_SPEEDS[(0, 10)] for a, _ in model.links())
    kw = dict(rates=exact_rates, ca_port_guids=False)
    assert dump.fabric.same_as(model, **kw), "\n".join(diff_signatures(dump.fabric, model, **kw))
    assert dump.from_guid == start.node.guid
    assert len(dump.fabric.nodes) == len(model.nodes)
    assert dump.fabric.link_count() == model.link_count()


def test_renderer_equals_real_ibnetdiscover_line_for_line(discovered):
    """The renderer, given the fabric as ibsim serves it, prints exactly what the real
    tool printed: same node order, port order, spacing; only the timestamp differs."""
    cluster, start, text, _ = discovered
    ibsim_net.as_ibsim_shows(cluster.fabric)
    ours = ibnetdiscover.render(cluster.fabric, start)
    assert _without_timestamp(ours) == _without_timestamp(text)


def test_renderer_equals_real_ports_report(discovered):
    cluster, start, _, ports = discovered
    ibsim_net.as_ibsim_shows(cluster.fabric)
    assert ibnetdiscover.render_ports(cluster.fabric, start) == ports


def test_ports_report_parses_to_the_same_links(discovered):
    cluster, start, _, ports = discovered
    dump = ibnetdiscover.parse(ports, "real ibnetdiscover -p")
    assert dump.kind == "ports"
    model = cluster.fabric
    want = {frozenset([(a.node.guid if a.node.is_switch else None, a.num, a.node.desc),
                       (b.node.guid if b.node.is_switch else None, b.num, b.node.desc)])
            for a, b in model.links()}
    got = {frozenset([(a.node.guid if a.node.is_switch else None, a.num, a.node.desc),
                      (b.node.guid if b.node.is_switch else None, b.num, b.node.desc)])
           for a, b in dump.fabric.links()}
    assert got == want
    # every switch port is listed, connected or not
    for sw in model.switches():
        parsed = dump.fabric.by_guid[sw.guid]
        assert parsed.nports == sw.nports
