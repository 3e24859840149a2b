"""The journal's saves cost what changed: a save after a fault re-encodes only the ports
whose counters moved and adds a line to the journal (the whole of it is written every
couple of seconds); what ``up --resume`` reads back is what the counters were, whatever
mix of changes, resets, MADs and saves came before (a hypothesis run), and a line cut
short by a ``kill -9`` is left out."""

from __future__ import annotations

from contextlib import contextmanager

import pytest
from helpers import served
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fabriclab.errors import InputError
from fabriclab.model.build import build
from fabriclab.sim.fabric import minhop
from fabriclab.sim.fabric.counters import NAMES
from fabriclab.sim.fabric.state import SimPort
from fabriclab.sim.live import journal
from fabriclab.sim.live.api import LiveFabric
from fabriclab.sim.live.clock import VirtualClock
from fabriclab.spec.load import load_spec

LEAF = "LAB-IBLEAF-01"
CLUSTER = build(load_spec("lab"))


def _ports(sim) -> list[SimPort]:
    return [p for n in sim.nodes for p in n.ports if p is not None]


def _held(sim) -> dict:
    """Every port's counters as they are (MADs not yet counted left out), as the journal
    keeps them; ports that hold nothing left out."""
    out = {}
    for p in _ports(sim):
        e = journal._entry(p.node.index, p, p.counters)
        if e is not None:
            out[e[0]] = e[1]
    return out


def _read(path) -> dict:
    doc = journal.load(path)
    return {k: list(v) for k, v in doc["counters"].items() if any(v)}


def test_a_fault_request_walks_no_port_and_adds_a_line(tmp_path, monkeypatch):
    """A fault and its clearing read no port's counters but the link's ends, and each
    adds a line far shorter than the journal; read back, the journal is the counters."""
    with served(CLUSTER, serve=False) as srv:
        minhop.fill(srv.sim)
        live = LiveFabric(srv, CLUSTER, VirtualClock(), state=tmp_path, name="j")
        for p in _ports(srv.sim):  # every port has counters, as after a discovery
            p.mad_in, p.mad_out = 3, 2
        live.save(whole=True)
        path = journal.journal_path(tmp_path, "j")
        whole = path.stat().st_size
        flushed = []
        real = SimPort.flush
        monkeypatch.setattr(SimPort, "flush", lambda p: flushed.append(p) or real(p))
        live.fault("down", f"{LEAF}[5]")
        live.up(f"{LEAF}[5]")
        assert flushed == []  # no walk of the fabric
        lines = path.read_bytes().split(b"\n")
        assert len(lines) == 4 and lines[-1] == b""  # the whole, two lines added
        assert len(lines[1]) < whole / 4 and len(lines[2]) < whole / 4
        ends = [live.resolve(f"{LEAF}[5]").ports[0]]
        ends.append(ends[0].peer)
        keys = {f"{p.node.index}:{p.num}" for p in ends}
        added = journal.json.loads(lines[1])["counters"]
        assert set(added) == keys  # LinkDownedCounter on the link's two ends
        assert all(added[k][0]["LinkDownedCounter"] == 1 for k in keys)
        assert _read(path) == _held(srv.sim)


def test_a_fresh_fabrics_first_save_walks_no_port_and_the_next_takes_them(tmp_path, monkeypatch):
    """``up`` of a fresh fabric: its first save holds no counters without reading a
    port's; what moves after it is in the next save, and read back."""
    with served(CLUSTER, serve=False) as srv:
        live = LiveFabric(srv, CLUSTER, VirtualClock(), state=tmp_path, name="j")
        live.writer.ledger.at_power_on()
        flushed = []
        real = SimPort.flush
        monkeypatch.setattr(SimPort, "flush", lambda p: flushed.append(p) or real(p))
        live.save()
        assert flushed == []
        path = journal.journal_path(tmp_path, "j")
        assert _read(path) == {} == _held(srv.sim)
        for p in _ports(srv.sim)[:5]:  # MADs crossed some ports
            p.mad_in, p.mad_out = 3, 2
        live.fault("down", f"{LEAF}[5]")
        live.save(whole=True)
        assert len(flushed) == len(_ports(srv.sim))  # the next save took every port
        end = live.resolve(f"{LEAF}[5]").ports[0]
        moved = [*_ports(srv.sim)[:5], end, end.peer]  # MADs crossed them; the link's ends
        held = _held(srv.sim)
        assert set(held) == {f"{p.node.index}:{p.num}" for p in moved}
        assert _read(path) == held


