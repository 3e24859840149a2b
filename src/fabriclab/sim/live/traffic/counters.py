"""Where a flow's bytes become counters: a step of time's bytes cut into packets and data
words, added up per port in numpy totals, and put into each port's
:class:`...fabric.counters.Counters` when the port is read.

A flow is a reliable-connection stream cut into packets of its path MTU; each packet
counts its payload plus LRH, BTH and ICRC in 4-byte words (:mod:`fabriclab.ib.packets`),
and a flow's last packet, when it ends, carries the rest.  Packets count as sent on every
port they leave by and as received at the port at the other end of its link; dropped
ones count where they are dropped (the discard, relay and constraint counters, or a CA's
P_KeyViolations).  PortXmitWait counts one tick per 8 bytes of demand a port could not
send, the tick of NVIDIA Quantum switches ("xmit_wait increments every 8 bytes
regardless of port width", Tick = 7; ibdiagnet 2.13 "Congestion Assessment on
InfiniBand Links").
"""

from __future__ import annotations

import numpy as np

from ....ib.packets import HEADER_WORDS
from ...fabric import partitions
from ...fabric.datapaths import (
    CONSTRAINT,
    DISCARDED,
    PKEY,
    RELAY,
    XMIT_CONSTRAINT,
    Routes,
    Snapshot,
)
from ...fabric.state import SimFabric, SimPort
from .flows import DONE, FlowTable
from .routes import Crossings

WAIT_TICK_BYTES = 8  # bytes of unsent demand per PortXmitWait tick (Quantum, Tick = 7)

# rows of the per-port totals, and the counters each moves
_XD, _RD, _XP, _RP, _XW, _DISC, _RELAY, _CONS, _XCONS = range(9)
_COUNTERS: tuple[tuple[str, ...], ...] = (
    ("PortXmitData",),
    ("PortRcvData",),
    ("PortXmitPkts", "PortUnicastXmitPkts"),
    ("PortRcvPkts", "PortUnicastRcvPkts"),
    ("PortXmitWait",),
    ("PortXmitDiscards",),
    ("PortRcvSwitchRelayErrors",),
    ("PortRcvConstraintErrors",),
    ("PortXmitConstraintErrors",),
)
_DROP_ROW = {DISCARDED: _DISC, RELAY: _RELAY, CONSTRAINT: _CONS, XMIT_CONSTRAINT: _XCONS}


