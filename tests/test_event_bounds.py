"""The live fabric kept within bounds, in process: a flap storm on the virtual clock is
carried out in runs (one event per link, counted), flap periods wall time cannot honour
are refused, a loop that falls behind coalesces what is due and says so, bursts of like
events are coalesced with a counter, and the log file rotates and is read a line at a
time (through rotations when followed)."""

from __future__ import annotations

import time

import pytest
from helpers import served

from fabriclab import eventlog
from fabriclab.errors import InputError
from fabriclab.model.build import build
from fabriclab.sim.live import api, events
from fabriclab.sim.live.clock import VirtualClock
from fabriclab.sim.live.events_limit import BURST
from fabriclab.sim.live.events_memory import MemoryLog
from fabriclab.spec.load import load_spec

LEAF = "LAB-IBLEAF-01"
LINKS = [f"{LEAF}[{i}]" for i in range(1, 13)]  # every cabled port of the leaf


class SteppedClock:
    """Wall time that moves only when the test says (``virtual`` False)."""

    virtual = False

    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t


@pytest.fixture
def lab():
    cluster = build(load_spec("lab"))
    with served(cluster, serve=False) as srv:
        yield srv, cluster


def test_a_flap_storm_on_the_virtual_clock_is_coalesced_per_link(lab):
    srv, cluster = lab
    live = api.LiveFabric(srv, cluster, VirtualClock())
    for link in LINKS:
        live.fault("flap", link, period=0.001, count=100000)
    t0 = time.monotonic()
    live.advance(10)  # 20,000 changes a link: 240,000 in all
    took = time.monotonic() - t0
    assert took < 5, f"clock advance 10 took {took:.1f} s"
    evs = live.events.events
    assert len(evs) < 200, f"{len(evs)} events"
    runs = [e for e in evs if e["name"] == "Link flapping"]
    assert {e["object_name"].split(" -- ")[0] for e in runs} == set(LINKS)
    assert sum(e["counter"] for e in runs) == 12 * 10000
    run = runs[0]
    assert "Link flapped 10000 times" in run["description"], run
    assert (
        "(flaps 1 to 10000 of 100000, 20000 changes in 10 s coalesced; down now)"
        in (run["description"])
    )
    # each link is where the flaps leave it (down again at t=10), every down counted
    for f in live.faults():
        pr = f["progress"]
        assert (pr["flaps"], pr["down"]) == (10000, True)
        assert pr["next"] == pytest.approx(10.0005)
    p = live.resolve(LINKS[0]).ports[0]
    assert not p.up
    assert p.counters.raw["LinkDownedCounter"] == 10001  # t=0's down, and 10,000 more
    assert p.peer.counters.raw["LinkDownedCounter"] == 10001
    # the flap runs on, change by change, when few are due
    live.advance(0.0005)
    assert live.faults()[0]["progress"]["down"] is False and p.up


def test_a_short_run_stays_change_by_change(lab):
    srv, cluster = lab
    live = api.LiveFabric(srv, cluster, VirtualClock())
    live.fault("flap", LINKS[4], period=2, count=5)
    live.advance(30)
    names = [e["name"] for e in live.events.events]
    assert names == ["Link went down", "Link is up"] * 5


def test_wall_time_refuses_a_flap_period_it_cannot_honour(lab):
    srv, cluster = lab
    live = api.LiveFabric(srv, cluster, SteppedClock())
    with pytest.raises(InputError) as e:
        live.fault("flap", LINKS[0], period=0.002, count=10)
    assert str(e.value.problems[0]) == (
        "--period: 0.002 s is shorter than the 0.1 s a wall clock can honour (the server "
        "loop's tick); a virtual clock (up --virtual-clock) takes down to 0.001 s"
    )
    with pytest.raises(InputError, match=r"0\.05 s is shorter than the 0\.1 s"):
        live.scenario(f"- at: 1s\n  do: flap {LINKS[0]}\n  period: 50ms\n", "s.yaml")
    assert live.faults() == [] and live.scenarios == []
    live.fault("flap", LINKS[0], period=0.1, count=10)  # the bound itself is taken


