"""The live fabric in process: targets, the fault state machine, the bit-error pace under
the virtual clock, scenario checking, and the journal's round trip."""

from __future__ import annotations

import re

import pytest
from helpers import served

from fabriclab.errors import InputError
from fabriclab.ib.enums import PhysState, PortState
from fabriclab.model.build import build
from fabriclab.sim.live.api import LiveFabric
from fabriclab.sim.live.clock import VirtualClock
from fabriclab.spec.load import load_spec

LEAF = "LAB-IBLEAF-01"


@pytest.fixture
def live():
    cluster = build(load_spec("lab"))
    with served(cluster, serve=False) as srv:
        yield LiveFabric(srv, cluster, VirtualClock())


def _names(live) -> list[str]:
    return [e["name"] for e in live.events.events]


def test_either_end_names_the_link(live):
    a = live.resolve(f"{LEAF}[5]").ports[0]
    b = live.resolve("sched-worker2/mlx5_0[1]").ports[0]
    assert a.peer is b and b.peer is a
    assert live.resolve("sched-worker2").kind == "tray"
    assert len(live.resolve("sched-worker2").ports) == 4
    sw = live.resolve(LEAF)
    assert sw.kind == "switch" and len(sw.ports) == 8 + 4  # eight HCAs, four uplinks


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("NOPE[3]", "NOPE[3]: no switch, tray or HCA 'NOPE'"),
        (f"{LEAF}[99]", "has no port 99"),
        (f"{LEAF}[0]", "port 0 is the switch's management port"),
        (f"{LEAF}[60]", "is not cabled"),
        ("sched-worker9", "no tray, CA or node 'sched-worker9'"),
        ("x[", "bad target"),
        ("", "an empty target"),
    ],
)
def test_a_bad_target_is_one_error_naming_it(live, target, message):
    with pytest.raises(InputError) as e:
        live.fault("down", target)
    assert message in str(e.value)
    assert live.faults() == [] and live.events.events == []


def test_down_and_up_at_either_end(live):
    f = live.fault("down", f"{LEAF}[5]")
    p = live.resolve(f"{LEAF}[5]").ports[0]
    for q in (p, p.peer):
        assert (q.state, q.phys) == (PortState.DOWN, PhysState.POLLING)
        assert q.counters.raw["LinkDownedCounter"] == 1
    # the SM re-enabling the port cannot bring a failed cable back
    live.links.enable_port(p)
    assert not p.up
    assert live.up("sched-worker2/mlx5_0[1]") == [f["id"]]
    assert p.up and p.peer.up and p.state == PortState.INIT
    assert _names(live) == ["Link went down", "Link is up"]
    assert live.faults() == []


def test_switch_down_stops_answering_and_comes_back(live):
    live.fault("down", LEAF)
    node = live.resolve(LEAF).ports[0].node
    assert all(not p.up for p in node.ports[1:] if p is not None and p.peer is not None)
    assert all(live.drops[p](0x11) for p in node.ports if p is not None)
    with pytest.raises(InputError, match="held down by fault 1"):
        live.up(f"{LEAF}[5]")
    live.up(LEAF)
    assert not live.drops
    assert all(p.up for p in node.ports[1:] if p is not None and p.peer is not None)
    assert _names(live)[0] == "Switch is down" and "Switch is up" in _names(live)


def test_flap_under_the_virtual_clock(live):
    live.fault("flap", f"{LEAF}[6]", period=2, count=3)
    p = live.resolve(f"{LEAF}[6]").ports[0]
    assert not p.up
    live.advance(0.999)
    assert not p.up
    live.advance(0.001)
    assert p.up
    live.advance(10)
    assert p.up and live.faults() == []
    times = [(e["sim_time"], e["name"]) for e in live.events.events]
    assert times == [
        (0.0, "Link went down"),
        (1.0, "Link is up"),
        (2.0, "Link went down"),
        (3.0, "Link is up"),
        (4.0, "Link went down"),
        (5.0, "Link is up"),
    ]


