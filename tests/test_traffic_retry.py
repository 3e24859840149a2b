"""Flows with nowhere to go, in-process: retrying as an RC queue pair would, failed with
the reason after the retry count, running again when a route comes back; counts never
past a flow's size; stop tells what it stopped; flows picked and summed for a listing."""

from __future__ import annotations

import pytest
from test_traffic import MTU, Net

from fabriclab.errors import InputError
from fabriclab.ib.enums import PhysState, PortState
from fabriclab.ib.transport import ack_timeout_s, give_up_after_s


@pytest.fixture()
def net():
    return Net()


def _down(*ports) -> None:
    for p in ports:
        p.phys, p.state = PhysState.POLLING, PortState.DOWN
        p.changed()


def _up(*ports) -> None:
    for p in ports:
        p.phys, p.state = PhysState.LINKUP, PortState.ACTIVE
        p.changed()


def test_the_timeout_is_4096_ns_times_two_to_the_attribute():
    # IBA 9.7.6.1.3; NCCL's defaults fail a queue pair after 8 x 4.29 s
    assert ack_timeout_s(20) == pytest.approx(4.294967296)
    assert give_up_after_s(20, 7) == pytest.approx(34.359738368)
    assert ack_timeout_s(0) == float("inf")


def test_a_flow_whose_port_is_down_retries_then_fails_with_the_reason(net):
    t1, t3 = net.ca("t1"), net.ca("t3")
    _down(t1, t1.peer)
    fid = net.eng.add(t1, t3, bytes=1 << 30)
    net.run(30.0)  # sends at 0, 4.29, ..., 30.06 s: 7 so far
    (f,) = net.eng.flows([fid])
    assert (f.state, f.delivered, f.sent) == ("retrying", 0, MTU)
    assert f.reason == f"link LEAF-1[{t1.peer.num}] is down"
    assert net.counters()[t1]["PortXmitDiscards"] == 7
    net.run(34.3 - 30.0)
    assert net.eng.flows([fid])[0].state == "retrying"
    assert net.counters()[t1]["PortXmitDiscards"] == 8  # the first send and 7 resends
    net.run(0.1)  # past 8 x 4.29 = 34.36 s
    (f,) = net.eng.flows([fid])
    assert f.state == "failed" and f.rate == 0
    assert f.reason == f"retry count exceeded: link LEAF-1[{t1.peer.num}] is down"
    assert (f.sent, f.delivered) == (MTU, 0)
    net.run(3600.0)
    assert net.counters()[t1]["PortXmitDiscards"] == 8
    # a route coming back does not bring a failed queue pair back
    _up(t1, t1.peer)
    net.run(1.0)
    assert net.eng.flows([fid])[0].state == "failed"


def test_the_queue_pair_attributes_set_the_budget(net):
    t1, t3 = net.ca("t1"), net.ca("t3")
    _down(t1, t1.peer)
    fid = net.eng.add(t1, t3, rate=1e9, timeout=1, retry_count=2)
    net.run(3 * ack_timeout_s(1) * 0.99)
    assert net.eng.flows([fid])[0].state == "retrying"
    net.run(3 * ack_timeout_s(1) * 0.02)
    (f,) = net.eng.flows([fid])
    assert (f.state, f.timeout, f.retry_count) == ("failed", 1, 2)
    assert net.counters()[t1]["PortXmitDiscards"] == 3
    # timeout 0 is an infinite timeout: it waits, retrying, for ever
    forever = net.eng.add(t1, t3, bytes=10, timeout=0)
    net.run(10 * 365 * 86400.0)
    assert net.eng.flows([forever])[0].state == "retrying"
    with pytest.raises(InputError, match="timeout must be a whole number from 0 to 31"):
        net.eng.add(t1, t3, bytes=10, timeout=32)
    with pytest.raises(InputError, match="retry_count must be a whole number from 0 to 7"):
        net.eng.add(t1, t3, bytes=10, retry_count=8)


