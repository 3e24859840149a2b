"""The LID plan (fabriclab.model.lid_plan), in process: the unicast budget, where CA LIDs
start, the order LIDs are given in, and what happens at the top of the unicast range."""

from __future__ import annotations

import pytest

from fabriclab.errors import SpecError
from fabriclab.ib.enums import NodeType
from fabriclab.model.cluster import Tray
from fabriclab.model.fabric import Fabric, Node
from fabriclab.model.lid_plan import assign_lids, check_lid_budget, default_ca_base
from fabriclab.spec.schema import LidPlan


def problems(e: pytest.ExceptionInfo) -> list[tuple[str, str]]:
    return [(p.where, p.what) for p in e.value.problems]


def test_budget_is_the_unicast_lids():
    check_lid_budget(49_000, 151, "trays")  # 49,151 LIDs: exactly the unicast range
    with pytest.raises(SpecError) as e:
        check_lid_budget(49_000, 150, "fabric.fat_tree", extra_cas=2)
    assert problems(e) == [
        (
            "fabric.fat_tree",
            "49002 CA ports and 150 switches need 49152 LIDs, one "
            "each; a subnet has 49151 unicast LIDs (0x0001-0xBFFF, IBA 4.1.3)",
        )
    ]
    with pytest.raises(SpecError) as e:
        check_lid_budget(49_152, 0, "trays")
    assert problems(e) == [
        (
            "trays",
            "49152 CA ports need 49152 LIDs, one each; a subnet has 49151 "
            "unicast LIDs (0x0001-0xBFFF, IBA 4.1.3)",
        )
    ]


@pytest.mark.parametrize(
    "switch_base,switches,base",
    [(1, 10, 100), (1, 99, 100), (1, 100, 200), (95, 10, 200), (49_100, 40, 49_200)],
)
def test_default_ca_base(switch_base, switches, base):
    assert default_ca_base(switch_base, switches) == base


def _fabric():
    """Switches leaf1 (tier 1), spine (tier 2), leaf2 (tier 1, LID 2 given); a CA ``storage``
    made before the trays' HCAs; trays t1 and t2 with one HCA each, t2's dual-port HCA with
    LIDs 100-103 given on port 1 (LMC 2)."""
    f = Fabric()
    leaf1 = f.add(Node(NodeType.SWITCH, 0x10, 8, "leaf1", tier=1))
    spine = f.add(Node(NodeType.SWITCH, 0x20, 8, "spine", tier=2))
    leaf2 = f.add(Node(NodeType.SWITCH, 0x30, 8, "leaf2", tier=1))
    leaf2.lid = 2
    storage = f.add(Node(NodeType.CA, 0x40, 1, "storage"))
    trays = [Tray("t1"), Tray("t2")]
    h1 = f.add(Node(NodeType.CA, 0x50, 1, "t1 mlx5_0"))
    h2 = f.add(Node(NodeType.CA, 0x60, 2, "t2 mlx5_0"))
    h2.port(1).lid, h2.port(1).lmc = 100, 2
    trays[0].hcas.append(h1)
    trays[1].hcas.append(h2)
    return (
        f,
        trays,
        {"leaf1": leaf1, "spine": spine, "leaf2": leaf2, "storage": storage, "h1": h1, "h2": h2},
    )


def test_switches_top_tier_first_then_cas_in_tray_order():
    f, trays, n = _fabric()
    assign_lids(f, LidPlan(), trays)
    # switches from 1: the spine first, then leaf1 (LID 2 is leaf2's); CAs from 100: the
    # trays' HCAs first (100-103 taken by h2 port 1), then the storage CA
    assert [n[k].lid for k in ("spine", "leaf1", "leaf2")] == [1, 3, 2]
    assert [(p.lid, p.lmc) for p in n["h2"].iter_ports()] == [(100, 2), (105, 0)]
    assert (n["h1"].port(1).lid, n["storage"].port(1).lid) == (104, 106)


def test_plan_bases():
    f, trays, n = _fabric()
    assign_lids(f, LidPlan(switch_base=50, ca_base=7), trays)
    assert [n[k].lid for k in ("spine", "leaf1", "leaf2")] == [50, 51, 2]
    assert [n["h1"].port(1).lid, n["h2"].port(2).lid, n["storage"].port(1).lid] == [7, 8, 9]


def test_default_ca_base_past_the_range_wraps_below_it():
    # switches at 49149-49150 put the default CA base (49200) past the last unicast LID:
    # the CA ports take the free LIDs from 1 (the fabric was counted to fit)
    f, trays, n = _fabric()
    assign_lids(f, LidPlan(switch_base=49_149), trays)
    assert [n[k].lid for k in ("spine", "leaf1")] == [49_149, 49_150]
    assert [n["h1"].port(1).lid, n["h2"].port(2).lid, n["storage"].port(1).lid] == [1, 3, 4]


def test_given_ca_base_does_not_wrap():
    f, trays, _ = _fabric()
    with pytest.raises(SpecError) as e:
        assign_lids(f, LidPlan(ca_base=49_150), trays)
    assert problems(e) == [
        ("lids", "from LID 49150, the CA ports run past the last unicast LID 49151 (0xBFFF)")
    ]


def test_switches_past_the_range():
    f, trays, _ = _fabric()
    with pytest.raises(SpecError) as e:
        assign_lids(f, LidPlan(switch_base=49_151), trays)
    assert problems(e) == [
        (
            "lids.switch_base",
            "from LID 49151, the switches run past the last unicast LID 49151 (0xBFFF)",
        )
    ]