def test_degrade_shows_in_portinfo_both_ends(live):
    from fabriclab.ib.mad.layouts import PORT_INFO

    live.fault("degrade", f"{LEAF}[5]", width="2x", speed="HDR")
    p = live.resolve(f"{LEAF}[5]").ports[0]
    for q in (p, p.peer):
        pi = PORT_INFO.unpack(q.port_info())
        assert pi["LinkWidthActive"] == 16 and pi["LinkWidthSupported"] == 0x13
        assert pi["LinkSpeedExtActive"] == 4 and pi["LinkSpeedExtSupported"] == 0xF
    assert _names(live) == ["Non-optimal link width", "Non-optimal link speed"]
    with pytest.raises(InputError, match="not narrower"):
        live.fault("degrade", f"{LEAF}[6]", width="4x")
    live.clear()
    assert PORT_INFO.unpack(p.port_info())["LinkWidthActive"] == 2


def test_ber_pace_is_exact_under_the_virtual_clock(live):
    # 4x NDR: 4 lanes x 106.25 Gb/s = 4.25e11 bits/s each way; at BER 1e-10 that is 42.5
    # symbol errors a second at each end, one integrity error (and recovery) per 8
    live.fault("errors", f"{LEAF}[5]", ber=1e-10, down_after=255)
    p = live.resolve(f"{LEAF}[5]").ports[0]
    live.advance(1)
    assert p.counters.raw["SymbolErrorCounter"] == 42
    live.advance(1)
    assert p.counters.raw["SymbolErrorCounter"] == 85
    live.advance(8)
    for q in (p, p.peer):
        assert q.counters.raw["SymbolErrorCounter"] == 425
        assert q.counters.raw["LocalLinkIntegrityErrors"] == 53
        assert q.counters.raw["LinkErrorRecoveryCounter"] == 53
        # the PortCounters view saturates at the field's width (4 bits)
        assert q.counters.view()["LocalLinkIntegrityErrors"] == 15
    assert "Counter threshold exceeded" in _names(live)


def test_ber_past_the_threshold_takes_the_link_down(live):
    live.fault("errors", f"{LEAF}[5]", ber=1e-10, down_after=16)
    p = live.resolve(f"{LEAF}[5]").ports[0]
    live.advance(10)  # 53 recoveries: the link gave up 3 times
    assert p.counters.raw["LinkDownedCounter"] == 3
    assert _names(live).count("Link retrained after errors") == 3
    assert p.up


def test_drop_rate_is_repeatable(live):
    live.fault("drop", f"{LEAF}[0]", rate=50, seed=7)
    rule = live.drops[live.resolve(f"{LEAF}[0]", "drop").ports[0]]
    lost = sum(rule(0x15) for _ in range(1000))
    assert 400 < lost < 600


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("steps:\n  - at: 1s\n    do: explode X\n", "s.yaml:3: unknown verb 'explode'"),
        ("- at: 1s\n  do: down NOPE[3]\n", "s.yaml:2: NOPE[3]: no switch, tray or HCA"),
        ("- at: 1s\n  do: flap LAB-IBLEAF-01[5]\n  colour: red\n", "s.yaml:3: flap takes no"),
        ("- at: soon\n  do: down LAB-IBLEAF-01[5]\n", "s.yaml:1: 'soon' is not a duration"),
        ("- [", "s.yaml:2: not valid YAML"),
        ("- at: 1s\n", "s.yaml:1: a step needs at: and do:"),
        ("- at: 1s\n  do: flap LAB-IBLEAF-01[5]\n  count: 0\n", "s.yaml:2: --count: 0"),
    ],
)
def test_a_bad_scenario_changes_nothing(live, text, message):
    with pytest.raises(InputError) as e:
        live.scenario(text, "s.yaml")
    assert message in str(e.value), str(e.value)
    assert live.faults() == [] and live.scenarios == [] and live.events.events == []