def test_a_loop_that_falls_behind_coalesces_and_says_so(lab, monkeypatch):
    srv, cluster = lab
    clock = SteppedClock()
    live = api.LiveFabric(srv, cluster, clock)
    for link in LINKS[:8]:
        live.fault("flap", link, period=0.1, count=1000)
    monkeypatch.setattr(api, "TICK_BUDGET", 0.0)  # every wake-up is over budget
    clock.t = 2.0  # 40 changes a link due: not a long run, but the loop has no time
    n = len(live.events.events)
    live.catch_up()
    new = live.events.events[n:]
    behind = [e for e in new if e["name"] == "Fabric clock fell behind"]
    assert len(behind) == 1, [e["name"] for e in new]
    assert behind[0]["counter"] == 8 * 40  # from the first due, at t=0.05, to t=2
    assert "fell 1.950 s behind the clock: 320 flap changes" in behind[0]["description"]
    assert len(new) <= 8 + 2
    for f in live.faults():
        assert f["progress"]["flaps"] == 20 and f["progress"]["next"] > 2.0


def test_a_burst_of_like_events_is_coalesced_with_a_counter():
    clock = VirtualClock()
    log = MemoryLog(clock)
    for i in range(100):
        log.emit(events.LINK_DOWN, "L", f"Link went down: L ({i})")
    log.emit(events.LINK_UP, "L", "Link is up: L")  # another kind: its own window
    assert len(log.events) == BURST + 1
    clock.advance(0.5)
    log.flush()
    assert len(log.events) == BURST + 1  # the window is not over
    clock.advance(0.6)
    log.flush()
    last = log.events[-1]
    assert last["counter"] == 100 - BURST and last["sim_time"] == 1.1
    assert last["description"].startswith("Link went down: L (99) [84 events like this")
    assert log.events[0]["counter"] == "N/A"
    log.emit(events.LINK_DOWN, "L", "again")  # a new window
    assert log.events[-1]["description"] == "again"


def test_the_log_rotates_and_is_read_a_line_at_a_time(tmp_path):
    clock = VirtualClock()
    path = events.events_path(tmp_path, "f")
    log = events.EventLog(path, clock, max_bytes=4096, keep=3)
    for i in range(60):
        clock.advance(1.0)  # a window each: nothing coalesced
        log.emit(events.LINK_DOWN, "L", f"Link went down: L ({i})")
    log.close()
    files = eventlog.log_files(path)
    assert [p.name for p in files] == [
        "f.events.jsonl.3",
        "f.events.jsonl.2",
        "f.events.jsonl.1",
        "f.events.jsonl",
    ]
    assert all(p.stat().st_size <= 4096 for p in files)
    ids = [e["id"] for e in eventlog.stream(path)]
    assert ids == list(range(ids[0], 61)) and ids[0] > 1  # the oldest rotated away
    # a resumed log numbers on from the last id, found at the end of the file
    again = events.EventLog(path, clock, max_bytes=4096)
    assert again.next_id == 61
    again.close()
    eventlog.remove(path)
    assert eventlog.log_files(path) == []


def test_follow_reads_on_through_a_rotation(tmp_path):
    clock = VirtualClock()
    path = events.events_path(tmp_path, "f")
    log = events.EventLog(path, clock, max_bytes=2048, keep=3)
    log.emit(events.LINK_DOWN, "L", "first")
    seen = eventlog.follow(path, 0, poll=0.01)
    assert next(seen)["id"] == 1
    for i in range(12):  # two rotations, or three: none rotated away
        clock.advance(1.0)
        log.emit(events.LINK_DOWN, "L", f"n{i}")
    assert len(eventlog.log_files(path)) >= 3
    assert [next(seen)["id"] for _ in range(12)] == list(range(2, 14))
    log.close()