def test_lines_added_grow_no_longer_than_the_whole(tmp_path, monkeypatch):
    """Once the lines added outgrow the whole, the next save writes it whole again."""
    monkeypatch.setattr("fabriclab.sim.live.journal.ADDED_MIN", 0)
    with served(CLUSTER, serve=False) as srv:
        live = LiveFabric(srv, CLUSTER, VirtualClock(), state=tmp_path, name="j")
        live.save(whole=True)
        path = journal.journal_path(tmp_path, "j")
        for _ in range(40):
            live.fault("down", f"{LEAF}[5]")
            live.up(f"{LEAF}[5]")
            lines = path.read_bytes().split(b"\n")
            assert sum(map(len, lines[1:])) <= 2 * len(lines[0]) + 4096
        assert _read(path) == _held(srv.sim)


def test_a_line_cut_short_is_left_out_and_a_damaged_one_refused(tmp_path):
    with served(CLUSTER, serve=False) as srv:
        live = LiveFabric(srv, CLUSTER, VirtualClock(), state=tmp_path, name="j")
        live.save(whole=True)
        live.fault("down", f"{LEAF}[5]")
        path = journal.journal_path(tmp_path, "j")
        before = path.read_bytes()
        state = journal.load(path)
        live.fault("down", f"{LEAF}[6]")
        after = path.read_bytes()
        assert len(journal.load(path)["faults"]) == 2
        for cut in (1, 2, len(after) - len(before) - 1):  # kill -9 in the middle of a write
            path.write_bytes(after[:-cut])
            assert journal.load(path) == state
        lines = after.split(b"\n")
        for damaged, said in ((b"{", "unreadable journal: line 2: "), (b'{"x":1}', "line 2: ")):
            path.write_bytes(b"\n".join([lines[0], damaged, *lines[2:]]))
            with pytest.raises(InputError) as e:
                journal.load(path)
            assert said in str(e.value) and "\n" not in str(e.value)
        live.close()


_PORTS = st.integers(0, 10_000)
_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), _PORTS, st.sampled_from(NAMES), st.integers(1, 1 << 40)),
        st.tuples(st.just("reset"), _PORTS, st.integers(0, 0xFFFF), st.booleans()),
        st.tuples(st.just("mads"), _PORTS, st.integers(1, 100), st.integers(0, 100)),
        st.tuples(st.just("fault"), st.integers(1, 8), st.booleans(), st.none()),
        st.tuples(st.just("save"), st.booleans(), st.none(), st.none()),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops=_OPS)
def test_what_is_read_back_is_what_the_counters_were(tmp_path_factory, ops):
    """Any mix of counter changes, resets, MADs, faults and saves (a line, or whole):
    the journal read back is the counters at the last save (MADs counted at a whole
    save), and a fresh walk of every port gives the same."""
    tmp = tmp_path_factory.mktemp("ledger")
    with served(CLUSTER, serve=False) as srv:
        live = LiveFabric(srv, CLUSTER, VirtualClock(), state=tmp, name="j")
        live.save()
        path = journal.journal_path(tmp, "j")
        ports = _ports(srv.sim)
        expect = _held(srv.sim)
        for op, a, b, c in ops:
            if op == "add":
                ports[a % len(ports)].counters.add(b, c)
            elif op == "reset":
                ports[a % len(ports)].counters.reset(b, b >> 8, extended=c)
            elif op == "mads":
                p = ports[a % len(ports)]
                p.mad_in += b
                p.mad_out += c
            elif op == "fault":
                target = f"{LEAF}[{a}]"
                if b:
                    live.fault("down", target)
                elif live.faults():
                    live.clear()
                else:
                    continue  # nothing to clear: nothing saved
            else:
                live.save(whole=a)
            if op in ("fault", "save"):
                expect = _held(srv.sim)
            assert _read(path) == expect
        live.save(whole=True)
        assert _read(path) == _held(srv.sim) == journal.counters_doc(srv.sim)
        assert journal.load(path)["faults"] == live.faults()
        live.close()


