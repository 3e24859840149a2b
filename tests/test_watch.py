"""The fabric's state as a watcher reads it (sim/live/watch.py): a Watcher that keeps
what it read and reads again only what changed gives, after every kind of change, what
a fresh reading of every port gives."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import served

from fabriclab.model.build import build
from fabriclab.sim.fabric import minhop
from fabriclab.sim.live import journal, watch
from fabriclab.sim.live.api import LiveFabric
from fabriclab.sim.live.clock import VirtualClock
from fabriclab.sim.live.traffic.engine import TrafficEngine
from fabriclab.spec.load import load_spec

LINK = "LAB-IBLEAF-01[5]"


@pytest.fixture
def live():
    cluster = build(load_spec("lab"))
    with served(cluster, serve=False) as srv:
        minhop.fill(srv.sim)
        clock = VirtualClock()
        yield LiveFabric(srv, cluster, clock, traffic=TrafficEngine(srv.sim, clock))


def same(w: watch.Watcher, live: LiveFabric) -> np.ndarray:
    kept = w.state(live.traffic, tuple(live.book.faults))
    fresh = watch.state(live.sim, live.traffic)
    assert kept.shape == fresh.shape and kept.dtype == np.uint64
    diff = np.argwhere(kept != fresh)
    assert not len(diff), [
        (watch.COLUMNS[c], int(kept[r, c]), int(fresh[r, c])) for r, c in diff[:5]
    ]
    return kept


def col(arr: np.ndarray, name: str) -> np.ndarray:
    return arr[:, watch.COLUMNS.index(name)]


def test_a_kept_reading_is_a_fresh_one_after_every_change(live):
    w = watch.Watcher(live.sim)
    first = same(w, live)
    assert not col(first, "PortXmitData").any()
    # traffic: counted by the engine, not yet in the ports' counters
    live.traffic_request("ring", ["sched-worker[1-2]"], {"rate": "1GB/s"})
    live.advance(1.0)
    moved = same(w, live)
    assert col(moved, "PortXmitData").sum() > 0
    # MADs that crossed a port, not yet counted
    port = live.sim.nodes[0].ports[1]
    port.mad_out += 3
    assert col(same(w, live), "PortXmitPkts").sum() > col(moved, "PortXmitPkts").sum()
    # a fault: state columns and what holds the port; a second fault on the same link
    live.fault("down", LINK)
    down = same(w, live)
    assert col(down, "held").max() == 1 and (col(down, "state") == 1).any()
    live.fault("flap", LINK, period="1s", count=2)
    assert col(same(w, live), "held").max() == 2  # held again: no PortInfo changed
    live.clear()
    minhop.activate(live.sim)
    same(w, live)
    # the extended view reset through the PMA, and counters brought back by a journal
    live.traffic_request("stop", [], {})
    for n in live.sim.nodes:
        for p in n.ports:
            if p is not None:
                p.flush().reset(0xFFFF, 0xFFFF, extended=True)
    assert not col(same(w, live), "PortXmitData").any()
    doc = {"0:1": [{"PortXmitData": 7}, {}, {}, {}, {}]}
    journal.restore_counters(live.sim, doc)
    assert col(same(w, live), "PortXmitData").sum() == 7