def stream(f: FlowTable, pos: np.ndarray, sel, b: np.ndarray, mtu: np.ndarray, size):
    """Advance the byte positions ``pos[sel]`` (``sel``: a slice or the flows' indices)
    by ``b``: the packets and data words that took, whole packets of ``mtu`` and, for a
    flow reaching its ``size``, the last one with the rest; and whether a flow reached
    its size (such flows are done).  ``size`` None: streams that never end."""
    old = pos[sel].copy()  # (a slice would be a view of what changes below)
    new = old + b
    if size is None:
        full = new // mtu - old // mtu
        pos[sel] = new
        return full, full * (mtu // 4 + HEADER_WORDS), False
    finite = size >= 0
    np.minimum(new, size, where=finite, out=new)
    pos[sel] = new
    full = new // mtu - old // mtu
    wd = full * (mtu // 4 + HEADER_WORDS)
    done = finite & (new == size)
    if not done.any():
        return full, wd, False
    idx = np.flatnonzero(done)
    rest = size[idx] % mtu[idx]
    tail = rest > 0
    full[idx[tail]] += 1
    wd[idx[tail]] += -(-rest[tail] // 4) + HEADER_WORDS
    ids = np.arange(f.n)[sel][idx] if isinstance(sel, slice) else sel[idx]
    f.state[ids] = DONE
    return full, wd, True


class TrafficCounters:
    """What the flows of ``flows`` counted on each port of ``sim``, and what of it the
    ports' Counters have taken.  :meth:`settle` is each port's ``traffic`` hook."""

    def __init__(self, sim: SimFabric, flows: FlowTable):
        self.flows = flows
        sizes = np.fromiter((len(n.ports) for n in sim.nodes), dtype=np.int64)
        self.base = np.concatenate(([0], np.cumsum(sizes)))
        nports = int(self.base[-1])
        self.tot = np.zeros((len(_COUNTERS), nports), dtype=np.int64)
        self.applied = np.zeros_like(self.tot)
        self.wait_frac = np.zeros(nports)

    def move(
        self,
        snap: Snapshot,
        r: Routes,
        x: Crossings,
        run: np.ndarray,
        dt: float,
        ends: np.ndarray | None,
    ) -> bool:
        """``dt`` seconds of the running flows ``run`` (non-empty) at their rates;
        ``ends`` finish.  Whether a flow finished (the rates are then stale)."""
        f = self.flows
        # every flow running (the common case): slices instead of gathers
        sel = slice(0, f.n) if len(run) == f.n else run
        xb = f.rate[sel] * dt + f.frac[sel]
        got = np.floor(xb)
        f.frac[sel] = xb - got
        b = got.astype(np.int64)
        if ends is not None and len(ends):
            pos = np.searchsorted(run, ends)
            b[pos] = f.size[ends] - f.delivered[ends]
        # a running flow's packets are delivered: one whose are not is retrying (.retry)
        pk, wd, done = stream(f, f.delivered, sel, b, r.mtu[sel], f.size[sel])
        self.count(snap, r, x, run, pk, wd)
        return done

    def count(
        self, snap: Snapshot, r: Routes, x: Crossings, run: np.ndarray, pk: np.ndarray, wd
    ) -> None:
        """Add the packets ``pk`` and data words ``wd`` of flows ``run`` (sorted table
        indices) to the ports they cross, and where they are dropped to its counter."""
        f = self.flows
        tot, m = self.tot, x.by_port
        if m.nnz:
            if len(run) == f.n:
                pk_all, wd_all = pk, wd
            else:
                pk_all = np.zeros(f.n, dtype=np.int64)
                wd_all = np.zeros(f.n, dtype=np.int64)
                pk_all[run], wd_all[run] = pk, wd
            pkts = m @ pk_all  # per port: a sparse product, exact in int64
            words = m @ wd_all
            tot[_XP] += pkts
            tot[_XD] += words
            sp, pe = x.seg_port, x.seg_peer
            tot[_RP, pe] += pkts[sp]
            tot[_RD, pe] += words[sp]
        ends = r.end[run]
        for end, row in _DROP_ROW.items():
            sel = (ends == end) & (pk > 0)
            if sel.any():
                np.add.at(tot[row], r.at[run[sel]], pk[sel])
        # a CA's P_KeyViolations live in its PortInfo, not its PMA counters: counted now
        sel = (ends == PKEY) & (pk > 0)
        if sel.any():
            for at, n in zip(r.at[run[sel]].tolist(), pk[sel].tolist(), strict=True):
                port = snap.ports[at]
                assert port is not None
                partitions.count(partitions.Drop(port, None, None, 0), n)

    def wait(self, ports: np.ndarray, excess: np.ndarray, dt: float) -> None:
        """PortXmitWait for ``dt`` seconds of demand ``excess`` (wire bytes/s) beyond what
        ``ports`` can send: in ticks, fractions carried."""
        x = excess * dt / WAIT_TICK_BYTES + self.wait_frac[ports]
        ticks = np.floor(x)
        self.wait_frac[ports] = x - ticks
        self.tot[_XW, ports] += ticks.astype(np.int64)

    def settle(self, port: SimPort) -> None:
        """Put what traffic counted on ``port`` into its Counters (called by flush)."""
        if not self.flows.n:  # no flow ever: nothing counted (every port's read comes here)
            return
        i = int(self.base[port.node.index]) + port.num
        now, was = self.tot[:, i], self.applied[:, i]
        if (now == was).all():
            return
        c = port.counters
        for k, names in enumerate(_COUNTERS):
            d = int(now[k] - was[k])
            if d:
                for name in names:
                    c.add(name, d)
        self.applied[:, i] = now

    def unsettled(self) -> tuple[np.ndarray, np.ndarray, tuple[tuple[str, ...], ...]] | None:
        """What traffic counted that the ports' Counters have not taken yet, left where it
        is: each node's first slot (a node's port ``num`` is at ``slots[node.index] +
        num``), an array of a row per kind of count and a column per slot, and the
        counters each row moves; None when no flow ever ran."""
        if not self.flows.n:
            return None
        return self.base, self.tot - self.applied, _COUNTERS

    def settle_all(self, snap: Snapshot) -> None:
        """Put what traffic counted into every port's Counters."""
        pending = np.flatnonzero((self.tot != self.applied).any(axis=0))
        for i in pending:
            self.settle(snap.ports[int(i)])  # type: ignore[arg-type]
