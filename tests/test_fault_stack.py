"""Overlapping faults stack, every kind alike (in process): each is its own entry with
its own id, and what it does lasts until the last fault doing it lets go; the event log
says what still holds a target when a fault on it clears."""

from __future__ import annotations

import pytest
from helpers import served

from fabriclab.ib.mad.layouts import PORT_INFO
from fabriclab.model.build import build
from fabriclab.sim.live.api import LiveFabric
from fabriclab.sim.live.clock import VirtualClock
from fabriclab.spec.load import load_spec

LEAF, SPINE = "LAB-IBLEAF-01", "LAB-IBSPINE-01"
W2 = "sched-worker2/mlx5_0[1]"  # on the leaf's port 5
LINK5 = f"{LEAF}[5] -- {W2}"


@pytest.fixture
def live():
    cluster = build(load_spec("lab"))
    with served(cluster, serve=False) as srv:
        yield LiveFabric(srv, cluster, VirtualClock())


def _new(live, since: int) -> list[tuple[str, str]]:
    return [(e["name"], e["description"]) for e in live.events.events[since:]]


def _up_links(live, target: str) -> list[bool]:
    return [p.up for p, _ in live.resolve(target).links]


def test_a_switch_down_twice_comes_back_with_the_last(live):
    """The issue's reproducer: a second down is its own fault; clearing the first leaves
    the switch down and says so; clearing the second brings it back."""
    assert live.fault("down", SPINE)["id"] == 1
    assert live.fault("down", SPINE)["id"] == 2
    assert [f["id"] for f in live.faults()] == [1, 2]
    assert live.events.events[-1]["description"].endswith("already held down by fault 1)")
    node = live.resolve(SPINE).ports[0].node
    n = len(live.events.events)
    live.clear(1)
    assert not any(_up_links(live, SPINE))
    assert all(live.drops[p](0x11) for p in node.ports if p is not None)  # answers nothing
    assert _new(live, n) == [
        (
            "Still held by another fault",
            f"Switch {SPINE} still down: held by fault 2 (fault 1 cleared)",
        )
    ]
    n = len(live.events.events)
    live.clear(2)
    assert all(_up_links(live, SPINE)) and not live.drops
    names = [name for name, _ in _new(live, n)]
    assert names[0] == "Switch is up" and names[1:] == ["Link is up"] * (len(names) - 1)


def test_a_switch_up_names_the_links_still_held(live):
    live.fault("down", f"{SPINE}[1]")
    live.fault("down", SPINE)
    n = len(live.events.events)
    live.clear(2)
    ev = live.events.events[n]
    assert ev["name"] == "Switch is up"
    assert ev["description"].startswith(f"Switch {SPINE} is up; still down: {SPINE}[1] -- ")
    assert ev["description"].endswith("(fault 1)")
    assert _up_links(live, SPINE).count(False) == 1
    live.clear(1)
    assert all(_up_links(live, SPINE))


def test_a_link_down_twice_and_a_tray_over_it(live):
    live.fault("down", f"{LEAF}[5]")
    live.fault("down", W2)  # the other end names the same link
    live.fault("down", "sched-worker2")
    p = live.resolve(W2).ports[0]
    assert _new(live, 1)[0] == (
        "Still held by another fault",
        f"Link {W2} -- {LEAF}[5]: fault 2 holds it down too (already held down by fault 1)",
    )
    for i, holders in ((1, "faults 2, 3"), (3, "fault 2")):
        n = len(live.events.events)
        live.clear(i)
        assert not p.up
        if i == 1:
            assert _new(live, n) == [
                (
                    "Still held by another fault",
                    f"Link {LINK5} still down: held by {holders} (fault 1 cleared)",
                )
            ]
    live.clear(2)
    assert p.up and _new(live, len(live.events.events) - 1) == [
        ("Link is up", f"Link is up: {W2} -- {LEAF}[5]")
    ]


def test_a_flap_on_a_link_held_down_stays_down(live):
    live.fault("down", f"{LEAF}[6]")
    live.fault("flap", f"{LEAF}[6]", period=2, count=1)
    p = live.resolve(f"{LEAF}[6]").ports[0]
    live.advance(1)  # the flap's up half: the down fault still holds it
    assert not p.up
    assert live.events.events[-1]["description"].endswith(
        "stays down: held by fault 1 (flap 1 of 1)"
    )
    live.clear(1)
    assert p.up