def test_a_route_that_returns_in_time_makes_it_run_again(net):
    t1, t3 = net.ca("t1"), net.ca("t3")
    up = net.uplink("LEAF-1", "SPINE-1")
    net.route_via("LEAF-1", t3.lid, up.num)
    _down(up, up.peer)
    fid = net.eng.add(t1, t3, bytes=10**8)
    net.run(20.0)
    assert net.eng.flows([fid])[0].state == "retrying"
    _up(up, up.peer)
    net.run(1.0)
    (f,) = net.eng.flows([fid])
    assert (f.state, f.delivered, f.sent, f.reason) == ("done", 10**8, 10**8, None)
    # and the budget starts afresh when it loses its route again
    g = net.eng.add(t1, t3, rate=1e6)
    net.run(20.0)
    _down(up, up.peer)
    net.run(30.0)
    assert net.eng.flows([g])[0].state == "retrying"
    net.run(5.0)
    assert net.eng.flows([g])[0].state == "failed"


def test_partition_refusals_and_unreachable_lids_retry_too(net):
    t1, t3 = net.ca("t1"), net.ca("t3")
    net.route_via("LEAF-1", t3.lid, 0xFF)  # no forwarding entry
    fid = net.eng.add(t1, t3, bytes=4096)
    net.run(40.0)
    (f,) = net.eng.flows([fid])
    assert f.state == "failed"
    assert f.reason == (
        f"retry count exceeded: destination unreachable: no forwarding entry for LID "
        f"{t3.lid} at LEAF-1[{t1.peer.num}]"
    )
    assert net.counters()[t1.peer]["PortRcvSwitchRelayErrors"] == 8


def test_counts_never_pass_the_size(net):
    t1, t2, t3, t4 = (net.ca(h) for h in ("t1", "t2", "t3", "t4"))
    _down(t1, t1.peer)
    small = net.eng.add(t1, t3, bytes=100)
    big = net.eng.add(t2, t4, bytes=10**6)
    for _ in range(50):
        net.run(1.0)
        for f in net.eng.flows():
            assert f.delivered <= f.sent <= f.size
    assert net.eng.flows([small])[0].sent == 100
    assert net.eng.flows([big])[0].delivered == 10**6
    s = net.eng.summary()
    assert s["sent"] <= 100 + 10**6 and s["delivered"] == 10**6


def test_stop_tells_what_it_stopped(net):
    t1, t2, t3, t4 = (net.ca(h) for h in ("t1", "t2", "t3", "t4"))
    _down(t1, t1.peer)
    a = net.eng.add(t1, t3, bytes=10)  # retrying
    b = net.eng.add(t2, t4, rate=1e9)  # running
    c = net.eng.add(t2, t3, bytes=10)  # done soon
    net.run(1.0)
    assert net.eng.live() == 2
    assert net.eng.stop(c) == []
    assert net.eng.stop() == [a, b]
    assert net.eng.stop() == [] and net.eng.live() == 0
    assert [f.state for f in net.eng.flows()] == ["stopped", "stopped", "done"]


def test_select_and_summary(net):
    cas = [net.ca(h) for h in ("t1", "t2", "t3", "t4")]
    _down(cas[0], cas[0].peer)
    ids = net.eng.all_to_all(cas, rate=1e9)
    net.run(1.0)
    retrying = net.eng.select(states=["retrying"])
    assert sorted(int(i) + 1 for i in retrying) == [1, 2, 3, 4, 7, 10]  # t1's and to t1
    assert len(net.eng.select(src=[cas[1]], states=["running"])) == 2
    assert [int(i) + 1 for i in net.eng.select(ids=[5, 99])] == [5]
    s = net.eng.summary()
    assert s["flows"] == len(ids) == 12
    assert s["states"] == {"running": 6, "done": 0, "stopped": 0, "retrying": 6, "failed": 0}
    assert s["rate"] == pytest.approx(6e9)
    assert s["delivered"] == 6 * 10**9
    with pytest.raises(InputError, match="--state"):
        net.eng.select(states=["lost"])