def test_a_bad_step_after_good_ones_runs_none(live):
    text = "- at: 0s\n  do: down LAB-IBLEAF-01[7]\n- at: 1s\n  do: explode\n"
    with pytest.raises(InputError, match=r"s\.yaml:4: unknown verb"):
        live.scenario(text, "s.yaml")
    assert live.faults() == []


def test_scenario_runs_to_its_end(live):
    text = (
        "name: leaf-flap\nsteps:\n"
        "  - at: 10s\n    do: flap LAB-IBLEAF-01[9]\n    period: 2s\n    count: 5\n"
        "  - at: 2s\n    do: degrade sched-worker1/mlx5_0[1]\n    width: 1x\n"
        "  - at: 30s\n    do: clear sched-worker1/mlx5_0\n"
    )
    r = live.scenario(text, "s.yaml")
    assert r["end"] == 30
    live.advance(40)
    assert live.scenarios == [] and live.faults() == []
    names = _names(live)
    assert names.count("Link went down") == 5 and names.count("Link is up") == 5
    assert names[0] == "Non-optimal link width" and names[-1] == "Link width and speed restored"


def test_journal_round_trip(live, tmp_path):
    live.fault("down", f"{LEAF}[5]")
    live.fault("errors", f"{LEAF}[6]", ber=1e-10, down_after=255)
    live.fault("flap", f"{LEAF}[7]", period=4, count=2)
    live.scenario("- at: 100s\n  do: clear all\n", "s.yaml")
    live.advance(1)
    doc = live.snapshot()
    cluster = live.resolver.cluster
    with served(cluster, serve=False) as srv2:
        again = LiveFabric(srv2, cluster, VirtualClock(doc["clock"]))
        again.restore(doc)
        assert again.faults() == live.faults()
        for t in (f"{LEAF}[5]", f"{LEAF}[6]", f"{LEAF}[7]"):
            a, b = live.resolve(t).ports[0], again.resolve(t).ports[0]
            assert (a.state, a.phys, a.counters.raw) == (b.state, b.phys, b.counters.raw)
        assert again.events.events == []  # nothing happened again
        live.advance(200)
        again.advance(200)
        a, b = live.resolve(f"{LEAF}[6]").ports[0], again.resolve(f"{LEAF}[6]").ports[0]
        assert a.counters.raw == b.counters.raw
        assert again.faults() == live.faults() == []


@pytest.fixture
def routed():
    """The lab fabric with its links active and min-hop routes, and a traffic engine."""
    from fabriclab.sim.fabric import minhop
    from fabriclab.sim.live.traffic.engine import TrafficEngine

    cluster = build(load_spec("lab"))
    with served(cluster, serve=False) as srv:
        minhop.fill(srv.sim)
        clock = VirtualClock()
        yield LiveFabric(srv, cluster, clock, traffic=TrafficEngine(srv.sim, clock))


def test_traffic_moves_receive_errors_and_slows_on_a_degraded_link(routed):
    live = routed
    r = live.traffic_request("send", ["sched-worker1", "sched-worker2"], {"rate": "25GB/s"})
    assert r["count"] == 1
    live.fault("errors", "sched-worker2/mlx5_0[1]", ber=1e-9, down_after=255)
    live.advance(1)
    dst = live.resolve("sched-worker2/mlx5_0[1]").ports[0]
    c = dst.flush().raw
    # 25 GB/s of payload crossed the link in 1 s: about 2.5e11 bits with headers; at
    # BER 1e-9 about 250 of its packets arrived damaged
    bits = c["PortRcvData"] * 32
    assert c["PortRcvErrors"] == int(bits * 1e-9)
    assert 200 < c["PortRcvErrors"] < 300
    [f] = live.traffic_request("list", [], {})["flows"]
    assert f["rate"] == pytest.approx(25e9)
    # a link retrained at 1x carries a quarter: the flow slows to what 1x NDR carries
    live.fault("degrade", "sched-worker2/mlx5_0[1]", width="1x")
    live.advance(1)
    [f] = live.traffic_request("list", [], {})["flows"]
    assert f["rate"] < 12.5e9


