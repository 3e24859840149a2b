"""Flows with nowhere to go, as a reliable-connection queue pair meets them: a flow
whose packets cannot reach its destination (a link down on its path, no forwarding
entry, a partition check that refuses them) is ``retrying``; it resends its first
unacknowledged packet at each local ACK timeout and, after its retry count of resends
with no route, ends ``failed`` with the reason (:mod:`fabriclab.ib.transport`: IBA
9.7.6.1.3; ``timeout`` and ``retry_cnt`` of ibv_modify_qp).  A route that comes back
before then makes it ``running`` again.

Each send (the first and every resend) is one packet, counted on the ports it crosses
up to where it is dropped, as the traffic engine counts dropped packets
(:mod:`.counters`); a retrying flow sends nothing else.  Its ``sent`` counts that packet
once.
"""

from __future__ import annotations

import numpy as np

from ....ib.enums import PhysState, PortState
from ....ib.packets import HEADER_WORDS
from ....ib.transport import TIMEOUT_UNIT_S
from ...fabric.datapaths import (
    CONSTRAINT,
    DELIVERED,
    DISCARDED,
    PKEY,
    RELAY,
    XMIT_CONSTRAINT,
    Routes,
    Snapshot,
)
from ...fabric.state import SimPort
from .flows import FAILED, RETRYING, RUNNING, FlowTable

_EPS = 1e-9  # relative slack on the clock's float seconds at a timeout's edge


def classify(f: FlowTable, r: Routes, t: float) -> bool:
    """Flows routed anew at time ``t``: a running one whose packets are not delivered
    starts retrying, a retrying one whose packets are runs again.  Whether any changed."""
    n = f.n
    st = f.state[:n]
    bad = r.end[:n] != DELIVERED
    lose = np.flatnonzero((st == RUNNING) & bad)
    back = np.flatnonzero((st == RETRYING) & ~bad)
    f.state[lose] = RETRYING
    f.since[lose] = t
    f.tries[lose] = 0
    f.rate[lose] = 0.0
    f.state[back] = RUNNING
    f.tries[back] = 0
    return bool(len(lose) or len(back))


def due(f: FlowTable, t: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The retrying flows at time ``t``: their indices, the sends each has made by then
    not yet counted, and which of them have spent their retry count (they fail)."""
    idx = np.flatnonzero(f.state[: f.n] == RETRYING)
    if not len(idx):
        return idx, idx, idx.astype(bool)
    timeout = f.timeout[idx].astype(np.int64)
    period = np.where(timeout > 0, TIMEOUT_UNIT_S * np.exp2(timeout), np.inf)
    timeouts = (t - f.since[idx]) / period * (1 + _EPS) + _EPS  # timeouts waited out
    limit = f.retries[idx].astype(np.int64) + 1
    sends = np.minimum(np.floor(timeouts).astype(np.int64) + 1, limit)
    return idx, sends - f.tries[idx], timeouts >= limit


def payload(f: FlowTable, idx: np.ndarray, mtu: np.ndarray) -> np.ndarray:
    """The payload of the packet each of flows ``idx`` resends: a path MTU, or what is
    left of its size."""
    left = f.size[idx] - f.delivered[idx]
    return np.where(f.size[idx] >= 0, np.minimum(mtu, left), mtu)


def sends(f: FlowTable, idx: np.ndarray, new: np.ndarray, mtu: np.ndarray):
    """Count ``new`` sends of flows ``idx``: (packets, data words) per flow; ``sent``
    and ``tries`` follow."""
    b = payload(f, idx, mtu)
    f.sent[idx] = np.maximum(f.sent[idx], f.delivered[idx] + b)
    f.tries[idx] += new.astype(f.tries.dtype)
    return new, new * (-(-b // 4) + HEADER_WORDS)


def fail(f: FlowTable, snap: Snapshot, r: Routes, idx: np.ndarray) -> None:
    """Flows ``idx`` spent their retry count: failed, keeping the reason as it is now."""
    f.state[idx] = FAILED
    f.rate[idx] = 0.0
    for i in idx.tolist():
        why = reason(snap, int(r.end[i]), int(r.at[i]), int(f.src[i]), int(f.dst[i]))
        f.why[i] = f"retry count exceeded: {why}"


def _name(p: SimPort | None) -> str:
    if p is None:
        return "?"
    n = p.node.fabric_node
    return f"{n.name}[{p.num}]" if p.node.is_switch else str(n.name)


def _link(port: SimPort | None) -> str:
    """A link that carries no data, by its switch end (as fault targets name it): down,
    or up and not yet ACTIVE (no subnet manager has brought it up)."""
    peer = port.peer if port is not None else None
    if port is not None and not port.node.is_switch and peer is not None:
        port, peer = peer, port
    ends = [p for p in (port, peer) if p is not None]
    if ends and all(p.phys == PhysState.LINKUP for p in ends):
        worst = min(PortState(p.state) for p in ends)
        return f"link {_name(port)} is {worst.name}, not ACTIVE"
    return f"link {_name(port)} is down"


def reason(snap: Snapshot, end: int, at: int, src: int, dst: int) -> str:
    """Why a flow from flat port ``src`` to ``dst`` whose packets end as ``end`` at
    ``at`` goes nowhere, in words: ``link LEAF-01[5] is down``, ..."""
    port = snap.ports[at] if at >= 0 else None
    if end == DISCARDED:
        return _link(port)
    if end not in (CONSTRAINT, XMIT_CONSTRAINT, PKEY):
        # the SM routes no LID to a port whose link is down: say so rather than where
        for p in (dst, src):
            if not snap.link_ok[p]:
                return _link(snap.ports[p])
    if end == RELAY:
        lid = int(snap.lid[dst])
        return f"destination unreachable: no forwarding entry for LID {lid} at {_name(port)}"
    if end in (CONSTRAINT, XMIT_CONSTRAINT):
        return f"partition: refused at {_name(port)}"
    if end == PKEY:
        return f"partition: {_name(port)} does not hold the P_Key"
    return f"destination unreachable: packets end at {_name(port)}"
