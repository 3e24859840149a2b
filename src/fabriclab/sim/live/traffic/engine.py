"""The traffic engine: data flows between end ports of the running fabric that move the
port counters as real traffic would.

A flow sends from one CA port to another, routed hop by hop over the forwarding tables
(:mod:`...fabric.datapaths`), as fast as its max-min fair share allows (:mod:`.maxmin`) or at a rate
of its own, for a number of bytes or until stopped.  :meth:`TrafficEngine.advance`
brings every counter up to the clock's time; under a :class:`~..clock.VirtualClock`
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
- Partitions: each flow's packets carry a P_Key (:func:`...fabric.partitions.carried_pkey`) and
  :func:`...fabric.partitions.enforce` walks them along their path: a switch port enforcing
  inbound discards them (PortRcvConstraintErrors), one enforcing outbound does not
  send them (PortXmitConstraintErrors), else the receiving CA takes them off the wire
  (its PortRcvData/PortRcvPkts count them: the P_Key check is a transport-layer check
  of the BTH, IBA Vol. 1, 9.6.1.1) and discards them, counting P_KeyViolations and
  sending trap 257 (through ``on_trap``; a switch port whose node supports it, trap
  259).  One trap per flow each time it is routed (a real CA repeats it until the SM
  represses it; OpenSM only logs it).  The tables are those the SM wrote; a P_Key
  table write moves the fabric's generation, so flows are routed and checked anew.
- A flow whose packets go nowhere (any of the drops above, a link down on its way) is
  ``retrying``, as a reliable-connection queue pair whose packets are not acknowledged:
  it resends one packet at each local ACK timeout, 4.096 µs x 2^timeout, counted where
  the packets above are, and after its retry count of resends ends ``failed`` with the
  reason; a route that comes back first makes it ``running`` again (:mod:`.retry`).
  Defaults: NCCL's, timeout 20 and retry count 7 (failed after 8 x 4.29 s).

When the fabric's generation number moves (a forwarding-table write, a port change:
:class:`~...fabric.state.Generation`), the flows through the switches and ports that
changed are routed again, the others keep their routes (all of them after a change
of many places, or on :meth:`TrafficEngine.reroute`).  Counters reach the ports'
:class:`~.counters.Counters` when they are read (the port's ``flush``), so an update of
the whole fabric is a few numpy passes.  One engine per fabric, used from one thread.

This module is the engine: its API and its time steps.  The flow table is :mod:`.flows`,
routes and partition checks :mod:`.routes`, rates :mod:`.rates`, the counting :mod:`.counters`,
flows with nowhere to go :mod:`.retry`, the flows a listing picks and sums :mod:`.query`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from ....errors import InputError
from ...fabric.datapaths import DELIVERED, Routes, Snapshot
from ...fabric.state import SimFabric, SimPort
from ..clock import Clock
from . import query, retry
from .attributes import check as _check
from .attributes import qp_attributes
from .counters import TrafficCounters
from .flows import LIVE, RUNNING, STOPPED, Flow, FlowTable
from .rates import set_rates
from .routes import Crossings, OnTrap, route_flows, same, splice, touching

PATCH_MAX = 64  # switches and ports changed beyond which every flow is routed again


class TrafficEngine:
    """The flows of one fabric and the counters they move (see the module).  ``on_trap(port,
    number, src, drop)``, when set, sends the trap a partition drop raises from ``port`` to
    the subnet manager (``src``: the sending port, ``drop``: the :class:`...fabric.partitions.Drop`)."""

    def __init__(self, sim: SimFabric, clock: Clock):
        self.sim = sim
        self.clock = clock
        self._f = FlowTable()
        self._counts = TrafficCounters(sim, self._f)
        self._t = clock.now()
        self.on_trap: OnTrap | None = None
        self._snap: Snapshot | None = None
        self._routes: Routes | None = None
        self._x: Crossings | None = None  # the routes' incidences
        self._routed = 0  # flows [0, _routed) have routes
        self._reroute = False  # route every flow again at the next chance
        self.routings = 0  # flows routed, all told (each time a flow is routed again)
        self._rates_stale = True
        self._wait_ports = np.zeros(0, dtype=np.int64)  # ports offered more than they send
        self._wait_excess = np.zeros(0)  # and by how much (wire bytes/s)
        for p in (p for n in sim.nodes for p in n.ports if p is not None):
            p.traffic = self._counts.settle

    # --- the API ---------------------------------------------------------------------

    def add(
        self,
        src: SimPort,
        dst: SimPort,
        *,
        bytes: int | None = None,
        rate: float | None = None,
        **qp: int,
    ) -> int:
        """Start a flow from CA port ``src`` to CA port ``dst`` now; its id.
        ``bytes``: it ends when that many are delivered; ``rate``: bytes per second at
        most (else as fast as max-min fairness allows); ``timeout`` (0-31) and
        ``retry_count`` (0-7): its queue pair's, when its packets go nowhere (NCCL's
        20 and 7 by default)."""
        return self.add_many([(src, dst)], bytes=bytes, rate=rate, **qp)[0]

    def add_many(
        self,
        pairs: Iterable[tuple[SimPort, SimPort]],
        *,
        bytes: int | None = None,
        rate: float | None = None,
        **qp: int,
    ) -> range:
        """Start a flow for each (src, dst) pair now, all with the same ``bytes``,
        ``rate``, ``timeout`` and ``retry_count`` (see :meth:`add`); their ids,
        consecutive."""
        src, dst = [], []
        for s, d in pairs:
            src.append(self._index(s, "from"))
            dst.append(self._index(d, "to"))
        return self._add(
            np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64), bytes, rate, qp
        )

    def add_each(
        self,
        pairs: Sequence[tuple[SimPort, SimPort]],
        sizes: Sequence[int | None],
        rates: Sequence[float | None],
        timeouts: Sequence[int] | None = None,
        retry_counts: Sequence[int] | None = None,
    ) -> range:
        """Start a flow for each (src, dst) pair now, each with its own ``bytes``,
        ``rate`` (None: without one), ``timeout`` and ``retry_count`` (default NCCL's);
        their ids, consecutive.  One routing pass for them all (a journal's flows,
        :func:`.commands.restore_flows`)."""
        src = np.array([self._index(s, "from") for s, _ in pairs], dtype=np.int64)
        dst = np.array([self._index(d, "to") for _, d in pairs], dtype=np.int64)
        size = np.array([-1 if b is None else b for b in sizes], dtype=np.int64)
        limit = np.array([np.inf if r is None else r for r in rates], dtype=np.float64)
        if not len(size) == len(limit) == len(src):
            raise InputError("one size and one rate for each flow", "traffic")
        if ((size < 1) & (size != -1)).any() or not ((limit > 0) & (limit <= np.inf)).all():
            raise InputError("bytes must be at least 1 and rates positive", "traffic")
        qp = {
            k: np.array(v, dtype=np.int64)
            for k, v in (("timeout", timeouts), ("retry_count", retry_counts))
            if v is not None
        }
        return self._add(src, dst, size, limit, qp)

    def all_to_all(
        self,
        ports: Sequence[SimPort],
        *,
        bytes: int | None = None,
        rate: float | None = None,
        **qp: int,
    ) -> range:
        """A flow from every port of ``ports`` to every other one; their ids."""
        idx = np.array([self._index(p, "all-to-all") for p in ports], dtype=np.int64)
        k = len(idx)
        a, b = np.divmod(np.arange(k * k, dtype=np.int64), k)
        keep = a != b
        return self._add(idx[a[keep]], idx[b[keep]], bytes, rate, qp)

    def ring(
        self,
        ports: Sequence[SimPort],
        *,
        bytes: int | None = None,
        rate: float | None = None,
        **qp: int,
    ) -> range:
        """A flow from each port of ``ports`` to the next, the last to the first."""
        idx = np.array([self._index(p, "ring") for p in ports], dtype=np.int64)
        if len(idx) < 2:
            raise InputError("a ring needs at least two ports", "traffic")
        return self._add(idx, np.roll(idx, -1), bytes, rate, qp)

    def stop(self, id: int | None = None) -> list[int]:
        """Stop flow ``id`` now (every running or retrying flow when None); the ids of
        the flows it stopped (none for a flow that had already ended)."""
        self.advance()
        f = self._f
        if id is None:
            idx = np.flatnonzero(np.isin(f.state[: f.n], LIVE))
        else:
            i = self._flow_index(id)
            idx = np.array([i] if f.state[i] in LIVE else [], dtype=np.int64)
        f.state[idx] = STOPPED
        f.rate[idx] = 0.0
        self._rates_stale = True
        return (idx + 1).tolist()

    def flows(self, ids: Iterable[int] | None = None) -> list[Flow]:
        """The flows (every one ever added, or those of ``ids``), as they are after the
        last :meth:`advance`."""
        which = range(self._f.n) if ids is None else [self._flow_index(i) for i in ids]
        return self.flows_at(which)

    def flows_at(self, which: Iterable[int]) -> list[Flow]:
        """The flows at table indices ``which`` (flow id - 1)."""
        return query.flows_at(self._f, self._snapshot(), self._routes, self._routed, which)

    def select(
        self,
        states: Iterable[str] | None = None,
        src: Iterable[SimPort] | None = None,
        dst: Iterable[SimPort] | None = None,
        ids: Iterable[int] | None = None,
    ) -> np.ndarray:
        """The table indices (flow id - 1) of the flows in one of ``states``, from one
        of ports ``src``, to one of ports ``dst`` and among ``ids`` (each None: any)."""
        snap = self._snapshot()
        return query.select(
            self._f,
            states,
            None if src is None else [snap.index(p) for p in src],
            None if dst is None else [snap.index(p) for p in dst],
            ids,
        )

    def summary(self, which: np.ndarray | None = None) -> dict:
        """Flows by state, bytes sent and delivered and the rate of all of them (or of
        table indices ``which``) together (see :func:`.query.summary`)."""
        return query.summary(self._f, which)

    def live(self) -> int:
        """How many flows are running or retrying."""
        return int(np.isin(self._f.state[: self._f.n], LIVE).sum())

    def snapshot(self) -> Snapshot:
        """The fabric as routing sees it now, kept from call to call and brought up to
        date by what changed since (:meth:`_changed`).  Read it, never change it."""
        gen = self.sim.generation
        if self._reroute or self._snap is None or self._snap.generation != gen.value:
            self._changed(gen)
        return self._snapshot()

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
        self._retry(now)
        self._t = now
        if self._rates_stale:
            self._rates()

    def settle_all(self) -> None:
        """Put the traffic counted so far into every port's Counters (reads do it for
        the port they read)."""
        self._counts.settle_all(self._snapshot())

    def counted(self) -> bool:
        """Whether any flow was ever added (else traffic has counted nothing)."""
        return bool(self._f.n)

    def unsettled(self):
        return self._counts.unsettled()  # (see TrafficCounters.unsettled)

    # --- flows ------------------------------------------------------------------------

    def _index(self, p: SimPort, what: str) -> int:
        if not isinstance(p, SimPort) or p.node.is_switch or p.num == 0:
            raise InputError(f"{p!r} is not a CA port", f"traffic {what}")
        if self.sim.nodes[p.node.index] is not p.node:
            raise InputError(f"{p.ref()} is not a port of this fabric", f"traffic {what}")
        return int(self._counts.base[p.node.index]) + p.num

    def _flow_index(self, id: int) -> int:
        if not isinstance(id, int) or not 1 <= id <= self._f.n:
            raise InputError(f"no flow {id!r} (flows are 1..{self._f.n})", "traffic")
        return id - 1

    def _add(
        self,
        src: np.ndarray,
        dst: np.ndarray,
        size: int | np.ndarray | None,
        rate: float | np.ndarray | None,
        qp: dict,
    ):
        """Start flows ``src[i]`` -> ``dst[i]``; ``size``, ``rate`` and ``qp``'s values
        the same for all, or (arrays, :meth:`add_each`) one of each per flow, checked."""
        if not isinstance(size, np.ndarray):
            _check(size, rate)
            size = -1 if size is None else int(size)
            rate = np.inf if rate is None else float(rate)
        timeout, retries = qp_attributes(qp)
        same = src == dst
        if same.any():
            p = self._snapshot().ports[int(src[np.argmax(same)])]
            raise InputError(f"a flow from {p.ref()} to itself", "traffic")  # type: ignore[union-attr]
        self.advance()  # what ran so far ran without the new flows
        f = self._f
        s = f.extend(len(src))
        f.src[s], f.dst[s] = src, dst
        f.size[s], f.limit[s] = size, rate
        f.timeout[s], f.retries[s] = timeout, retries
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
        snap = self.snapshot()  # what changed since taken in
        if self._routed < f.n:
            lo, hi = self._routed, f.n
            self.routings += hi - lo
            new = route_flows(snap, f.src[lo:hi], f.dst[lo:hi], self.on_trap)
            parts = [self._routes, new] if self._routes is not None else [new]
            self._routes = Routes.concat(parts) if len(parts) > 1 else new
            self._routed = f.n
            self._x = Crossings(snap, self._routes)
            self._rates_stale = True
            retry.classify(f, self._routes, self._t)
            self._retry(self._t)  # the first send of a flow that starts retrying
        if self._rates_stale:
            self._rates()

    def _changed(self, gen) -> None:
        """The fabric changed: the snapshot takes in the switches and ports that did, and
        only the flows through them are routed again (a change of unknown place, or of
        more than :data:`PATCH_MAX` places: a fresh snapshot, every flow routed)."""
        everything, switches, ports = gen.take()
        snap, r, n, f = self._snap, self._routes, self._routed, self._f
        at = None
        if snap is not None and not (self._reroute or everything):
            if len(switches) + len(ports) <= PATCH_MAX:
                at = snap.update(gen.value, switches, ports)
        if at is None or r is None or snap is None:
            if at is None:
                self._snap = Snapshot(self.sim)
            self._routes, self._routed, self._reroute = None, 0, False
            return
        idx = touching(snap, r, f.src[:n], f.dst[:n], at)
        if not len(idx):
            return
        self.routings += len(idx)
        new = route_flows(snap, f.src[idx], f.dst[idx], self.on_trap)
        if same(r, idx, new):  # (an entry no flow follows; a port's rate may have moved)
            self._rates_stale |= bool(ports)
            return
        self._routes = splice(r, idx, new)
        self._x = Crossings(snap, self._routes)
        self._rates_stale = True
        retry.classify(f, self._routes, self._t)
        self._retry(self._t)

    def _rates(self) -> None:
        f = self._f
        if self._routes is None or f.n == 0:
            self._wait_ports = np.zeros(0, dtype=np.int64)
            self._rates_stale = False
            return
        assert self._x is not None
        self._wait_ports, self._wait_excess = set_rates(f, self._snapshot(), self._x)
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

    def _retry(self, t: float) -> None:
        """Count the sends of retrying flows due by time ``t``; fail those whose retry
        count is spent."""
        f, r = self._f, self._routes
        idx, new, spent = retry.due(f, t)
        if r is None or not len(idx):
            return
        go = new > 0
        if go.any():
            send = idx[go]
            pk, wd = retry.sends(f, send, new[go], r.mtu[send])
            assert self._x is not None
            self._counts.count(self._snapshot(), r, self._x, send, pk, wd)
        if spent.any():
            retry.fail(f, self._snapshot(), r, idx[spent])

    def _step(self, run: np.ndarray, dt: float, ends: np.ndarray | None) -> None:
        """``dt`` seconds of the running flows at their rates; ``ends`` finish."""
        r = self._routes
        if r is not None and len(run):
            assert self._x is not None
            if self._counts.move(self._snapshot(), r, self._x, run, dt, ends):
                self._rates_stale = True
        if len(self._wait_ports):
            self._counts.wait(self._wait_ports, self._wait_excess, dt)
