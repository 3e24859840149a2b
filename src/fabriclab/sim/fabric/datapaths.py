"""Where data flows go: a flow's packets routed hop by hop over the forwarding tables the
subnet manager programmed (IBA Vol. 1, 18.2.4.3), for many flows at once.

A :class:`Snapshot` is the fabric as routing sees it at one moment: every port as an
index into flat arrays (its peer, its node, whether its link carries data, its LID, MTU
and capacity) and the switches' linear forwarding tables as one matrix.  :func:`route`
walks all flows one hop per step with numpy.  As in :mod:`.router` (and ibsim's
sim_mad.c): data packets need both ends of a link LinkUp and ACTIVE, or they are
discarded at the port before it (PortXmitDiscards); a switch without a forwarding
entry for the DLID drops them (PortRcvSwitchRelayErrors at the port they came in by).
Where the partition check stops a flow's packets is :mod:`.partitions`' job; the ends
it can give them are listed here (CONSTRAINT, XMIT_CONSTRAINT, PKEY).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from ...ib.enums import PhysState, PortState
from ...ib.packets import mtu_bytes
from ...ib.rates import data_bytes_per_s
from .state import SimFabric, SimPort, SimSwitch

MAX_HOPS = 64  # as the MAD router: a longer walk is a forwarding loop

# how a flow's packets end (Routes.end)
DELIVERED = 0
DISCARDED = 1  # at an egress port whose link is not up and active: PortXmitDiscards
RELAY = 2  # no forwarding entry at a switch: PortRcvSwitchRelayErrors at the ingress
CONSTRAINT = 3  # refused by a switch's inbound partition check: PortRcvConstraintErrors
LOST = 4  # reached an end port that is not the destination, or looped: nothing counts it
XMIT_CONSTRAINT = 5  # refused by a switch's outbound check: PortXmitConstraintErrors, not sent
PKEY = 6  # reached the destination CA, whose P_Key check discards it: P_KeyViolations

ENDS = {
    DELIVERED: "delivered",
    DISCARDED: "PortXmitDiscards",
    RELAY: "PortRcvSwitchRelayErrors",
    CONSTRAINT: "PortRcvConstraintErrors",
    LOST: "lost",
    XMIT_CONSTRAINT: "PortXmitConstraintErrors",
    PKEY: "P_KeyViolations",
}


class Snapshot:
    """The fabric's ports and forwarding tables as arrays, at one moment.

    Port ``i`` of the flat numbering is ``sim.nodes[n].ports[k]`` with
    ``i = base[n] + k``; slots of ports a node does not have are never used.
    """

    def __init__(self, sim: SimFabric):
        self.generation = sim.generation.value
        nodes = sim.nodes
        sizes = np.fromiter((len(n.ports) for n in nodes), dtype=np.int64, count=len(nodes))
        self.base = np.concatenate(([0], np.cumsum(sizes)))
        nports = int(self.base[-1])
        self.nports = nports
        self.node = np.repeat(np.arange(len(nodes)), sizes)
        self.num = np.arange(nports) - self.base[self.node]
        self.ports: list[SimPort | None] = [p for n in nodes for p in n.ports]
        self.exists = np.fromiter((p is not None for p in self.ports), dtype=bool, count=nports)
        self.is_switch = np.repeat(
            np.fromiter((n.is_switch for n in nodes), dtype=bool, count=len(nodes)), sizes
        )
        peer = np.full(nports, -1, dtype=np.int64)
        carries = np.zeros(nports, dtype=bool)  # LinkUp and ACTIVE (not yet: its peer)
        lid = np.zeros(nports, dtype=np.int64)
        mtu = np.full(nports, 256, dtype=np.int64)
        cap = np.zeros(nports)
        rates: dict[tuple, float] = {}
        base = self.base
        linkup, active = PhysState.LINKUP, PortState.ACTIVE
        for i, p in enumerate(self.ports):
            if p is None:
                continue
            q = p.peer
            if q is not None:
                peer[i] = base[q.node.index] + q.num
            carries[i] = p.phys == linkup and p.state == active
            lid[i] = p.lid
            mtu[i] = mtu_bytes(p.neighbor_mtu)
            m = p.fabric_port
            # a degraded link carries what it retrained at (sim/faults.py)
            key = (p.width_trained or m.width, p.speed_trained or m.speed)
            c = rates.get(key)
            if c is None:
                c = rates[key] = data_bytes_per_s(*key)
            cap[i] = c
        has_peer = peer >= 0
        # a link carries data when both of its ends are LinkUp and ACTIVE
        self.link_ok = carries & has_peer & carries[np.where(has_peer, peer, 0)]
        self.carries = carries
        # whether every P_Key table holds the default partition alone (None: not known
        # yet; :func:`...live.traffic.routes.partition` finds out)
        self.default_pkeys: bool | None = None
        self.peer, self.lid, self.mtu, self.capacity = peer, lid, mtu, cap
        self.nports_of = sizes  # per node: its number of port slots
        # the forwarding tables: one row per switch, entries above LinearFdbTop unset
        sw_nodes = [n for n in nodes if n.is_switch]
        self.node_of_sw = {id(n.sw): n.index for n in sw_nodes}
        self.sw_row = np.full(len(nodes), -1, dtype=np.int64)
        for r, n in enumerate(sw_nodes):
            self.sw_row[n.index] = r
        width = int(np.max(lid)) + 1  # every LID a port has (DLIDs are): no bounds checks
        for n in sw_nodes:
            width = max(width, min(len(n.sw.lft), n.sw.lft_top + 1))  # type: ignore[union-attr]
        self.lft = np.full((len(sw_nodes), width), 0xFF, dtype=np.uint8)
        for r, n in enumerate(sw_nodes):
            sw = n.sw
            top = min(len(sw.lft), sw.lft_top + 1)  # type: ignore[union-attr]
            if top:
                self.lft[r, :top] = np.frombuffer(sw.lft, dtype=np.uint8, count=top)  # type: ignore[union-attr]

        # per port, for the walk: where its node's LFT row starts in the flat matrix,
        # its node's first port, and its node's number of port slots
        self.lft_flat = self.lft.ravel()
        row_of = np.where(self.sw_row >= 0, self.sw_row, 0) * width
        self.row_at = row_of[self.node]
        self.base_at = self.base[:-1][self.node]
        self.size_at = sizes[self.node]

    def index(self, port: SimPort) -> int:
        """A port's index in the flat numbering."""
        return int(self.base[port.node.index]) + port.num

    def update(
        self, generation: int, switches: Iterable[SimSwitch], ports: Iterable[SimPort]
    ) -> np.ndarray | None:
        """Take in what changed since (:meth:`.state.Generation.take`): the forwarding
        tables of ``switches`` and the state of ``ports``, as a fresh snapshot would
        have them; now at ``generation``.  The flat ports where something changed (each
        changed port and its peer, every port of a changed switch), or None when the
        change does not fit (a LID or a table beyond the matrix: take a fresh one)."""
        width = self.lft.shape[1]
        touched: list[int] = []
        for sw in switches:
            ni = self.node_of_sw.get(id(sw))
            if ni is None:
                return None
            top = min(len(sw.lft), sw.lft_top + 1)
            if top > width:
                return None
            row = self.lft[self.sw_row[ni]]
            row[:] = 0xFF
            if top:
                row[:top] = np.frombuffer(sw.lft, dtype=np.uint8, count=top)
            touched.extend(range(int(self.base[ni]), int(self.base[ni + 1])))
        for q in ports:
            i = self.index(q)
            if self.ports[i] is not q or q.lid >= width:
                return None
            self.carries[i] = q.phys == PhysState.LINKUP and q.state == PortState.ACTIVE
            self.lid[i] = q.lid
            self.mtu[i] = mtu_bytes(q.neighbor_mtu)
            m = q.fabric_port
            self.capacity[i] = data_bytes_per_s(
                q.width_trained or m.width, q.speed_trained or m.speed
            )
            touched.append(i)
            if self.peer[i] >= 0:
                touched.append(int(self.peer[i]))
        if ports:
            self.default_pkeys = None  # (a P_Key table write changes its port)
        at = np.unique(np.asarray(touched, dtype=np.int64))
        for i in at[self.exists[at]].tolist():
            j = self.peer[i]
            self.link_ok[i] = j >= 0 and self.carries[i] and self.carries[j]
        self.generation = generation
        return at