def test_traffic_commands_check_their_words(routed):
    live = routed
    for verb, args, opts, msg in [
        ("send", ["sched-worker1"], {"bytes": 10}, "want 'traffic send FROM TO'"),
        ("send", ["sched-worker1", "nope"], {"bytes": 10}, "no tray, CA or node 'nope'"),
        ("send", ["sched-worker1", "sched-worker2"], {}, "want one of --bytes N or --rate R"),
        ("send", ["sched-worker1", "sched-worker2"], {"rate": "fast"}, "want e.g. 12.5GB/s"),
        ("ring", ["sched-worker[1-2"], {"bytes": 10}, "sched-worker[1-2"),
        ("explode", [], {}, "unknown traffic verb 'explode'"),
    ]:
        with pytest.raises(InputError, match=re.escape(msg)):
            live.traffic_request(verb, args, opts)
    assert live.traffic.flows() == []
    r = live.traffic_request("all-to-all", ["sched-worker[1-2]"], {"bytes": "1Mi"})
    assert r["count"] == 2
    live.advance(1)
    assert all(f["state"] == "done" for f in live.traffic_request("list", [], {})["flows"])


def test_traffic_steps_and_requests_take_the_queue_pair_attributes(routed):
    live = routed
    live.fault("down", "sched-worker2/mlx5_0[1]")
    live.scenario(
        "steps:\n  - at: 0s\n    do: traffic send sched-worker1 sched-worker2\n"
        "    bytes: 1Mi\n    timeout: 10\n    retry-count: 2\n",
        "s.yaml",
    )
    live.traffic_request("send", ["sched-worker2", "sched-worker1"], {"rate": "1GB/s"})
    [a, b] = live.traffic_request("list", [], {})["flows"]
    assert (a["state"], a["timeout"], a["retry_count"]) == ("retrying", 10, 2)
    assert (b["state"], b["timeout"], b["retry_count"]) == ("retrying", 20, 7)
    live.advance(3 * 4.096e-6 * 2**10 * 1.01)  # past 3 x its timeout of 4.2 ms
    doc = live.traffic_request("list", [], {"state": "failed"})
    assert [f["id"] for f in doc["flows"]] == [1] and doc["more"] == 0
    assert doc["flows"][0]["reason"] == "retry count exceeded: link LAB-IBLEAF-01[5] is down"
    with pytest.raises(InputError, match="--timeout: 32: want a whole number from 0 to 31"):
        live.traffic_request(
            "send", ["sched-worker1", "sched-worker2"], {"bytes": 1, "timeout": 32}
        )
    with pytest.raises(InputError, match="unknown option 'retries'"):
        live.traffic_request("send", ["sched-worker1", "sched-worker2"], {"bytes": 1, "retries": 3})
    with pytest.raises(InputError, match="traffic takes no option 'retries'"):
        live.scenario("steps:\n  - at: 0s\n    do: traffic stop\n    retries: 3\n", "s.yaml")
    assert live.traffic_request("stop", [], {}) == {"verb": "stop", "ids": [2], "count": 1}


