"""``fabriclab up --routed``: a fabric that comes up as if a subnet manager had run.

In-process: the forwarding tables are min-hop and loop-free (every LID reached from
every switch in the fabric's hop count) and deterministic.  With the real tools
(Debian's infiniband-diags and OpenSM through libumad2sim and the host library): the
tools work the moment ``up`` returns (ibnetdiscover as the model renders it, ibroute of
a switch as fabriclab routes it, perfquery of a far LID, sminfo of the stand-in master),
and a real OpenSM started later takes the subnet over: it becomes master, brings the
subnet up keeping every LID, and its routes are the ones fabriclab wrote.
"""

from __future__ import annotations

import os
import re
import subprocess

import numpy as np
import pytest
from conftest import SPECS
from fabric_server import fabric_up
from helpers import fl, no_timestamp, one_error, rendered, served, umad2sim_env
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import shortest_path

from fabriclab.ib.enums import PhysState, PortState
from fabriclab.model.build import build
from fabriclab.model.cluster import find_port
from fabriclab.sim.fabric import routed, updown
from fabriclab.sim.fabric.state import SimFabric
from fabriclab.spec.load import load_spec

THREE_TIER = str(SPECS / "three-tier-hdr.yaml")


def _cut(sim: SimFabric, pairs: int) -> None:
    """Take the first ``pairs`` links from a leaf up down (both ends POLLING), as a
    fault does, so that some destinations are reached over fewer ports."""
    leaves = [n for n in sim.nodes if n.is_switch and n.fabric_node.tier == 1]
    for n in leaves[:pairs]:
        p = next(p for p in n.ports[1:] if p is not None and p.peer and p.peer.node.is_switch)
        for end in (p, p.peer):
            end.phys, end.state = PhysState.POLLING, PortState.DOWN
            end.changed()


def _routed(spec: str, trays: int | None = None, cut: int = 0) -> SimFabric:
    c = build(load_spec(spec, trays=trays))
    sim = SimFabric(c.fabric)
    _cut(sim, cut)
    start, _ = find_port(c, None)
    routed.configure(sim, sim.port_of(start))
    return sim


@pytest.mark.parametrize(
    "spec,cut",
    [(THREE_TIER, 0), (THREE_TIER, 3), (str(SPECS / "pods-scaled.yaml"), 0), ("gb200-su", 0)],
)
def test_routes_are_min_hop_and_loop_free(spec, cut):
    """From every switch, every LID is reached by following the tables, in exactly the
    switch-to-switch distance plus one hop out: no loop, no detour, no LID left out
    (with links down too: then over the others)."""
    sim = _routed(spec, trays=64 if spec == "gb200-su" else None, cut=cut)
    switches = [n for n in sim.nodes if n.is_switch]
    row = {n.index: r for r, n in enumerate(switches)}
    a, b = [], []
    for n in switches:
        for p in n.ports[1:]:
            if p is not None and p.peer is not None and p.peer.node.is_switch and p.up:
                a.append(row[n.index])
                b.append(row[p.peer.node.index])
    dist = shortest_path(
        csr_matrix((np.ones(len(a)), (a, b)), shape=(len(switches),) * 2), unweighted=True
    )
    ends = {
        p.lid: p
        for n in sim.nodes
        for p in n.ports
        if p is not None and p.is_endport and p.lid and (n.is_switch or p.peer is not None)
    }
    for s in switches:
        for lid, end in ends.items():
            node, hops = s, 0
            while True:
                out = node.sw.out_port(lid)
                assert out != updown.NO_PATH, (s.fabric_node.desc, lid)
                if out == 0:
                    assert node is end.node
                    break
                port = node.ports[out]
                assert port.state == 4  # ACTIVE
                far = port.peer
                if not far.node.is_switch:
                    assert far is end
                    hops += 1
                    break
                node, hops = far.node, hops + 1
                assert hops <= len(switches)
            home = end.node if end.node.is_switch else end.peer.node
            assert hops == dist[row[s.index], row[home.index]] + (0 if end.node.is_switch else 1)


def test_routes_are_deterministic():
    """The same spec routes to the same bytes, every time."""
    one = updown.lfts(_routed(THREE_TIER))
    two = updown.lfts(_routed(THREE_TIER))
    assert one == two and len(one) == 32


def test_least_used_port_among_equals():
    """A leaf's far LIDs are spread over its up ports in turn, lowest port first, as
    OpenSM's least-used choice does; every up port carries its share."""
    sim = _routed(THREE_TIER)
    leaf = next(n for n in sim.nodes if n.is_switch and n.fabric_node.desc.startswith("MF0;L01"))
    ups = [p.num for p in leaf.ports[1:] if p is not None and p.peer and p.peer.node.is_switch]
    far = [
        p.lid
        for n in sim.nodes
        for p in n.ports
        if p is not None and not n.is_switch and p.peer and p.peer.node is not leaf
    ]
    used = [leaf.sw.out_port(lid) for lid in far]
    assert set(used) == set(ups)
    counts = [used.count(u) for u in ups]
    assert max(counts) - min(counts) <= 1


def test_fill_order_is_openSM_choice():
    """Level by level, lowest port first: the least used so far at each step."""
    got = updown._fill_order(np.array([2, 0, 1, 0]), 6).tolist()
    assert got == [1, 3, 1, 2, 3, 0]


def test_routed_not_cold():
    one_error(fl("up", "lab", "--routed", "--cold", "--name", "x"), "--routed", "--cold")


@pytest.fixture(scope="module")
def fab(real_tools, tmp_path_factory):
    with fabric_up(THREE_TIER, tmp_path_factory.mktemp("routed"), extra=["--routed"]) as f:
        yield f