@contextmanager
def _with_traffic(tmp_path):
    """The lab fabric served in process, routed, with a traffic engine and a journal
    written whole: (server, live fabric, the journal's path)."""
    from fabriclab.sim.live.traffic.engine import TrafficEngine

    with served(CLUSTER, serve=False) as srv:
        minhop.fill(srv.sim)
        clock = VirtualClock()
        eng = TrafficEngine(srv.sim, clock)
        live = LiveFabric(srv, CLUSTER, clock, state=tmp_path, name="j", traffic=eng)
        live.save(whole=True)
        yield srv, live, journal.journal_path(tmp_path, "j")


def test_traffic_moves_are_in_each_line(tmp_path):
    """Counters that flows moved reach the journal at the next save, a line like any
    other change: read back, they are what the ports show."""
    with _with_traffic(tmp_path) as (srv, live, path):
        live.traffic_request("send", ["sched-worker1", "sched-worker2"], {"rate": "1GB/s"})
        live.advance(2)
        assert len(path.read_bytes().split(b"\n")) > 2  # lines added, not written whole
        src = live.resolve("sched-worker1").ports[0]
        key = f"{src.node.index}:{src.num}"
        doc = _read(path)
        assert doc[key][0]["PortXmitData"] >= 2e9 // 4  # 4-byte words
        assert doc == _held(srv.sim)
        live.close()


def test_a_fault_with_flows_running_writes_no_flow(tmp_path, monkeypatch):
    """Flows are written by the requests that change them (and the clock's advance, and
    the whole): a fault request's line leaves them out, and reading the journal gives
    the flows of the line before; the flows' own walk is not made for it."""
    from fabriclab.sim.live.traffic import commands

    with _with_traffic(tmp_path) as (_srv, live, path):
        live.traffic_request("send", ["sched-worker1", "sched-worker2"], {"bytes": "10G"})
        assert len(journal.load(path)["traffic"]) == 1  # the request's line has it
        walks = []
        real = commands.flows_doc
        monkeypatch.setattr(commands, "flows_doc", lambda e: walks.append(e) or real(e))
        live.fault("down", f"{LEAF}[7]")
        assert walks == []
        last = journal.json.loads(path.read_bytes().splitlines()[-1])
        assert "traffic" not in last and last["faults"]
        doc = journal.load(path)
        assert len(doc["traffic"]) == 1 and len(doc["faults"]) == 1
        live.traffic_request("stop", [], {})
        assert journal.load(path)["traffic"] == []  # stopped: the line says none
        live.close()


def test_the_periodic_whole_save_waits_while_mads_arrive(tmp_path):
    """The whole save (every port a sweep crossed) is not written while MADs keep
    arriving, up to 30 s; once they stop, at the next check."""
    import time

    with served(CLUSTER, serve=False) as srv:
        minhop.fill(srv.sim)
        live = LiveFabric(srv, CLUSTER, VirtualClock(), state=tmp_path, name="j")
        live.save(whole=True)
        w = live.writer

        def check(mads: int, ago: float) -> bool:
            """MADs arrive, the last whole save ``ago`` seconds back: was one written?"""
            srv.stats.mads += mads
            w.saved = before = time.monotonic() - ago
            live._periodic_save()
            return w.saved != before

        assert not check(mads=100, ago=5.0)  # due, but a sweep is under way
        assert not check(mads=1, ago=20.0)
        assert check(mads=0, ago=5.0)  # the MADs stopped: written
        assert not check(mads=0, ago=1.0)  # not due
        assert check(mads=100, ago=31.0)  # busy for 30 s: written all the same
