"""Partition membership and enforcement in process (fabriclab.sim.fabric.partitions): the
P_Key matching rule, where on a path a packet with a foreign P_Key stops, and what the
port that stops it counts."""

from __future__ import annotations

import pytest

from fabriclab.ib.mad.layouts import PORT_INFO
from fabriclab.model.build import build
from fabriclab.sim.fabric import partitions
from fabriclab.sim.fabric.partitions import Drop, enforce, keys_match, share_partition
from fabriclab.sim.fabric.state import SimFabric
from fabriclab.spec.load import load_spec

LEAF = "MF0;LAB-IBLEAF-01:MQM9701/U1"


def _set(port, *keys: int) -> None:
    port.pkeys[:] = bytes(len(port.pkeys))
    for i, k in enumerate(keys):
        port.pkeys[2 * i : 2 * i + 2] = k.to_bytes(2, "big")


@pytest.fixture()
def lab():
    cluster = build(load_spec("lab"))
    sim = SimFabric(cluster.fabric)

    def ca(host: str, hca: int):
        return sim.port_of(cluster.fabric.find(f"{host} mlx5_{hca}").ports[1])

    return sim, ca


@pytest.mark.parametrize(
    ("a", "b", "ok"),
    [
        (0xFFFF, 0xFFFF, True),  # both full
        (0xFFFF, 0x7FFF, True),  # full and limited
        (0x7FFF, 0x7FFF, False),  # two limited members may not talk
        (0x8001, 0x8002, False),  # different partitions
        (0x8000, 0x8000, False),  # partition 0 is invalid
        (0x0000, 0xFFFF, False),
    ],
)
def test_keys_match(a, b, ok):
    assert keys_match(a, b) is ok and keys_match(b, a) is ok


def test_share_partition_two_tenants(lab):
    _sim, ca = lab
    a1, a2, b1 = ca("sched-worker1", 1), ca("sched-worker1", 2), ca("sched-worker2", 0)
    for p in (a1, a2):
        _set(p, 0x7FFF, 0x8001)
    _set(b1, 0x7FFF, 0x8002)
    sm = ca("sched-worker1", 0)
    _set(sm, 0xFFFF, 0x8001)
    assert share_partition(a1, a2) and share_partition(a2, a1)
    assert not share_partition(a1, b1) and not share_partition(b1, a1)
    assert share_partition(sm, b1)  # full member of the default partition
    assert partitions.admit(a1, a2) and not partitions.admit(a1, b1)
    # a limited member of a tenant partition reaches only its full members
    _set(a2, 0x7FFF, 0x0001)
    assert share_partition(a1, a2)
    _set(a1, 0x7FFF, 0x0001)
    assert not share_partition(a1, a2)
    # an empty table shares nothing
    _set(a1)
    assert not share_partition(a1, a2)


def _path(sim, src, dst):
    """src CA port, its leaf ingress, the leaf egress toward dst, dst CA port (lab: one
    leaf holds every tray)."""
    return [src, src.peer, dst.peer, dst]


def test_a_packet_across_tenants_stops_at_the_egress_port_facing_the_receiver(lab):
    sim, ca = lab
    a1, b1 = ca("sched-worker1", 1), ca("sched-worker2", 0)
    _set(a1, 0x7FFF, 0x8001)
    _set(b1, 0x7FFF, 0x8002)
    # OpenSM copies each CA's keys to the switch port facing it and enforces both ways
    _set(a1.peer, 0x7FFF, 0x8001)
    _set(b1.peer, 0x7FFF, 0x8002)
    path = _path(sim, a1, b1)
    pkey = partitions.carried_pkey(a1, b1)
    assert pkey == 0x8001  # its tenant's key: it shares nothing with b1
    drop = enforce(path, pkey)
    assert drop == Drop(b1.peer, "PortXmitConstraintErrors", None, 0x8001)
    partitions.count(drop, 3)
    assert b1.peer.flush().view()["PortXmitConstraintErrors"] == 3
    assert a1.peer.flush().view()["PortRcvConstraintErrors"] == 0
    # without outbound enforcement there, the receiving CA drops it: P_KeyViolations
    b1.peer.part_enf_out = 0
    drop = enforce(path, pkey)
    assert drop == Drop(b1, None, partitions.TRAP_BAD_PKEY, 0x8001)
    partitions.count(drop, 2)
    assert b1.pkey_violations == 2
    assert PORT_INFO.get(b1.port_info(), "PkeyViolations") == 2
    partitions.count(drop, 1 << 20)
    assert b1.pkey_violations == 0xFFFF  # 16 bits, stops there
    # inside a tenant it arrives
    a2 = ca("sched-worker1", 2)
    _set(a2, 0x7FFF, 0x8001)
    _set(a2.peer, 0x7FFF, 0x8001)
    assert enforce(_path(sim, a1, a2), partitions.carried_pkey(a1, a2)) is None


def test_a_packet_with_a_key_its_own_port_lacks_stops_at_the_ingress(lab):
    sim, ca = lab
    a1, a2 = ca("sched-worker1", 1), ca("sched-worker1", 2)
    _set(a1.peer, 0x7FFF, 0x8001)
    _set(a2.peer, 0x7FFF, 0x8003)
    _set(a2, 0x7FFF, 0x8003)
    drop = enforce(_path(sim, a1, a2), 0x8003)
    assert drop is not None and drop.port is a1.peer
    assert drop.counter == "PortRcvConstraintErrors"
    assert drop.trap is None  # the switch does not offer trap 259 (CapabilityMask bit 12)
    partitions.count(drop)
    assert a1.peer.flush().view()["PortRcvConstraintErrors"] == 1
    # PortRcvConstraintErrors is 8 bits wide in PortCounters: it stops at 255
    partitions.count(drop, 1000)
    assert a1.peer.flush().view()["PortRcvConstraintErrors"] == 255
    assert a1.peer.flush().view_ext()["PortRcvConstraintErrors"] == 1001
    # with inbound enforcement cleared (as OpenSM leaves inter-switch links) it passes
    a1.peer.part_enf_in = 0
    assert enforce(_path(sim, a1, a2), 0x8003) is None


def test_inter_switch_ports_hold_no_tenant_keys_and_do_not_enforce_once_cleared(lab):
    """A path across a spine: with enforcement cleared on the inter-switch ports (as
    OpenSM leaves them) their power-on tables do not stop tenant traffic."""
    sim, _ca = lab
    leaf = next(n for n in sim.nodes if n.fabric_node.desc == LEAF)
    up, down = leaf.ports[9], leaf.ports[9].peer
    for p in (up, down):
        p.part_enf_in = p.part_enf_out = 0
    src, dst = leaf.ports[1].peer, leaf.ports[5].peer
    for p in (src, dst, src.peer, dst.peer):
        _set(p, 0x7FFF, 0x8001)
    # a packet bounced off the spine: in and out of the leaf, in and out of the spine's
    # port, in and out of the leaf again
    path = [src, src.peer, up, down, down, up, dst.peer, dst]
    assert enforce(path, 0x8001) is None
    up.part_enf_in = 1  # enforcement left on: the spine's traffic dies there
    drop = enforce(path, 0x8001)
    assert drop is not None and drop.port is up and drop.counter == "PortRcvConstraintErrors"
