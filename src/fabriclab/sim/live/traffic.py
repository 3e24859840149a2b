"""Data traffic over the running fabric: flows between end ports that move the port
counters as real traffic would.

A flow sends from one CA port to another, routed hop by hop over the forwarding tables
(:mod:`..fabric.datapaths`), as fast as its max-min fair share allows (:mod:`.maxmin`) or at a rate
of its own, for a number of bytes or until stopped.  :meth:`TrafficEngine.advance`
brings every counter up to the clock's time; under a :class:`~.clock.VirtualClock`
every value is exact and predictable: bytes are integers per flow (the fractions of a
byte carried to the next step), and a flow that ends within a step frees its share from
that moment on.

What moves (IBA Vol. 1, 16.1.3.5 and 16.1.4.11; fields and widths from
:mod:`fabriclab.ib.mad.counters`, kept by :class:`~.counters.Counters` with its
saturating 32-bit and 64-bit views):

- PortXmitData/PortXmitPkts/PortUnicastXmitPkts on every port a flow's packets leave by,
  PortRcvData/PortRcvPkts/PortUnicastRcvPkts on every port they arrive at, CA and switch
  ports alike.  A flow is a reliable-connection stream cut into packets of its path MTU
  (the smallest active MTU, PortInfo.NeighborMTU, of the ports it leaves by); each
  packet counts its payload plus LRH, BTH and ICRC in 4-byte words
  (:mod:`fabriclab.ib.packets`).  A flow's last packet, when it ends, carries the rest.
- A link's capacity is its width x the lane's data rate after encoding
  (:func:`fabriclab.ib.rates.data_bytes_per_s`); on it a packet also takes its VCRC.
  ``rate`` figures are payload bytes per second.
- PortXmitWait on a port whose offered demand exceeds its capacity.  Each flow offers
  its own rate limit, or without one what its first link carries (its sender does not
  know what is downstream), a sender's flows together at most that; the port counts one tick per 8 bytes of demand it could not
  send, the tick of NVIDIA Quantum switches ("xmit_wait increments every 8 bytes
  regardless of port width", Tick = 7; ibdiagnet 2.13 "Congestion Assessment on
  InfiniBand Links").
- Packets towards a link that is not up and ACTIVE are discarded at the port before it
  (PortXmitDiscards); a switch without a forwarding entry drops them
  (PortRcvSwitchRelayErrors where they came in).
- Partitions: each flow's packets carry a P_Key (:func:`.partitions.carried_pkey`) and
  :func:`.partitions.enforce` walks them along their path: a switch port enforcing
  inbound discards them (PortRcvConstraintErrors), one enforcing outbound does not
  send them (PortXmitConstraintErrors), else the receiving CA takes them off the wire
  (its PortRcvData/PortRcvPkts count them: the P_Key check is a transport-layer check
  of the BTH, IBA Vol. 1, 9.6.1.1) and discards them, counting P_KeyViolations and
  sending trap 257 (through ``on_trap``; a switch port whose node supports it, trap
  259).  One trap per flow each time it is routed (a real CA repeats it until the SM
  represses it; OpenSM only logs it).  The tables are those the SM wrote; a P_Key
  table write moves the fabric's generation, so flows are routed and checked anew.
  Such a flow keeps sending (its packets count on every port up to the drop) and
  delivers nothing until the subnet manager changes the routes or the tables.

Routes are recomputed when the fabric's generation number moves (a forwarding-table
write, a port change: :class:`~.state.Generation`) or on :meth:`TrafficEngine.reroute`.
Counters reach the ports' :class:`~.counters.Counters` when they are read (the port's
``flush``), so an update of the whole fabric is a few numpy passes.  One engine per
fabric, used from one thread (the server loop).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from scipy.sparse import csr_matrix

from ...errors import InputError
from ...ib.packets import HEADER_WORDS, WIRE_OVERHEAD_BYTES
from ..fabric import partitions
from ..fabric.datapaths import (
    CONSTRAINT,
    DELIVERED,
    DISCARDED,
    ENDS,
    PKEY,
    RELAY,
    XMIT_CONSTRAINT,
    Routes,
    Snapshot,
    route,
)
from ..fabric.state import SimFabric, SimPort
from .clock import Clock
from .maxmin import maxmin

RUNNING, DONE, STOPPED = 0, 1, 2
_STATES = {RUNNING: "running", DONE: "done", STOPPED: "stopped"}
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
# ends where the port named by Routes.at takes the packets without sending them on
_HELD = (DISCARDED, XMIT_CONSTRAINT)
# what partitions.enforce's Drop counter says, as a flow's end
_DROP_END = {
    "PortRcvConstraintErrors": CONSTRAINT,
    "PortXmitConstraintErrors": XMIT_CONSTRAINT,
    None: PKEY,
}


@dataclass(frozen=True)
class Flow:
    """A flow as :meth:`TrafficEngine.flows` reports it.

    ``rate``: payload bytes per second now (0 unless running); ``sent``: payload bytes
    sent, ``delivered``: of them, bytes that reached ``dst``; ``size``: bytes to deliver
    (None: until stopped); ``limit``: its own rate cap (None: max-min only); ``state``:
    running, done or stopped; ``dropped``: where its packets are dropped now, e.g.
    "PortXmitDiscards at 'leaf'[3]" (None when they are delivered).
    """

    id: int
    src: SimPort
    dst: SimPort
    rate: float
    sent: int
    delivered: int
    size: int | None
    limit: float | None
    state: str
    dropped: str | None


class _Grow:
    """Per-flow arrays that grow as flows are added."""

    FIELDS: ClassVar[dict[str, tuple]] = {
        "src": (np.int64, 0),
        "dst": (np.int64, 0),
        "size": (np.int64, -1),
        "limit": (np.float64, np.inf),
        "delivered": (np.int64, 0),
        "lost": (np.int64, 0),
        "frac": (np.float64, 0.0),
        "state": (np.int8, RUNNING),
        "rate": (np.float64, 0.0),
    }

    # the arrays FIELDS lists, declared for the type checker (made in __init__)
    src: np.ndarray
    dst: np.ndarray
    size: np.ndarray
    limit: np.ndarray
    delivered: np.ndarray
    lost: np.ndarray
    frac: np.ndarray
    state: np.ndarray
    rate: np.ndarray

    def __init__(self) -> None:
        self.n = 0
        self.cap = 0
        for name, (dt, _) in self.FIELDS.items():
            setattr(self, name, np.zeros(0, dtype=dt))

    def extend(self, k: int) -> slice:
        """Room for ``k`` more flows; the slice they take."""
        need = self.n + k
        if need > self.cap:
            cap = max(need, 2 * self.cap, 64)
            for name, (dt, fill) in self.FIELDS.items():
                old = getattr(self, name)
                new = np.full(cap, fill, dtype=dt)
                new[: self.n] = old[: self.n]
                setattr(self, name, new)
            self.cap = cap
        s = slice(self.n, need)
        self.n = need
        return s


class TrafficEngine:
    """The flows of one fabric and the counters they move (see the module).

    ``on_trap(port, number, src, drop)``, when set, sends the trap a partition drop
    raises from ``port`` to the subnet manager (``src``: the sending port, ``drop``: the
    :class:`.partitions.Drop`).
    """

    def __init__(self, sim: SimFabric, clock: Clock):
        self.sim = sim
        self.clock = clock
        self._f = _Grow()
        sizes = np.fromiter((len(n.ports) for n in sim.nodes), dtype=np.int64)
        self._base = np.concatenate(([0], np.cumsum(sizes)))
        nports = int(self._base[-1])
        self._tot = np.zeros((len(_COUNTERS), nports), dtype=np.int64)
        self._applied = np.zeros_like(self._tot)
        self._wait_frac = np.zeros(nports)
        self._t = clock.now()
        self.on_trap: Callable[[SimPort, int, SimPort, partitions.Drop], None] | None = None
        self._snap: Snapshot | None = None
        self._routes: Routes | None = None
        self._routed = 0  # flows [0, _routed) have routes
        self._reroute = False  # route every flow again at the next chance
        self._rates_stale = True
        for n in sim.nodes:
            for p in n.ports:
                if p is not None:
                    p.traffic = self._settle

    # --- the API ---------------------------------------------------------------------

    def add(
        self,
        src: SimPort,
        dst: SimPort,
        *,
        bytes: int | None = None,
        rate: float | None = None,
    ) -> int:
        """Start a flow from CA port ``src`` to CA port ``dst`` now; its id.
        ``bytes``: it ends when that many are delivered; ``rate``: bytes per second at
        most (else as fast as max-min fairness allows)."""
        return self.add_many([(src, dst)], bytes=bytes, rate=rate)[0]

    def add_many(
        self,
        pairs: Iterable[tuple[SimPort, SimPort]],
        *,
        bytes: int | None = None,
        rate: float | None = None,
    ) -> range:
        """Start a flow for each (src, dst) pair now, all with the same ``bytes`` and
        ``rate`` (see :meth:`add`); their ids, consecutive."""
        src, dst = [], []
        for s, d in pairs:
            src.append(self._index(s, "from"))
            dst.append(self._index(d, "to"))
        return self._add(np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64), bytes, rate)

    def all_to_all(
        self,
        ports: Sequence[SimPort],
        *,
        bytes: int | None = None,
        rate: float | None = None,
    ) -> range:
        """A flow from every port of ``ports`` to every other one; their ids."""
        idx = np.array([self._index(p, "all-to-all") for p in ports], dtype=np.int64)
        k = len(idx)
        a, b = np.divmod(np.arange(k * k, dtype=np.int64), k)
        keep = a != b
        return self._add(idx[a[keep]], idx[b[keep]], bytes, rate)

    def ring(
        self,
        ports: Sequence[SimPort],
        *,
        bytes: int | None = None,
        rate: float | None = None,
    ) -> range:
        """A flow from each port of ``ports`` to the next, the last to the first."""
        idx = np.array([self._index(p, "ring") for p in ports], dtype=np.int64)
        if len(idx) < 2:
            raise InputError("a ring needs at least two ports", "traffic")
        return self._add(idx, np.roll(idx, -1), bytes, rate)

    def stop(self, id: int | None = None) -> None:
        """Stop flow ``id`` now (every running flow when None)."""
        self.advance()
        f = self._f
        if id is None:
            f.state[: f.n][f.state[: f.n] == RUNNING] = STOPPED
        else:
            i = self._flow_index(id)
            if f.state[i] == RUNNING:
                f.state[i] = STOPPED
        self._rates_stale = True

    def flows(self, ids: Iterable[int] | None = None) -> list[Flow]:
        """The flows (every one ever added, or those of ``ids``), as they are after the
        last :meth:`advance`."""
        f = self._f
        which = range(f.n) if ids is None else [self._flow_index(i) for i in ids]
        snap = self._snapshot()
        routes = self._routes
        out = []
        for i in which:
            state = int(f.state[i])
            dropped = None
            if routes is not None and i < self._routed and state == RUNNING:
                end = int(routes.end[i])
                if end != DELIVERED:
                    at = int(routes.at[i])
                    where = snap.ports[at].ref() if at >= 0 else "?"  # type: ignore[union-attr]
                    dropped = f"{ENDS[end]} at {where}"
            size, limit = int(f.size[i]), float(f.limit[i])
            out.append(
                Flow(
                    id=i + 1,
                    src=snap.ports[int(f.src[i])],  # type: ignore[arg-type]
                    dst=snap.ports[int(f.dst[i])],  # type: ignore[arg-type]
                    rate=float(f.rate[i]) if state == RUNNING else 0.0,
                    sent=int(f.delivered[i] + f.lost[i]),
                    delivered=int(f.delivered[i]),
                    size=None if size < 0 else size,
                    limit=None if np.isinf(limit) else limit,
                    state=_STATES[state],
                    dropped=dropped,
                )
            )
        return out

    def reroute(self) -> None:
        """Route every flow again now (as when the fabric's generation moves)."""
        self.advance()
        self._reroute = True
        self._prepare()

    def advance(self) -> None:
        """Bring every counter up to the clock's time."""
        now = self.clock.now()
        if not self._f.n:  # no flow: nothing to route (a fault storm must not re-snapshot)
            self._t = now
            return
        self._prepare()
        dt = now - self._t
        f = self._f
        while dt > 0:
            run = np.flatnonzero(f.state[: f.n] == RUNNING)
            ends, when = self._next_end(run)
            if when >= dt:
                self._step(run, dt, None)
                break
            self._step(run, when, ends)
            dt -= when
            self._rates()
        self._t = now
        if self._rates_stale:
            self._rates()

    def settle_all(self) -> None:
        """Put the traffic counted so far into every port's Counters (reads do it for
        the port they read)."""
        pending = np.flatnonzero((self._tot != self._applied).any(axis=0))
        snap = self._snapshot()
        for i in pending:
            self._settle(snap.ports[int(i)])  # type: ignore[arg-type]

    # --- flows ------------------------------------------------------------------------

    def _index(self, p: SimPort, what: str) -> int:
        if not isinstance(p, SimPort) or p.node.is_switch or p.num == 0:
            raise InputError(f"{p!r} is not a CA port", f"traffic {what}")
        if self.sim.nodes[p.node.index] is not p.node:
            raise InputError(f"{p.ref()} is not a port of this fabric", f"traffic {what}")
        return int(self._base[p.node.index]) + p.num

    def _flow_index(self, id: int) -> int:
        if not isinstance(id, int) or not 1 <= id <= self._f.n:
            raise InputError(f"no flow {id!r} (flows are 1..{self._f.n})", "traffic")
        return id - 1

    def _add(self, src: np.ndarray, dst: np.ndarray, size: int | None, rate: float | None):
        if size is not None and (
            isinstance(size, bool) or not isinstance(size, int | np.integer) or size < 1
        ):
            raise InputError(f"bytes must be a whole number of at least 1, not {size!r}", "traffic")
        if rate is not None and (
            isinstance(rate, bool)
            or not isinstance(rate, int | float | np.number)
            or not 0 < rate < np.inf
        ):
            raise InputError(f"rate must be a positive number of bytes/s, not {rate!r}", "traffic")
        same = src == dst
        if same.any():
            p = self._snapshot().ports[int(src[np.argmax(same)])]
            raise InputError(f"a flow from {p.ref()} to itself", "traffic")  # type: ignore[union-attr]
        self.advance()  # what ran so far ran without the new flows
        f = self._f
        s = f.extend(len(src))
        f.src[s], f.dst[s] = src, dst
        f.size[s] = -1 if size is None else int(size)
        f.limit[s] = np.inf if rate is None else float(rate)
        self._rates_stale = True
        self._prepare()
        return range(s.start + 1, s.stop + 1)

    # --- routes and rates -------------------------------------------------------------

    def _snapshot(self) -> Snapshot:
        if self._snap is None:
            self._snap = Snapshot(self.sim)
        return self._snap

    def _prepare(self) -> None:
        """Routes for every flow on the fabric as it is now, and rates for them."""
        f = self._f
        if (
            self._reroute
            or self._snap is None
            or self._snap.generation != self.sim.generation.value
        ):
            self._snap = Snapshot(self.sim)
            self._routes, self._routed, self._reroute = None, 0, False
        if self._routed < f.n:
            new = self._route(self._routed, f.n)
            parts = [self._routes, new] if self._routes is not None else [new]
            self._routes = Routes.concat(parts) if len(parts) > 1 else new
            self._routed = f.n
            self._index_routes()
            self._rates_stale = True
        if self._rates_stale:
            self._rates()

    def _route(self, lo: int, hi: int) -> Routes:
        f, snap = self._f, self._snapshot()
        src, dst = f.src[lo:hi], f.dst[lo:hi]
        return self._partition(route(snap, src, dst))

    def _partition(self, r: Routes) -> Routes:
        """The routes ``r`` with each delivered flow's packets run through the partition
        checks of its path (:func:`.partitions.enforce`, once per distinct path); a flow
        refused on the way ends where it is refused, its hops cut there."""
        snap = self._snapshot()
        if partitions.all_default(snap.ports):
            return r  # every table the default partition alone: every check passes
        ports, peer = snap.ports, snap.peer
        seen: dict[tuple[int, ...], partitions.Drop | None] = {}
        cut: dict[int, int] = {}  # flow -> hops it keeps
        for i in np.flatnonzero(r.end == DELIVERED).tolist():
            hops = r.hops[r.ptr[i] : r.ptr[i + 1]].tolist()
            key = tuple(hops)
            if key not in seen:
                path: list[SimPort] = []
                for h in hops:
                    # the port it leaves by, the port it arrives at: sender,
                    # (ingress, egress) per switch, receiver
                    path += [ports[h], ports[int(peer[h])]]  # type: ignore[list-item]
                pkey = partitions.carried_pkey(path[0], path[-1])
                seen[key] = None if pkey is None else partitions.enforce(path, pkey)
            drop = seen[key]
            if drop is None:
                continue
            at = snap.index(drop.port)
            end = _DROP_END[drop.counter]
            r.end[i], r.at[i] = end, at
            if end == XMIT_CONSTRAINT:
                cut[i] = hops.index(at)  # up to the egress port that keeps them
            elif end == CONSTRAINT:
                cut[i] = [int(peer[h]) for h in hops].index(at) + 1
            if drop.trap is not None and self.on_trap is not None:
                self.on_trap(drop.port, drop.trap, ports[hops[0]], drop)
        if not cut:
            return r
        nhops = np.diff(r.ptr)
        keep = np.ones(len(r.hops), dtype=bool)
        for i, k in cut.items():
            keep[r.ptr[i] + k : r.ptr[i + 1]] = False
            nhops[i] = k
        ptr = np.concatenate(([0], np.cumsum(nhops)))
        return Routes(ptr, r.hops[keep], r.end, r.at, r.mtu)

    def _index_routes(self) -> None:
        """The incidences the rates and counters need, from the routes: by flow, the
        links each flow's packets take (its hops, then the port that discards them, which
        takes them at its rate); by port, the flows crossing it (scipy's sparse matrix
        build does the grouping, a counting sort)."""
        r, snap = self._routes, self._snapshot()
        assert r is not None
        nflows = len(r.end)
        nhops = np.diff(r.ptr)
        disc = np.isin(r.end, _HELD)
        if disc.any():
            cnt = nhops + disc
            ptr = np.concatenate(([0], np.cumsum(cnt)))
            links = np.empty(int(ptr[-1]), dtype=np.int64)
            is_hop = np.ones(len(links), dtype=bool)
            is_hop[ptr[1:][disc] - 1] = False
            links[is_hop] = r.hops
            links[~is_hop] = r.at[disc]
        else:
            ptr, links = r.ptr, r.hops
            is_hop = np.ones(len(links), dtype=bool)
        owner = np.repeat(np.arange(nflows), np.diff(ptr))
        # rows: ports; columns: flows; 1 where the flow's packets leave by the port (0
        # at a port that discards them); a flow crossing a port twice (a loop) sums
        by_port = csr_matrix(
            (is_hop.astype(np.int64), (links, owner)), shape=(snap.nports, max(nflows, 1))
        )
        self._by_port = by_port
        self._con = (ptr, links, by_port.indptr, by_port.indices)
        used = np.flatnonzero(np.diff(by_port.indptr))
        self._seg_start = by_port.indptr[used]
        self._seg_port = used
        self._seg_peer = snap.peer[used]
        self._weight = (r.mtu + WIRE_OVERHEAD_BYTES) / r.mtu

    def _rates(self) -> None:
        f, snap, r = self._f, self._snapshot(), self._routes
        n = f.n
        active = f.state[:n] == RUNNING
        if r is None or n == 0:
            self._wait_ports = np.zeros(0, dtype=np.int64)
            self._rates_stale = False
            return
        flow_ptr, links, link_ptr, link_flows = self._con
        f.rate[:n] = maxmin(
            flow_ptr, links, link_ptr, link_flows, snap.capacity, self._weight, f.limit[:n], active
        )
        # offered demand on each port (wire bytes/s) against what it can send
        src = f.src[:n]
        first = snap.capacity[src]
        offer = np.where(active, np.minimum(f.limit[:n] * self._weight, first), 0.0)
        # a sender offers at most what its own link carries, shared by its flows
        sent = np.bincount(src, weights=offer, minlength=snap.nports)
        with np.errstate(divide="ignore", invalid="ignore"):
            scale = np.where(sent > snap.capacity, snap.capacity / sent, 1.0)
        offer = offer * scale[src]
        demand = self._by_port @ offer
        excess = demand - snap.capacity
        over = np.flatnonzero(excess > snap.capacity * 1e-9)
        self._wait_ports, self._wait_excess = over, excess[over]
        self._rates_stale = False

    # --- time -------------------------------------------------------------------------

    def _next_end(self, run: np.ndarray) -> tuple[np.ndarray, float]:
        """The running flows that end first (their last byte delivered) and when."""
        f, r = self._f, self._routes
        if r is None or len(run) == 0:
            return run[:0], np.inf
        fin = run[(f.size[run] >= 0) & (r.end[run] == DELIVERED) & (f.rate[run] > 0)]
        if len(fin) == 0:
            return fin, np.inf
        left = (f.size[fin] - f.delivered[fin]) - f.frac[fin]
        t = left / f.rate[fin]
        when = float(t.min())
        return fin[t <= when * (1 + 1e-12)], max(when, 0.0)

    def _step(self, run: np.ndarray, dt: float, ends: np.ndarray | None) -> None:
        """``dt`` seconds of the running flows at their rates; ``ends`` finish."""
        f, r = self._f, self._routes
        if r is not None and len(run):
            # every flow running (the common case): slices instead of gathers
            sel = slice(0, f.n) if len(run) == f.n else run
            x = f.rate[sel] * dt + f.frac[sel]
            got = np.floor(x)
            f.frac[sel] = x - got
            b = got.astype(np.int64)
            if ends is not None and len(ends):
                pos = np.searchsorted(run, ends)
                b[pos] = f.size[ends] - f.delivered[ends]
            to_dst = r.end[sel] == DELIVERED
            if to_dst.all():
                pk, wd = self._stream(f.delivered, sel, b, r.mtu[sel], f.size[sel])
            else:
                pk = np.zeros(len(run), dtype=np.int64)
                wd = np.zeros(len(run), dtype=np.int64)
                d, lo = run[to_dst], run[~to_dst]
                pk[to_dst], wd[to_dst] = self._stream(
                    f.delivered, d, b[to_dst], r.mtu[d], f.size[d]
                )
                # dropped packets: a stream that never ends
                pk[~to_dst], wd[~to_dst] = self._stream(f.lost, lo, b[~to_dst], r.mtu[lo], None)
            self._count(run, pk, wd)
        # PortXmitWait: demand beyond capacity, in ticks, fractions carried
        if len(self._wait_ports):
            w = self._wait_ports
            x = self._wait_excess * dt / WAIT_TICK_BYTES + self._wait_frac[w]
            ticks = np.floor(x)
            self._wait_frac[w] = x - ticks
            self._tot[_XW, w] += ticks.astype(np.int64)

    def _stream(self, pos, sel, b, mtu, size):
        """Advance the byte positions ``pos[sel]`` by ``b``: the packets and data words
        that took, whole packets of ``mtu`` and, for a flow reaching its ``size``, the
        last one with the rest.  Flows reaching their size are done."""
        old = pos[sel].copy()  # (a slice would be a view of what changes below)
        new = old + b
        if size is None:
            full = new // mtu - old // mtu
            pos[sel] = new
            return full, full * (mtu // 4 + HEADER_WORDS)
        finite = size >= 0
        np.minimum(new, size, where=finite, out=new)
        pos[sel] = new
        full = new // mtu - old // mtu
        wd = full * (mtu // 4 + HEADER_WORDS)
        done = finite & (new == size)
        if done.any():
            idx = np.flatnonzero(done)
            rest = size[idx] % mtu[idx]
            tail = rest > 0
            full[idx[tail]] += 1
            wd[idx[tail]] += -(-rest[tail] // 4) + HEADER_WORDS
            ids = np.arange(self._f.n)[sel][idx] if isinstance(sel, slice) else sel[idx]
            self._f.state[ids] = DONE
            self._rates_stale = True
        return full, wd

    def _count(self, run: np.ndarray, pk: np.ndarray, wd: np.ndarray) -> None:
        """Add each running flow's packets and words to the ports it crosses."""
        f, r = self._f, self._routes
        assert r is not None
        tot, m = self._tot, self._by_port
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
            sp, pe = self._seg_port, self._seg_peer
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
            snap = self._snapshot()
            for at, n in zip(r.at[run[sel]].tolist(), pk[sel].tolist(), strict=True):
                port = snap.ports[at]
                assert port is not None
                partitions.count(partitions.Drop(port, None, None, 0), n)

    def _settle(self, port: SimPort) -> None:
        """Put what traffic counted on ``port`` into its Counters (called by flush)."""
        if not self._f.n:  # no flow ever: nothing counted (every port's read comes here)
            return
        i = int(self._base[port.node.index]) + port.num
        now, was = self._tot[:, i], self._applied[:, i]
        if (now == was).all():
            return
        c = port.counters
        for k, names in enumerate(_COUNTERS):
            d = int(now[k] - was[k])
            if d:
                for name in names:
                    c.add(name, d)
        self._applied[:, i] = now