@dataclass
class Routes:
    """Where each of a set of flows goes.

    ``ptr``/``hops``: CSR by flow, the egress ports each flow's packets leave by, in
    order (each arrives at ``peer[hop]``); ``end``: how its packets end (DELIVERED ...),
    ``at``: the port where they are dropped (-1 when delivered); ``mtu``: the path MTU.
    """

    ptr: np.ndarray
    hops: np.ndarray
    end: np.ndarray
    at: np.ndarray
    mtu: np.ndarray

    @staticmethod
    def concat(parts: list[Routes]) -> Routes:
        """The routes of several sets of flows, one after the other."""
        ptrs, off = [np.zeros(1, dtype=np.int64)], 0
        for r in parts:
            ptrs.append(r.ptr[1:] + off)
            off += int(r.ptr[-1])
        return Routes(
            np.concatenate(ptrs),
            np.concatenate([r.hops for r in parts]),
            np.concatenate([r.end for r in parts]),
            np.concatenate([r.at for r in parts]),
            np.concatenate([r.mtu for r in parts]),
        )


def route(snap: Snapshot, src: np.ndarray, dst: np.ndarray) -> Routes:
    """Route flows from ports ``src`` to ports ``dst`` (flat indices; a switch's port 0
    as the destination: the switch, as a SHARP aggregation tree's flows have it)."""
    nflows = len(src)
    end = np.full(nflows, LOST, dtype=np.int8)
    at = np.full(nflows, -1, dtype=np.int64)
    dlid = snap.lid[dst]
    nhops = np.zeros(nflows, dtype=np.int64)
    step_flows: list[np.ndarray] = []
    step_ports: list[np.ndarray] = []
    alive = np.arange(nflows)
    egress = src.astype(np.int64)
    for _ in range(MAX_HOPS):
        if len(alive) == 0:
            break
        ok = snap.link_ok[egress]
        if not ok.all():
            bad = alive[~ok]
            end[bad], at[bad] = DISCARDED, egress[~ok]
            alive, egress = alive[ok], egress[ok]
        step_flows.append(alive)
        step_ports.append(egress)
        nhops[alive] += 1
        ingress = snap.peer[egress]
        sw = snap.is_switch[ingress]
        if not sw.all():
            ca = ~sw
            arrived, where = alive[ca], ingress[ca]
            hit = where == dst[arrived]
            end[arrived[hit]] = DELIVERED
            end[arrived[~hit]], at[arrived[~hit]] = LOST, where[~hit]
            alive, ingress = alive[sw], ingress[sw]
        out = snap.lft_flat[snap.row_at[ingress] + dlid[alive]].astype(np.int64)
        to_self = out == 0  # for the switch itself: delivered when it is the destination
        relay = (out == 0xFF) | (out >= snap.size_at[ingress])
        nxt = snap.base_at[ingress] + np.where(relay, 0, out)
        relay |= ~snap.exists[nxt]
        if relay.any():
            end[alive[relay]], at[alive[relay]] = RELAY, ingress[relay]
        if to_self.any():
            mine = to_self & (snap.node[ingress] == snap.node[dst[alive]])
            end[alive[mine]] = DELIVERED
            lost = to_self & ~mine
            end[alive[lost]], at[alive[lost]] = LOST, ingress[lost]
        keep = ~(relay | to_self)
        alive, egress = alive[keep], nxt[keep]
    # alive here looped: LOST, already the default
    return walked(snap, src, nhops, step_flows, step_ports, end, at)


def walked(
    snap: Snapshot,
    src: np.ndarray,
    nhops: np.ndarray,
    step_flows: list[np.ndarray],
    step_ports: list[np.ndarray],
    end: np.ndarray,
    at: np.ndarray,
) -> Routes:
    """The routes of a hop-by-hop walk: at step k, flows ``step_flows[k]`` left by ports
    ``step_ports[k]``; each flow's ``nhops`` steps in all, its ``end`` and ``at``."""
    ptr = np.concatenate(([0], np.cumsum(nhops)))
    hops = np.empty(int(ptr[-1]), dtype=np.int64)
    for step, (fl, ports) in enumerate(zip(step_flows, step_ports, strict=True)):
        hops[ptr[fl] + step] = ports
    mtu = np.full(len(src), 4096, dtype=np.int64)
    has = nhops > 0
    if has.any():
        mtu[has] = np.minimum.reduceat(snap.mtu[hops], ptr[:-1][has])
    # flows that never left their port: the MTU of that port
    mtu[~has] = snap.mtu[src[~has]]
    return Routes(ptr, hops, end, at, mtu)
