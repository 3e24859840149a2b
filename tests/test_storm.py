"""A fault storm: links flapping through the admin socket while the real ibnetdiscover
scans; every scan completes and the server answers every MAD it receives (a MAD routed
into a link that is down comes back as a timeout, as umad2sim reports it, never lost).
And the journal written after each fault costs the ports whose counters moved, not the
whole fabric (the cause of the server stalling under a storm on a large fabric)."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import yaml
from fabric_server import fabric_up
from helpers import fat_tree_64, wait_for

from fabriclab.model.build import build
from fabriclab.sim.live import journal
from fabriclab.sim.live.api import LiveFabric
from fabriclab.sim.live.clock import WallClock
from fabriclab.sim.live.traffic.engine import TrafficEngine
from fabriclab.sim.run import admin
from fabriclab.sim.wire.server import FabricServer
from fabriclab.spec.load import load_spec

SPEC = fat_tree_64("storm-64", "st[01-16]")  # 64 HCAs, 4 leaves, 4 spines, 96 links
_NODE = re.compile(r"^(Switch|Ca)\s+\d+\s", re.M)
_CLOSING = re.compile(
    r"(\d+) MADs, (\d+) answered, (\d+) forwarded, (\d+) timed out, (\d+) undeliverable, "
    r"(\d+) malformed, (\d+) not sent"
)


def _link_names(cluster) -> list[str]:
    out = []
    for a, b in cluster.fabric.links():
        end = b if a.node.is_switch and not b.node.is_switch else a
        out.append(f"{end.node.name}[{end.num}]")
    return out


def test_scans_complete_and_every_mad_is_answered_under_a_storm(tmp_path: Path):
    spec = tmp_path / "storm-64.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    cluster = build(load_spec(str(spec)))
    want = len(cluster.fabric.cas()) + len(cluster.fabric.switches())
    # 96 links, less the scanning tray's own: a scan cannot start from a port that is
    # down (rdma-core 56 picks only an active port; 44 did not look); each flaps once,
    # then the first few again, 100 flaps in all
    links = [n for n in _link_names(cluster) if not n.startswith("st01/")]
    assert len(links) == 92
    targets = links + links[:8]
    with fabric_up(str(spec), tmp_path) as f:
        sock = admin.admin_path(Path(f.env["FABRICLAB_STATE_DIR"]), f.name)
        done: list[str] = []
        errors: list[BaseException] = []

        def storm() -> None:
            try:
                for t in targets:
                    for kind in ("down", "up"):
                        admin.call(sock, {"op": "fault", "kind": kind, "target": t}, timeout=30)
                    done.append(t)
            except BaseException as e:
                errors.append(e)

        th = threading.Thread(target=storm)
        th.start()
        scans = []
        while th.is_alive() or not scans:
            scans.append(f.run("st01", "ibnetdiscover", check=False, timeout=120))
        th.join()
        assert not errors, errors
        assert len(done) == 100
        for r in scans:
            assert r.returncode == 0, r.stderr[-1000:]
            assert 0 < len(_NODE.findall(r.stdout)) <= want
        assert admin.call(sock, {"op": "faults"}) == []  # every link came back
        quiet = f.run("st01", "ibnetdiscover")
        assert len(_NODE.findall(quiet.stdout)) == want
        log = Path(f.instance().log)
    # the closing line, written when the fabric goes down
    wait_for(
        lambda: _CLOSING.search(log.read_text(errors="replace")),
        30,
        lambda: f"the server's closing line: {log.read_text(errors='replace')[-2000:]}",
    )
    m = _CLOSING.findall(log.read_text(errors="replace"))
    mads, answered, forwarded, timed_out, undeliverable, malformed, unsent = map(int, m[-1])
    assert mads > 0 and (undeliverable, malformed, unsent, forwarded) == (0, 0, 0, 0)
    assert mads == answered + timed_out


def test_the_journal_after_each_fault_carries_only_what_moved(tmp_path: Path):
    """A save after a fault encodes only the ports whose counters moved, and what it
    keeps is what a full walk of the counters gives."""
    spec = tmp_path / "storm-64.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    cluster = build(load_spec(str(spec)))
    srv = FabricServer(cluster.fabric, f"flstormj{id(tmp_path) & 0xFFFFFF}")
    clock = WallClock(0.0)
    eng = TrafficEngine(srv.sim, clock)
    live = LiveFabric(srv, cluster, clock, state=tmp_path, name="j", traffic=eng)
    ledger = live.ledger
    ports = [p for n in srv.sim.nodes for p in n.ports if p is not None]
    live.save(whole=True)
    assert not any(p.counters.moved for p in ports) and not ledger.dirty
    target = _link_names(cluster)[0]
    live.fault("down", target)
    assert not ledger.dirty and not any(p.counters.moved for p in ports)
    path = journal.journal_path(tmp_path, "j")
    doc = json.loads(path.read_bytes().splitlines()[-1])["counters"]  # the line it added
    assert len(doc) == 2  # the link's two ends counted LinkDowned
    assert all(entry[0]["LinkDownedCounter"] == 1 for entry in doc.values())
    live.up(target)
    key = next(iter(doc))
    ni, pn = map(int, key.split(":"))
    p = srv.sim.nodes[ni].ports[pn]
    p.counters.reset(0xFFFF, 0xFF)  # a PMA reset moves the reset point: saved next time
    assert ledger.dirty == {p.counters}
    ledger.take()
    doc2 = json.loads(ledger.since())
    assert list(doc2) == [key] and doc2[key][1]["LinkDownedCounter"] == 1
    # a fresh walk of every port (nothing cached) gives the same document
    assert json.loads(ledger.whole()) == journal.counters_doc(srv.sim)


def test_a_fault_with_no_traffic_takes_no_snapshot_of_the_fabric(tmp_path: Path):
    """With no flows, a link change does not make the traffic engine re-snapshot the
    fabric (it did at every fault request: a tenth of a second each on 2,048 HCAs)."""
    spec = tmp_path / "storm-64.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    cluster = build(load_spec(str(spec)))
    srv = FabricServer(cluster.fabric, f"flstorms{id(tmp_path) & 0xFFFFFF}")
    clock = WallClock(0.0)
    eng = TrafficEngine(srv.sim, clock)
    live = LiveFabric(srv, cluster, clock, traffic=eng)
    target = _link_names(cluster)[0]
    live.fault("down", target)
    live.up(target)
    assert eng._snap is None
