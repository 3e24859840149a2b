"""How fast the traffic engine's flows go: each running flow's max-min fair rate
(:mod:`.maxmin`) and, for PortXmitWait, each port's offered demand beyond what it can
send.

Each flow offers its own rate limit, or without one what its first link carries (its
sender does not know what is downstream), a sender's flows together at most that; a
port whose offered demand exceeds its capacity waits.
"""

from __future__ import annotations

import numpy as np

from ...fabric.datapaths import Snapshot
from .flows import RUNNING, FlowTable
from .maxmin import maxmin
from .routes import Crossings


def set_rates(f: FlowTable, snap: Snapshot, x: Crossings) -> tuple[np.ndarray, np.ndarray]:
    """Set the rate of every flow of ``f`` (0 for one not running) on the crossings
    ``x``; the ports whose offered demand exceeds their capacity, and by how much (wire
    bytes/s)."""
    n = f.n
    active = f.state[:n] == RUNNING
    flow_ptr, links, link_ptr, link_flows = x.con
    f.rate[:n] = maxmin(
        flow_ptr, links, link_ptr, link_flows, snap.capacity, x.weight, f.limit[:n], active
    )
    # offered demand on each port (wire bytes/s) against what it can send
    src = f.src[:n]
    first = snap.capacity[src]
    offer = np.where(active, np.minimum(f.limit[:n] * x.weight, first), 0.0)
    # a sender offers at most what its own link carries, shared by its flows
    sent = np.bincount(src, weights=offer, minlength=snap.nports)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(sent > snap.capacity, snap.capacity / sent, 1.0)
    offer = offer * scale[src]
    demand = x.by_port @ offer
    excess = demand - snap.capacity
    over = np.flatnonzero(excess > snap.capacity * 1e-9)
    return over, excess[over]
