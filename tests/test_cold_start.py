"""Power-on as hardware does, when asked (spec ``lids.power_on: cold``, ``fabriclab up
--cold``): end ports hold no LID and no SM LID until an SM assigns them; the real
OpenSM's first sweep assigns them and the real ibnetdiscover shows them."""

from __future__ import annotations

import re

import pytest
from fabric_server import fabric_up
from test_sma import LEAF, W1, field, smp

from fabriclab.ib.enums import PortState
from fabriclab.ib.mad.consts import Attr
from fabriclab.model.build import build
from fabriclab.sim.fabric.sma import Sma
from fabriclab.sim.fabric.state import SimFabric
from fabriclab.spec.load import load_spec, parse_spec_text

COLD = """\
name: cold
trays:
  - hosts: c[1-2]
    gpus: 0
    hcas: 1
fabric:
  fat_tree:
    tiers: 1
    rail_optimized: false
lids:
  power_on: cold
"""


def test_the_spec_asks_for_a_cold_start():
    assert build(parse_spec_text(COLD, "cold.yaml")).cold_start
    assert not build(load_spec("lab")).cold_start


def test_a_cold_fabric_has_no_lids_until_an_sm_sets_them():
    cluster = build(load_spec("lab"))
    sim = SimFabric(cluster.fabric, cold=True)
    sma = Sma()
    ca = sim.port_of(cluster.fabric.find(W1).ports[1])
    leaf0 = sim.node_of(cluster.fabric.find(LEAF)).ports[0]
    for port in (ca, leaf0):
        pi = smp(sma, port, Attr.PORT_INFO)[1]
        assert (field(pi, "Lid"), field(pi, "SMLid"), field(pi, "LMC")) == (0, 0, 0)
    assert field(smp(sma, ca, Attr.PORT_INFO)[1], "LinkState") == PortState.INIT
    assert all(p.lid == 0 for n in sim.nodes for p in n.ports if p is not None and p.is_endport)
    # the default: the plan's LIDs
    warm = SimFabric(cluster.fabric)
    assert warm.port_of(cluster.fabric.find(W1).ports[1]).lid == 100


def _lids(text: str) -> list[int]:
    """Every end port LID ibnetdiscover printed: switches' "lid N lmc" on their Switch
    line, CAs' "# lid N lmc" on their port lines."""
    return [int(x) for x in re.findall(r"\blid (\d+) lmc", text)]


@pytest.mark.realtools
def test_opensm_first_sweep_on_a_cold_fabric_assigns_lids(real_tools, tmp_path):
    with fabric_up("lab", tmp_path, extra=["--cold"]) as f:
        before = f.run("sched-worker1", "ibnetdiscover").stdout
        n_end = len(f.cluster.fabric.switches()) + len(f.cluster.fabric.cas())
        assert _lids(before) == [0] * n_end, before
        cache = tmp_path / "osm"
        cache.mkdir()
        log = cache / "opensm.log"
        f.run(
            "sched-worker1",
            *("opensm", "-o", "-f", str(log)),
            extra_env={"OSM_CACHE_DIR": str(cache), "OSM_TMP_DIR": str(cache)},
            timeout=300,
            check=False,
        )
        assert "SUBNET UP" in log.read_text(), log.read_text()[-3000:]
        after = f.run("sched-worker1", "ibnetdiscover").stdout
        lids = _lids(after)
        assert len(lids) == n_end and 0 not in lids and len(set(lids)) == n_end, after
        # the LIDs the SM gave are where LID-routed queries now go
        cas = re.findall(
            r'^Ca\s+\d+ "[^"]+"\s+# "([^"]+)"\n\[1\]\S*\s+"[^"]+"\[\d+\]\s+# lid (\d+)', after, re.M
        )
        assert len(cas) == len(f.cluster.fabric.cas()), after
        for desc, lid in cas:
            out = f.run("sched-worker1", "smpquery", "nodedesc", lid).stdout
            assert out.rstrip().endswith(desc), (desc, lid, out)
