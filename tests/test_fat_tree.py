"""The fat-tree arithmetic (fabriclab.model.fat_tree.fat_tree_shape) and its error messages,
in process: every count worked out by hand for a quantum-2 (64 ports)."""

from __future__ import annotations

import pytest

from fabriclab.errors import SpecError
from fabriclab.ib import devices
from fabriclab.model.build import build
from fabriclab.model.fat_tree import fat_tree_shape
from fabriclab.spec.load import parse_spec_text
from fabriclab.spec.schema import FatTree

QUANTUM_2 = devices.switch_model("quantum-2")


def shape(trays: int, rails: int, **fat_tree):
    return fat_tree_shape(FatTree(**fat_tree), QUANTUM_2, trays, rails)


def test_two_tiers_rail_optimized():
    # 32 host ports per leaf (half the radix), 2 groups x 4 rails = 8 leaves; each leaf's
    # 32 uplinks over the fewest spines whose 64 ports take 8 leaves: 4 spines, 8 links each
    s = shape(64, 4)
    assert (s.tiers, s.trays_per_leaf, s.leaf_down, s.tray_groups, s.leaves, s.leaf_up) == (
        2,
        32,
        32,
        2,
        8,
        32,
    )
    assert (s.pods, s.leaves_per_pod, s.spines_per_pod, s.links_per_leaf_spine) == (1, 8, 4, 8)
    assert (s.cores_per_group, s.switches) == (0, 12)


def test_two_tiers_not_rail_optimized():
    # a tray takes 2 ports on its one leaf: 16 trays per leaf, 3 leaves, 2 spines of 48 ports
    s = shape(40, 2, rail_optimized=False)
    assert (
        s.tiers,
        s.trays_per_leaf,
        s.leaf_down,
        s.leaves,
        s.spines_per_pod,
        s.links_per_leaf_spine,
    ) == (2, 16, 32, 3, 2, 16)


def test_one_leaf_is_one_tier():
    s = shape(20, 1)
    assert (s.tiers, s.leaves, s.leaf_up, s.switches) == (1, 1, 0, 1)


def test_oversubscription_sets_host_ports_and_uplinks():
    # 64 * 2/3 = 42 host ports, ceil(42 / 2) = 21 uplinks
    s = shape(100, 1, oversubscription=2)
    assert (s.trays_per_leaf, s.leaf_down, s.leaf_up) == (42, 42, 21)


def test_three_tiers_of_the_benchmark_fabric():
    # gb200-su at 8,192 trays: 18 trays per leaf, 456 groups x 4 rails = 1,824 leaves, too
    # many for two tiers; pods of 32 leaves (whole rail sets in half a radix) make 57 pods
    # of 18 spines (18 uplinks, 1 link each, 32 down ports), and 32 down + 32 up ports per
    # spine go to 18 core groups of 32 cores (57 pods per core fit 64 ports)
    s = shape(8192, 4, hosts_per_leaf=18)
    assert (s.tiers, s.leaves, s.leaf_up, s.leaves_per_pod, s.pods) == (3, 1824, 18, 32, 57)
    assert (s.spines_per_pod, s.links_per_leaf_spine, s.spine_down, s.spine_up) == (18, 1, 32, 32)
    assert (s.cores_per_group, s.links_per_spine_core) == (32, 1)
    assert s.switches == 1824 + 57 * 18 + 18 * 32 == 3426


def test_the_builder_makes_the_shape():
    # 700 trays: 22 groups x 4 rails = 88 leaves in 3 pods of 32 spines; 3 pods x 16 links
    # fit a core's 64 ports, so 2 cores per group, 32 groups
    s = shape(700, 4)
    assert (s.tiers, s.leaves, s.pods, s.spines_per_pod, s.cores_per_group) == (3, 88, 3, 32, 2)
    cluster = build(
        parse_spec_text("trays: [{hosts: 'n[1-700]'}]\nfabric: {fat_tree: {}}\n", "t.yaml")
    )
    assert [(t.tier, t.switches) for t in cluster.tiers()] == [(1, 88), (2, 3 * 32), (3, 32 * 2)]
    assert len(cluster.fabric.switches()) == s.switches


BAD = [
    ("no HCAs", {"trays": 4, "rails": 0}, "trays", "the trays have no HCAs"),
    (
        "more HCAs than leaf ports",
        {"trays": 40, "rails": 2, "rail_optimized": False, "hosts_per_leaf": 40},
        "fabric.fat_tree.hosts_per_leaf",
        "more HCAs than leaf ports: 40 trays x 2 HCA ports = 80 host ports, but a quantum-2 leaf has 64",
    ),
    (
        "one tier, two leaves",
        {"trays": 40, "rails": 1, "tiers": 1},
        "fabric.fat_tree.tiers",
        "1 tier is a single switch, but these trays need 2 leaves",
    ),
    (
        "no uplinks",
        {"trays": 40, "rails": 1, "tiers": 2, "leaf_uplinks": 0},
        "fabric.fat_tree.leaf_uplinks",
        "a multi-tier fabric needs leaf uplinks",
    ),
    (
        "uplinks by default overflow",
        {"trays": 80, "rails": 1, "hosts_per_leaf": 40},
        "fabric.fat_tree.leaf_uplinks",
        "leaves need 40 host + 40 uplink ports, but the switch has 64 (set oversubscription or leaf_uplinks)",
    ),
    (
        "uplinks given overflow",
        {"trays": 80, "rails": 1, "hosts_per_leaf": 40, "leaf_uplinks": 30},
        "fabric.fat_tree.leaf_uplinks",
        "leaves need 40 host + 30 uplink ports, but the switch has 64",
    ),
    (
        "spines do not divide",
        {"trays": 64, "rails": 1, "hosts_per_leaf": 16, "spines": 3},
        "fabric.fat_tree.spines",
        "16 uplinks per switch do not divide evenly over 3 switches above",
    ),
    (
        "spines given too few",
        {"trays": 64, "rails": 4, "tiers": 2, "spines": 1},
        "fabric.fat_tree.spines",
        "1 switches above would each need 256 ports, more than 64",
    ),
    (
        "two tiers cannot fit",
        {"trays": 8192, "rails": 4, "tiers": 2, "hosts_per_leaf": 18},
        "fabric.fat_tree.spines",
        "1824 switches with 18 uplinks each cannot fit under switches of 64 ports; add a tier",
    ),
    (
        "spine uplinks leave too few ports",
        {"trays": 8192, "rails": 4, "hosts_per_leaf": 18, "spine_uplinks": 60},
        "fabric.fat_tree.spines",
        "32 switches with 18 uplinks each cannot fit under switches of 4 ports; add a tier",
    ),
    (
        "cores do not divide",
        {"trays": 8192, "rails": 4, "hosts_per_leaf": 18, "cores_per_group": 5},
        "fabric.fat_tree.cores_per_group",
        "32 uplinks per switch do not divide evenly over 5 switches above",
    ),
]


@pytest.mark.parametrize("case,args,where,what", BAD, ids=[b[0] for b in BAD])
def test_shape_errors_name_the_setting(case, args, where, what):
    with pytest.raises(SpecError) as e:
        shape(**args)
    assert [(p.where, p.what) for p in e.value.problems] == [(where, what)]
