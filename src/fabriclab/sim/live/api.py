"""The live fabric: faults, scenarios, traffic and time on a running fabric server, as a
Python API (``fabriclab fault|events|scenario|traffic|clock`` reach it through
:mod:`..run.admin`; a web API can wrap the same calls).

Every change shows at once through PortInfo and trap 128 (:mod:`..fabric.links`), the MAD path
(:mod:`..wire.dispatch`'s drops), the counters and the event log (:mod:`.events`), and is
written to the journal (:mod:`.journal`) so that ``up --resume`` brings it back.  Time
is the fabric's clock (:mod:`.clock`): wall time, or a virtual clock that moves only
when :meth:`LiveFabric.advance` is called, which makes every counter and event exact.

Beside the API: scenario steps run in :mod:`.scenario_run`, the journal's document is
made and brought back in :mod:`.journal_doc`; the admin socket's requests are answered
through this API by :mod:`.admin_requests`.
"""

from __future__ import annotations

import time
from pathlib import Path

from ...errors import InputError, Problem
from ...model.cluster import Cluster
from ..fabric.links import BY_SM
from ..fabric.state import SimPort
from . import events as ev_mod
from . import journal, journal_doc, scenario_run, watch
from .clock import VirtualClock
from .events_memory import MemoryLog
from .faults.book import FaultBook
from .faults.options import KINDS, check_keys, check_options
from .faults.targets import LINK, SWITCH, TRAY, Resolver, Target, link_name, port_name
from .scenario import Scenario
from .traffic import commands as traffic_commands

_BUSY_WAKE = 0.5  # seconds between steps while errors or traffic run under wall time
_JOURNAL_EVERY = 2.0  # seconds between periodic journal saves (counters moved by MADs)
# ... but while MADs keep arriving, up to this: a whole save walks every port a sweep or
# a discovery crossed, and would hold up the tools sending them
_JOURNAL_BUSY_EVERY = 30.0
# What catching up with wall time may spend (seconds) before the rest due is carried out
# at once, coalesced (a FELL_BEHIND event says so): the MADs and the admin socket wait
# for no longer than this.
TICK_BUDGET = 0.02


