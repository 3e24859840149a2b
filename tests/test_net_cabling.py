"""Ethernet miswiring in process: which ends a swap names, the cabling it builds, and
the lines that compare LLDP's cabling with the spec's (the real lldpd's in
test_networks_real)."""

from __future__ import annotations

import re

import pytest

from fabriclab.errors import InputError
from fabriclab.model import net_cabling
from fabriclab.model.build import build
from fabriclab.spec.load import load_spec


@pytest.fixture(scope="module")
def lab():
    return build(load_spec("lab"))


def test_ethernet_ends_are_told_from_infiniband_ports(lab):
    nets = lab.networks
    assert net_cabling.is_ethernet(nets, "LAB-FE-01[3]")
    assert net_cabling.is_ethernet(nets, "sched-worker1/enp1s0f0np0")
    assert not net_cabling.is_ethernet(nets, "sched-worker1/mlx5_0[1]")
    assert not net_cabling.is_ethernet(nets, "lab-leaf-1[1]")
    assert not net_cabling.is_ethernet(None, "LAB-FE-01[3]")


def test_a_swap_exchanges_far_ends_and_keeps_the_spec(lab):
    nets = lab.networks
    before = list(nets.links)
    built = net_cabling.swap(nets, "LAB-STOR-01[2]", "LAB-STOR-01[3]")
    assert nets.links == before  # the intended cabling is untouched
    assert len(built.links) == len(before)
    w1, w2 = ("sched-worker1", "enp1s0f1np1"), ("sched-worker2", "enp1s0f1np1")
    far = {p: q for a, b in built.links for p, q in ((a, b), (b, a))}
    assert far[("LAB-STOR-01", "swp2")] == w2 and far[("LAB-STOR-01", "swp3")] == w1
    lines = net_cabling.compare(nets, built.links)
    assert len(lines) == 2 and all(line.startswith("wrong cable LAB-STOR-01[") for line in lines)
    assert net_cabling.compare(nets, nets.links) == []
    # a cable moved to a free port: the old port's cable is missing, the new one wrong
    moved = net_cabling.swap(nets, "LAB-STOR-01[2]", "LAB-STOR-01[40]")
    assert net_cabling.compare(nets, moved.links) == [
        "wrong cable LAB-STOR-01[40] <-> sched-worker1/enp1s0f1np1 (LAB-STOR-01[40] is free "
        "in the spec; the spec cables sched-worker1/enp1s0f1np1 to LAB-STOR-01[2])"
    ]
    # one end seen from one side only still counts; nothing seen is a missing cable
    assert net_cabling.compare(nets, [(b, a) for a, b in nets.links[1:]]) == [
        "missing cable LAB-FE-01[1] <-> sched-controller/eno1 (no neighbour seen)"
    ]


@pytest.mark.parametrize(
    ("a", "b", "message"),
    [
        ("LAB-FE-01[1]", "LAB-FE-01[1]", "both ends of one cable"),
        ("LAB-FE-01[1]", "sched-controller/eno1", "both ends of one cable"),
        ("LAB-FE-01[40]", "LAB-FE-01[41]", "neither end is cabled"),
        ("LAB-FE-01[65]", "LAB-FE-01[1]", "LAB-FE-01 (NVIDIA SN5600) has no port 65"),
        ("sched-worker1/eth9", "LAB-FE-01[1]", "sched-worker1 has no interface 'eth9'"),
    ],
)
def test_a_bad_swap_is_one_line(lab, a, b, message):
    with pytest.raises(InputError, match=re.escape(message)):
        net_cabling.swap(lab.networks, a, b)


def test_swaps_of_both_kinds_in_one_up(lab):
    cluster = build(load_spec("lab"))
    net_cabling.swap_all(cluster, ["LAB-OOB-01[1],LAB-OOB-01[2]"], built=True)
    assert net_cabling.compare(lab.networks, cluster.networks.links)
    with pytest.raises(InputError, match="built only with --networks"):
        net_cabling.swap_all(cluster, ["LAB-OOB-01[1],LAB-OOB-01[2]"], built=False)
    with pytest.raises(InputError, match="give two ports"):
        net_cabling.swap_all(cluster, ["LAB-OOB-01[1]"], built=True)


def test_a_journal_naming_what_the_networks_lack_is_refused_before_anything(lab):
    from fabriclab.sim.lan.faults import NetFaults

    faults = NetFaults("nowhere", lab.networks, lambda *a: None)
    for doc, where in [
        ({"down": ["LAB-FE-01[9]"]}, "journal: net.down.0"),
        ({"down": ["sched-controller/eno1"]}, "journal: net.down.0"),  # not a switch port
        ({"rates": {"sched-worker9/eth0": 8000}}, "journal: net.rates"),
        (
            {"flaps": [{"target": "LAB-XX", "period": 2.0, "left": 1, "down": False, "next": 0}]},
            "journal: net.flaps.0.target",
        ),
    ]:
        with pytest.raises(InputError, match=re.escape(where)):
            faults.restore(doc, "journal")
    assert faults.state() == {"down": [], "rates": {}, "flaps": []}


def test_networks_beyond_the_memory_are_refused_in_one_line(lab):
    from fabriclab.sim.lan.build import MB_PER_NAMESPACE, check_room

    n = len(lab.networks.endpoints) + len(lab.networks.switches)
    check_room(lab.networks, available_mb=n * MB_PER_NAMESPACE * 2)
    with pytest.raises(InputError, match=r"--networks: 10 namespaces would take about 25 MB"):
        check_room(lab.networks, available_mb=n * MB_PER_NAMESPACE)