def test_retrying_flows_are_journalled_with_what_is_left_and_their_attributes(routed):
    from fabriclab.sim.live.traffic import commands
    from fabriclab.sim.live.traffic.engine import TrafficEngine

    live = routed
    live.traffic_request("send", ["sched-worker1", "sched-worker2"], {"bytes": "1Gi"})
    live.advance(0.01)
    live.fault("down", "sched-worker2/mlx5_0[1]")
    live.traffic_request(
        "send", ["sched-worker1", "sched-worker2"], {"bytes": 100, "timeout": 12, "retry_count": 1}
    )
    live.advance(0.001)
    doc = commands.flows_doc(live.traffic)
    left = (1 << 30) - live.traffic.flows([1])[0].delivered
    assert [(d["id"], d["left"], d["timeout"], d["retry_count"]) for d in doc] == [
        (1, left, 20, 7),
        (2, 100, 12, 1),
    ]
    again = TrafficEngine(live.sim, live.clock)
    commands.restore_flows(again, commands.flow_ports(live.sim, doc), doc)
    flows = again.flows()
    assert [(f.size, f.state, f.timeout, f.retry_count) for f in flows] == [
        (left, "retrying", 20, 7),
        (100, "retrying", 12, 1),
    ]
    assert all(f.sent <= f.size for f in flows)


def test_the_loop_hook_saves_the_journal_under_a_virtual_clock(tmp_path):
    import time as _time

    from fabriclab.sim.live import journal

    cluster = build(load_spec("lab"))
    with served(cluster, serve=False) as srv:
        live = LiveFabric(srv, cluster, VirtualClock(), state=tmp_path, name="j")
        assert live.wake() <= 2.0
        path = journal.journal_path(tmp_path, "j")
        assert path.exists()
        p = live.resolve(f"{LEAF}[5]").ports[0]
        p.counters.add("SymbolErrorCounter", 3)  # moved without a live change (a MAD)
        live.writer.saved -= 60  # as if the last save were a minute ago
        live._wake_at = _time.monotonic()
        live.wake()
        key = f"{p.node.index}:{p.num}"
        assert journal.load(path)["counters"][key][0]["SymbolErrorCounter"] == 3
        live.close()


def test_nvlink_fault_is_journaled_and_takes_a_tray(live):
    """An NVLink fault comes back from the journal on a fresh model (its GPUs faulted,
    nothing logged again) and clears there; it takes a tray, not a link."""
    f = live.fault("nvlink", "sched-worker2", gpus="1,0")
    assert (f["kind"], f["target"], f["options"]) == ("nvlink", "sched-worker2", {"gpus": [0, 1]})
    assert [e["name"] for e in live.events.events] == ["NVLink fault"]
    doc = live.snapshot()
    fresh = build(load_spec("lab"))
    with served(fresh, serve=False) as srv2:
        again = LiveFabric(srv2, fresh, VirtualClock(doc["clock"]))
        again.restore(doc)
        gpus = fresh.tray("sched-worker2").gpus
        assert [g.nvlink_fault for g in gpus] == [True, True, False, False]
        assert again.faults() == live.faults() and again.events.events == []
        assert again.clear(1) == [1]
        assert not any(g.nvlink_fault for g in gpus)
        assert [e["name"] for e in again.events.events] == ["NVLink fault cleared"]
    with pytest.raises(InputError, match="nvlink takes a tray, not a link"):
        live.fault("nvlink", f"{LEAF}[5]")


def test_a_link_the_sm_disables_and_enables_is_logged_once(live):
    """A PortInfo Set (ibportstate, an SM) that takes a link down or brings it back is an
    event, as a fault's change is; a fault's own change is logged once."""
    p = live.resolve(f"{LEAF}[5]").ports[0]
    link = f"{LEAF}[5] -- sched-worker2/mlx5_0[1]"
    live.links.disable_port(p)
    live.links.disable_port(p)  # already down: nothing more to say
    live.links.enable_port(p)
    evs = [(e["name"], e["object_name"], e["description"]) for e in live.events.events]
    assert evs == [
        (
            "Link went down",
            link,
            f"Link went down: {link} (by PortInfo Set (SM): {LEAF}[5] disabled)",
        ),
        ("Link is up", link, f"Link is up: {link} (by PortInfo Set (SM): {LEAF}[5] enabled)"),
    ]
    live.fault("down", f"{LEAF}[5]")
    live.clear()
    assert _names(live)[2:] == ["Link went down", "Link is up"]