def test_degrades_stack_narrowest_and_slowest_apply(live):
    p = live.resolve(f"{LEAF}[5]").ports[0]

    def active() -> tuple[int, int]:
        pi = PORT_INFO.unpack(p.port_info())
        return pi["LinkWidthActive"], pi["LinkSpeedExtActive"]

    live.fault("degrade", f"{LEAF}[5]", width="2x")  # 1
    live.fault("degrade", W2, width="1x")  # 2: narrower, applies
    live.fault("degrade", f"{LEAF}[5]", speed="HDR")  # 3: slower as well
    live.fault("degrade", f"{LEAF}[5]", width="2x")  # 4: no narrower than 1x: stays
    assert active() == (1, 4)  # 1x (LinkWidthActive bit 0), HDR (LinkSpeedExtActive 4)
    assert _new(live, 3)[-1] == (
        "Still held by another fault",
        f"Link {LINK5} stays at 1x HDR: held there by faults 1, 2, 3 (fault 4 added)",
    )
    live.clear(2)  # back to the narrowest left, 2x
    assert active() == (16, 4)
    live.clear(1)
    assert active() == (16, 4)  # fault 4 still asks for 2x
    live.clear(3)
    assert active() == (16, 8)  # NDR again, 2x still
    live.clear(4)
    assert active() == (2, 8)
    assert live.events.events[-1]["name"] == "Link width and speed restored"


def test_errors_the_latest_applies(live):
    # 4x NDR: 4.25e11 bits/s each way, at 1e-10 42.5 symbol errors a second, at 1e-9 425
    p = live.resolve(f"{LEAF}[5]").ports[0]
    live.fault("errors", f"{LEAF}[5]", ber=1e-10, down_after=255)
    live.advance(2)
    assert p.counters.raw["SymbolErrorCounter"] == 85
    live.fault("errors", W2, ber=1e-9, down_after=255)
    assert "in place of fault 1's 1e-10 while it lasts" in live.events.events[-1]["description"]
    live.advance(1)
    assert p.counters.raw["SymbolErrorCounter"] == 85 + 425
    live.clear(2)
    assert live.events.events[-1]["description"] == (
        f"Bit-error rate on link {W2} -- {LEAF}[5] back to 1e-10 (fault 1; fault 2 cleared)"
    )
    live.advance(2)  # fault 1 goes on from where it was: 85 + 85, its fraction kept
    assert p.counters.raw["SymbolErrorCounter"] == 85 + 425 + 85
    live.clear(1)
    assert live.events.events[-1]["name"] == "BER back to normal"


def test_drops_the_latest_applies(live):
    port0 = live.resolve(f"{LEAF}[0]", "drop").ports[0]
    live.fault("drop", LEAF, rate=100)
    live.fault("drop", f"{LEAF}[0]", rate=50, seed=7)
    lost = sum(live.drops[port0](0x15) for _ in range(1000))
    assert 400 < lost < 600
    live.clear(2)
    assert all(live.drops[port0](0x15) for _ in range(100))  # fault 1's 100 % again
    live.clear(1)
    assert port0 not in live.drops
    live.fault("drop", LEAF, rate=10)
    live.fault("drop", f"{LEAF}[0]", rate=20)
    live.clear(3)
    assert live.events.events[-1]["description"] == (
        f"{LEAF} still loses MADs: fault 4 (fault 3 cleared)"
    )


def test_nvlink_faults_stack_per_gpu(live):
    cluster = live.resolver.cluster
    gpus = cluster.tray("sched-worker2").gpus
    live.fault("nvlink", "sched-worker2", gpus="0,1")
    live.fault("nvlink", "sched-worker2", gpus="1,2")
    live.clear(1)
    assert [g.nvlink_fault for g in gpus[:4]] == [False, True, True, False]
    assert live.events.events[-1]["description"] == (
        "NVLink fault on sched-worker2 cleared: GPU 0 back; still out: GPU 1 (fault 2)"
    )
    live.clear(2)
    assert not any(g.nvlink_fault for g in gpus)


def test_stacked_faults_survive_the_journal(live):
    live.fault("down", SPINE)
    live.fault("down", SPINE)
    live.fault("degrade", f"{LEAF}[5]", width="2x")
    live.fault("degrade", f"{LEAF}[5]", width="1x")
    doc = live.snapshot()
    cluster = live.resolver.cluster
    with served(cluster, serve=False) as srv2:
        again = LiveFabric(srv2, cluster, VirtualClock(doc["clock"]))
        again.restore(doc)
        assert again.faults() == live.faults()
        again.clear(1)
        assert not any(_up_links(again, SPINE))
        again.clear(4)
        p = again.resolve(f"{LEAF}[5]").ports[0]
        assert PORT_INFO.unpack(p.port_info())["LinkWidthActive"] == 16