def _ibstat(f) -> str:
    """ibstat of node001's first HCA, through the host library (its own device names)."""
    return f.ok("exec", "--name", f.name, "node001", "--", "ibstat", "mlx5_0")


def _ibroute(f, lid: int) -> dict[int, int]:
    out = f.run("node005", "ibroute", str(lid)).stdout
    return {
        int(m.group(1), 16): int(m.group(2))
        for m in re.finditer(r"^0x([0-9a-f]{4}) (\d{3}) :", out, re.MULTILINE)
    }


@pytest.mark.realtools
def test_tools_work_at_once(fab):
    """No SM ran: ibstat says ACTIVE with the plan's LID and the SM's, sminfo finds the
    master, ibnetdiscover sees the model, ibroute of a switch reads fabriclab's routes,
    perfquery reaches a far HCA by LID."""
    out = _ibstat(fab)
    assert "State: Active" in out and "Base lid: 100" in out and "SM lid: 100" in out
    sm = fab.run("node030", "sminfo").stdout
    assert "sm lid 100" in sm and "SMINFO_MASTER" in sm
    got = no_timestamp(fab.run("node001", "ibnetdiscover").stdout)
    assert got == rendered(fab.cluster, "node001")
    sim = _routed(THREE_TIER)
    core = next(n for n in sim.nodes if n.is_switch)
    want = updown.lfts(sim)[core.index][0]
    table = _ibroute(fab, core.ports[0].lid)
    assert table and all(want[lid] == port for lid, port in table.items())
    assert len(table) == sum(1 for b in want if b != updown.NO_PATH)
    far = next(p for n in sim.nodes[::-1] if not n.is_switch for p in n.ports if p is not None)
    pq = fab.run("node001", "perfquery", str(far.lid), str(far.num)).stdout
    assert "PortXmitData" in pq


@pytest.mark.realtools
def test_opensm_takes_over(fab):
    """A real OpenSM started later becomes master, brings the subnet up keeping every
    LID, and writes the routes fabriclab had (its default routing: the same choice)."""
    before = _ibroute(fab, 1)
    log = fab.workdir / "takeover.log"
    r = fab.run(
        "node003",
        "opensm",
        "-o",
        "-e",
        "-f",
        str(log),
        extra_env={"OSM_CACHE_DIR": str(fab.workdir), "OSM_TMP_DIR": str(fab.workdir)},
        timeout=300,
    )
    text = log.read_text(errors="replace")
    assert "Entering MASTER state" in text and "SUBNET UP" in text, (r.stdout, text[-3000:])
    out = _ibstat(fab)
    assert "Base lid: 100" in out and "SM lid: 104" in out
    assert _ibroute(fab, 1) == before


# fields kept in the fabric's flat state (properties, not slots), then every slot
_FLAT = ("lid", "lmc", "state", "phys", "is_endport")
_NOT_SM = {
    "node",
    "fabric_port",
    "peer",
    "pi",
    "counters",
    "gen",
    "traffic",
    "guids",
    "cap_mask",
    "mad_in",
    "mad_out",
}


def _ports(sim: SimFabric) -> dict[tuple[int, int], tuple]:
    """Every port's run-time fields an SM may set (IsSM aside: it follows who is
    attached), and each switch's forwarding state."""
    out = {}
    for n in sim.nodes:
        for p in n.ports:
            if p is not None:
                fields = [
                    (f, int(v) if isinstance(v, int) else v)
                    for f in (*_FLAT, *type(p).__slots__)
                    if f not in _NOT_SM
                    for v in [getattr(p, f)]
                    if not isinstance(v, (bytearray, dict))
                ]
                out[n.index, p.num] = (*fields, bytes(p.pkeys))
        if n.sw is not None:
            out[n.index, -1] = (bytes(n.sw.lft[: n.sw.lft_top + 1]), n.sw.lft_top, n.sw.lifetime)
    return out


@pytest.mark.realtools
@pytest.mark.parametrize("cut", [0, 3])
def test_routed_is_what_opensm_leaves(real_tools, tmp_path, cut):
    """The real OpenSM's first sweep (opensm -o) on a fabric served in this process
    leaves every port and switch exactly as ``--routed`` brings them up (with links
    down too: its routes around them are fabriclab's)."""
    cluster = build(load_spec(THREE_TIER))
    start, _ = find_port(cluster, None)
    with served(cluster) as srv:
        _cut(srv.sim, cut)
        env = umad2sim_env(srv.name, start.node.desc)
        env.update(OSM_TMP_DIR=str(tmp_path), OSM_CACHE_DIR=str(tmp_path))
        log = tmp_path / "opensm.log"
        subprocess.run(["opensm", "-o", "-e", "-f", str(log)], env=env, timeout=300, check=True)
        assert "SUBNET UP" in log.read_text(errors="replace")
        theirs = _ports(srv.sim)
    ours = _routed(THREE_TIER, cut=cut)
    assert _ports(ours) == theirs


@pytest.mark.realtools
def test_client_routed(real_tools, tmp_path, monkeypatch):
    """The Python client brings a fabric up routed (``Fabric.up(..., routed=True)``):
    the tools find the master at once."""
    from fabriclab.client import Fabric

    monkeypatch.setenv("FABRICLAB_STATE_DIR", str(tmp_path))
    with Fabric.up("lab", name=f"flrouted{os.getpid()}", sm=False, routed=True) as f:
        r = f.exec("sched-worker2", ["sminfo"])
        assert r.returncode == 0 and "SMINFO_MASTER" in r.stdout, r.stderr