class LiveFabric:
    """Faults, scenarios, traffic and time on ``server`` (a :class:`FabricServer`) of
    ``cluster``.  With ``state`` and ``name``, events and the journal are kept in the
    state directory; ``traffic`` is the traffic engine, when there is one."""

    def __init__(
        self,
        server,
        cluster: Cluster,
        clock,
        *,
        state: Path | None = None,
        name: str = "",
        traffic=None,
        meta: dict | None = None,
    ):
        self.server = server
        self.net_faults = None  # the other networks' faults, when up --networks built them
        self._net_resumed: dict | None = None  # the journal's, until they are
        self._mads_seen = 0  # the server's MAD count at the last periodic save's check
        self.name = name
        self.sim = server.sim
        self.links = server.links
        self.drops = server.dispatch.drops
        self.clock = clock
        self.resolver = Resolver(cluster, self.sim)
        self.events = (
            ev_mod.EventLog(ev_mod.events_path(state, name), clock)
            if state is not None
            else MemoryLog(clock)
        )
        self.journal_path = journal.journal_path(state, name) if state is not None else None
        self.writer = journal.Writer(self.journal_path, journal.Ledger(self.sim, traffic))
        self.ledger = self.writer.ledger
        self.book = FaultBook(self)
        self.scenarios: list[Scenario] = []
        self.traffic = traffic
        self.meta = meta or {}  # what the journal must match to be resumed (spec, trays)
        self._last = clock.now()
        self._wake_at = 0.0
        self.links.watch(self._link_changed)

    def _link_changed(self, p: SimPort, up: bool, why: str) -> None:
        """A link went down or came up: logged here when an SM did it (a PortInfo Set,
        e.g. ``ibportstate``); the fault book logs what faults do."""
        if why != BY_SM:
            return
        name = link_name(p)
        if up:
            desc = f"Link is up: {name} (by PortInfo Set (SM): {port_name(p)} enabled)"
            self.event(ev_mod.LINK_UP, name, desc)
        else:
            desc = f"Link went down: {name} (by PortInfo Set (SM): {port_name(p)} disabled)"
            self.event(ev_mod.LINK_DOWN, name, desc)

    # --- plumbing the fault book uses -------------------------------------------------

    def event(self, kind, object_name: str, description: str, counter: int = 0) -> dict:
        """Write an event (standing for ``counter`` happenings, if more than one)."""
        return self.events.emit(kind, object_name, description, counter)

    def resolve(self, text: str, kind: str = "down") -> Target:
        """The target ``text`` names, for a fault of ``kind``."""
        return self.resolver.resolve(text, port0=(kind == "drop"))

    # --- faults -----------------------------------------------------------------------

    def fault(self, kind: str, target: str, **options) -> dict:
        """Inject a fault: ``down``, ``flap`` (period, count), ``degrade`` (width,
        speed), ``errors`` (ber, down_after) or ``drop`` (rate, seed) on ``target``; the
        fault as :meth:`faults` lists it."""
        if kind == "up":
            check_keys(kind, options)
            return {"cleared": self.up(target)}
        if kind not in KINDS:
            raise InputError([Problem(kind, f"unknown fault (known: {', '.join(KINDS)}, up)")])
        t = self.resolve(target, kind)
        opts = check_options(kind, t, options, wall=not self.clock.virtual)
        self.catch_up()
        f = self.book.add(kind, t, opts)
        if kind == "flap":
            self.book.run_due(self.clock.now())  # its first transition is now
        self.save()
        return f.to_json()

    def up(self, target: str) -> list[int]:
        """Bring ``target``'s links back: clear the down and flap faults holding them
        (a link of a switch or tray that is down comes back with the switch or tray);
        the ids cleared."""
        t = self.resolve(target)
        mine = {id(q) for p in t.ports for q in (p, p.peer) if q is not None}
        found = []
        for f in list(self.book.faults.values()):
            if f.kind not in ("down", "flap"):
                continue
            other = self.book.targets[f.id]
            theirs = {id(q) for p in other.ports for q in (p, p.peer) if q is not None}
            if not mine & theirs:
                continue
            if t.kind == LINK and other.kind in (SWITCH, TRAY):
                raise InputError(
                    [
                        Problem(
                            target,
                            f"held down by fault {f.id} ({other.kind} {other.text} down): "
                            f"'fault up {other.text}' or 'fault clear {f.id}'",
                        )
                    ]
                )
            found.append(f)
        if not found:
            raise InputError([Problem(target, "no fault holds it down")])
        self.catch_up()
        for f in found:
            self.book.clear(f)
        self.save()
        return [f.id for f in found]

    def clear(self, fault_id: int | None = None) -> list[int]:
        """Clear fault ``fault_id``, or every fault; the ids cleared."""
        book = self.book
        if fault_id is None:
            todo = sorted(book.faults)
        elif fault_id in book.faults:
            todo = [fault_id]
        else:
            raise InputError([Problem(str(fault_id), "no such fault (see 'fault list')")])
        self.catch_up()
        for i in todo:
            book.clear(book.faults[i])
        self.save()
        return todo

    def clear_target(self, target: str) -> list[int]:
        """Clear every fault on ``target`` (a scenario's ``clear TARGET``)."""
        t = self.resolve(target, "drop")
        mine = {id(q) for p in t.ports for q in (p, p.peer) if q is not None}
        ids = [
            f.id
            for f in self.book.faults.values()
            if mine
            & {id(q) for p in self.book.targets[f.id].ports for q in (p, p.peer) if q is not None}
        ]
        if not ids:
            raise InputError([Problem(target, "has no fault to clear")])
        for i in ids:
            self.clear(i)
        return ids

    def faults(self) -> list[dict]:
        """The faults in force."""
        return [f.to_json() for f in self.book.faults.values()]

    # --- time -------------------------------------------------------------------------

    def _next_due(self, horizon: float | None = None) -> float | None:
        due = [
            self.book.next_due(horizon),
            self._step_due(),
            self.net_faults and self.net_faults.next_due(),
        ]
        known = [d for d in due if d is not None]
        return min(known) if known else None

    def _step_due(self) -> float | None:
        """When a scenario's next step is due."""
        known = [d for s in self.scenarios if (d := s.next_due()) is not None]
        return min(known) if known else None

    def _horizon(self, end: float) -> float:
        """How far flaps may run before they are coalesced: to ``end``, or to the next
        scenario step (which may change them)."""
        step = self._step_due()
        return end if step is None else min(step, end)

    def _busy(self) -> bool:
        return any(f.kind == "errors" for f in self.book.faults.values()) or bool(
            self.traffic is not None and self.traffic.live()
        )

    def _accrue(self, upto: float) -> None:
        """Move errors and traffic on to clock time ``upto``."""
        dt = upto - self._last
        if dt > 0:
            if self.traffic is not None:
                self.traffic.advance()
            self.book.accrue(dt)
        self._last = max(self._last, upto)

    def _run_due(self, now: float, horizon: float | None = None) -> None:
        """Carry out the flap transitions and scenario steps due by ``now`` (a flap's
        long run up to ``horizon`` waits for it, and is coalesced)."""
        self.book.run_due(now, horizon)
        self.scenarios = scenario_run.run_due(self, self.scenarios, now)
        if self.net_faults is not None:
            self.net_faults.run_due(now)

    def catch_up(self) -> None:
        """Bring errors, traffic, flaps and scenarios up to the clock's now (wall time:
        called from the server's loop; a virtual clock: nothing moves by itself).  Under
        wall time at most :data:`TICK_BUDGET` is spent on it: what is still due then is
        carried out at once, coalesced (:meth:`_fell_behind`)."""
        now = self.clock.now()
        t0 = time.monotonic()
        while True:
            horizon = self._horizon(now)
            due = self._next_due(horizon)
            if due is None or due > now:
                break
            if not self.clock.virtual and time.monotonic() - t0 > TICK_BUDGET:
                self._fell_behind(due, now)
                break
            self._accrue(due)
            self._run_due(due, horizon)
        self._accrue(now)

    def _fell_behind(self, due: float, now: float) -> None:
        """The loop could not keep up: everything due from ``due`` to ``now`` at once,
        each flap's changes one run, and one event saying how much was coalesced."""
        changes = self.book.pending(now)
        self._accrue(now)
        self.book.run_due(now, now, coalesce_after=1)
        self.scenarios = scenario_run.run_due(self, self.scenarios, now)
        self.event(
            ev_mod.FELL_BEHIND,
            self.name or "fabric",
            f"The fabric's loop fell {now - due:.3f} s behind the clock: {changes} flap "
            f"changes due meanwhile were carried out at once (a wake-up may spend "
            f"{TICK_BUDGET * 1000:g} ms catching up)",
            counter=changes,
        )

    def wake(self) -> float:
        """The server loop's hook (called after each of its wake-ups, so after every
        burst of MADs): catch up when it is time to; seconds until it should be."""
        real = time.monotonic()  # (a virtual clock does not move by itself)
        if real < self._wake_at:
            return self._wake_at - real
        wait = _JOURNAL_EVERY
        if not self.clock.virtual:
            self.catch_up()
            due = self._next_due()
            if due is not None:
                wait = min(wait, max(0.0, due - self.clock.now()))
            if self._busy():
                wait = min(wait, _BUSY_WAKE)
        self.events.flush()  # coalesced events whose window is over
        self._periodic_save()
        self._wake_at = time.monotonic() + wait
        return wait

    def _changed(self) -> None:
        """Something was scheduled: the loop's next wake-up is worked out anew."""
        self._wake_at = 0.0

    def advance(self, seconds: float) -> float:
        """Move a virtual clock forward by ``seconds``, carrying out on the way every
        flap, scenario step, error and byte of traffic due; the new time."""
        clock = self.clock
        if not isinstance(clock, VirtualClock):
            raise InputError(
                [Problem("clock", "the fabric runs on wall time (start it with --virtual-clock)")]
            )
        if not 0 <= seconds <= 10 * 365 * 86400:
            raise InputError([Problem("SECONDS", f"{seconds!r}: want 0 to 10 years")])
        end = clock.now() + seconds
        while True:
            horizon = self._horizon(end)
            due = self._next_due(horizon)
            if due is None or due > end:
                clock.advance(max(0.0, end - clock.now()))
                self._accrue(end)
                break
            clock.advance(max(0.0, due - clock.now()))
            self._accrue(due)
            self._run_due(due, horizon)
        self.events.flush()
        self.writer.flows_saved = False  # the flows moved on with the clock
        self.save()
        return clock.now()

    # --- scenarios --------------------------------------------------------------------

    def scenario(self, text: str, source: str) -> dict:
        """Check the scenario in ``text`` (from ``source``) whole, then start it; a
        problem is an error naming the line, and nothing is changed."""
        sc = scenario_run.parse(self, text, source)
        sc.start = self.clock.now()
        self.catch_up()
        self.scenarios.append(sc)
        self._run_due(sc.start)
        self.save()
        return {
            "name": sc.name,
            "steps": len(sc.steps),
            "start": sc.start,
            "end": sc.start + sc.steps[-1].at,
            "virtual": self.clock.virtual,
        }

    def scenarios_running(self) -> list[dict]:
        """The scenarios still running."""
        return [s.to_json() for s in self.scenarios]

    # --- traffic ----------------------------------------------------------------------

    def check_traffic(self, args: list[str], options: dict) -> tuple:
        """A traffic command's words and options checked: (verb, ports, bytes, rate,
        queue pair attributes)."""
        if self.traffic is None:
            raise InputError([Problem("traffic", "this fabric has no traffic engine")])
        return traffic_commands.parse(self.resolver.cluster, self.sim, args, options)

    def traffic_request(self, verb: str, args: list[str], options: dict):
        """A traffic command: ``send FROM TO``, ``all-to-all SET``, ``ring SET`` (with
        ``bytes`` or ``rate``, ``timeout``, ``retry_count``), ``stop [ID]``, ``list``
        (filters); the flows it started or stopped, or the listing."""
        verb, ports, size, rate, qp = self.check_traffic([verb, *args], options)
        eng = self.traffic
        self.catch_up()
        eng.advance()  # routes as the fabric is now (an SM may have moved them)
        if verb == "list":
            return traffic_commands.listing(eng, ports)
        if verb == "stop":
            ids = eng.stop(ports)
        elif verb == "send":
            ids = [eng.add(ports[0], ports[1], bytes=size, rate=rate, **qp)]
        elif verb == "all-to-all":
            ids = list(eng.all_to_all(ports, bytes=size, rate=rate, **qp))
        else:
            ids = list(eng.ring(ports, bytes=size, rate=rate, **qp))
        self.writer.flows_saved = False
        self.save()
        return {"verb": verb, "ids": ids[:1000], "count": len(ids)}

    # --- the journal ------------------------------------------------------------------

    def snapshot(self, counters: bool = True, flows: bool = True) -> dict:
        """Everything ``--resume`` needs (``counters``, ``flows`` False: without them)."""
        doc = journal_doc.snapshot(
            self.meta,
            self.clock,
            self.book,
            self.scenarios,
            self.traffic,
            self.sim,
            counters,
            flows,
        )
        net = self.net_faults.state() if self.net_faults is not None else self._net_resumed
        return doc if net is None else {**doc, "net": net}

    def attach_net(self, faults) -> None:
        """The other networks' faults (``up --networks`` built them: :class:`..lan.faults.
        NetFaults`), with what a resumed journal had of them brought back."""
        if self._net_resumed is not None:
            faults.restore(self._net_resumed, "journal")
        self.net_faults, self._net_resumed = faults, None

    def save(self, whole: bool = False) -> None:
        """Write the journal now: a line with what changed, or (``whole``) the whole of
        it (:class:`.journal.Writer`)."""
        self._changed()  # every change is saved: the loop's next wake-up may be sooner
        self.writer.save(lambda flows: self.snapshot(counters=False, flows=flows), whole)

    def _periodic_save(self) -> None:
        mads = self.server.stats.mads
        busy, self._mads_seen = mads != self._mads_seen, mads
        if self.writer.due(_JOURNAL_BUSY_EVERY if busy else _JOURNAL_EVERY):
            self.save(whole=True)

    def restore(self, doc: dict, source: str = "journal") -> None:
        """Bring back a journal's state (``up --resume``; ``doc`` as
        :func:`.journal.load` checked it): counters, faults as they were (without
        counting, trapping or logging again what had already happened), scenarios where
        they were.  A fault or step a live request would refuse is refused (an
        InputError naming ``source`` and the field) and nothing is brought back."""
        self.scenarios = journal_doc.restore(
            doc,
            self.sim,
            self.book,
            self.resolve,
            self.traffic,
            lambda step: scenario_run.check_step(self, step),
            source,
        )
        self._net_resumed = doc.get("net")  # brought back once the networks are built
        self.ledger.forget()  # the ports' Counters are new
        self.writer.flows_saved = False
        self._last = self.clock.now()

    def close(self) -> None:
        """Save the journal one last time, close the event log, remove the watch files."""
        self.save(whole=True)
        self.events.close()
        if self.journal_path is not None:
            watch.remove(self.journal_path.parent, self.name)
