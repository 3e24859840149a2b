"""Link state changes in-process (fabriclab.sim.fabric.links): a port disabled takes its link
down at both ends and counts LinkDownedCounter, enabled again it trains to INIT, set
Down it retrains without counting; routes through it are forgotten and the switch
reports the change."""

from __future__ import annotations

import pytest

from fabriclab.ib.enums import PhysState, PortState
from fabriclab.model.build import build
from fabriclab.sim.fabric.links import Links
from fabriclab.sim.fabric.router import Router
from fabriclab.sim.fabric.state import SimFabric
from fabriclab.spec.load import load_spec

LEAF = "MF0;LAB-IBLEAF-01:MQM9701/U1"
W2 = "sched-worker2 mlx5_0"  # on leaf port 5


class NoTraps:
    """The traps the links would send, written down."""

    def __init__(self):
        self.sent = []

    def send(self, port, number):
        self.sent.append((port, number))


@pytest.fixture()
def lab():
    cluster = build(load_spec("lab"))
    sim = SimFabric(cluster.fabric)
    router, traps = Router(), NoTraps()

    def port(desc, num=None):
        node = sim.node_of(cluster.fabric.find(desc))
        return node.ports[num if num is not None else (0 if node.is_switch else 1)]

    return Links(router, traps), router, traps, port


def _downed(p) -> int:
    return p.flush().view()["LinkDownedCounter"]


def test_disable_and_enable(lab):
    links, router, traps, port = lab
    leaf5, w2 = port(LEAF, 5), port(W2)
    path = bytes([0, 5]) + bytes(62)
    assert router.dr_out(port(LEAF), path, 1)[0] is w2
    leaf5.node.sw.state_change = 0
    links.disable_port(leaf5)
    assert (leaf5.phys, leaf5.state) == (PhysState.DISABLED, PortState.DOWN)
    assert (w2.phys, w2.state) == (PhysState.POLLING, PortState.DOWN)
    assert _downed(leaf5) == _downed(w2) == 1
    assert leaf5.node.sw.state_change == 1
    assert traps.sent == [(leaf5, 128)]  # the switch reports; the CA does not
    assert router.dr_out(port(LEAF), path, 1)[0] is None  # the remembered route is gone
    links.enable_port(leaf5)
    assert (leaf5.phys, leaf5.state) == (w2.phys, w2.state) == (PhysState.LINKUP, PortState.INIT)
    assert _downed(leaf5) == _downed(w2) == 1
    assert router.dr_out(port(LEAF), path, 1)[0] is w2


def test_disabling_both_ends_counts_once_each(lab):
    links, _router, _traps, port = lab
    leaf5, w2 = port(LEAF, 5), port(W2)
    links.disable_port(leaf5)
    links.disable_port(w2)  # its link is already down: only its own port counts
    assert _downed(leaf5) == 1 and _downed(w2) == 2
    links.enable_port(leaf5)  # the far end is disabled: no link
    assert (leaf5.phys, leaf5.state) == (PhysState.POLLING, PortState.DOWN)
    links.enable_port(w2)
    assert (leaf5.phys, w2.phys) == (PhysState.LINKUP, PhysState.LINKUP)


def test_retrain_counts_nothing(lab):
    links, _router, traps, port = lab
    leaf5, w2 = port(LEAF, 5), port(W2)
    leaf5.state = w2.state = PortState.ACTIVE
    links.retrain_port(w2)
    assert leaf5.state == w2.state == PortState.INIT
    assert leaf5.phys == w2.phys == PhysState.LINKUP
    assert _downed(leaf5) == _downed(w2) == 0
    assert traps.sent == [(leaf5, 128)]
    links.retrain_port(port(LEAF, 40))  # no link: nothing to retrain
    assert len(traps.sent) == 1
