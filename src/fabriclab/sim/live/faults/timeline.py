"""Faults that play out as the clock moves: a flap's downs and ups, due at set times,
and an errors fault's bit errors (:mod:`.ber`), which cross counter thresholds and, after
``down_after`` link error recoveries, take the link down to train again.
"""

from __future__ import annotations

from collections.abc import Callable

from ...fabric.state import SimPort
from .. import events
from . import ber
from .fault import Fault
from .ports import PortFaults, end_key, link_ends
from .stack import Stack, ids
from .targets import Target, link_name, port_name

COALESCE_AFTER = 64  # a flap's changes due at once beyond which they are one run, one event


def _pending(f: Fault, t: float) -> int:
    """How many changes of flap ``f`` are due by clock time ``t`` (to its last)."""
    pr = f.progress
    if pr["next"] > t:
        return 0
    half = f.options["period"] / 2
    n = int((t - pr["next"]) / half + 1e-9) + 1
    left = 2 * (f.options["count"] - pr["flaps"]) - (1 if pr["down"] else 0)
    return max(0, min(n, left))


class Timeline:
    """The flaps and bit errors among the book's faults (``faults``, what each was
    resolved to, ``targets``, and the errors faults' ends, ``ends``), carried out on
    ``ports`` as the clock moves; what happens is told to ``event``."""

    def __init__(
        self,
        faults: dict[int, Fault],
        targets: dict[int, Target],
        ends: dict[int, dict[int, ber.EndState]],
        ports: PortFaults,
        event: Callable,
        stack: Stack,
    ):
        self.faults, self.targets, self.ends = faults, targets, ends
        self.ports, self.event, self.stack = ports, event, stack

    def next_due(self, horizon: float | None = None) -> float | None:
        """When a flap next changes a link (clock seconds), if one will; a flap with
        more than :data:`COALESCE_AFTER` changes due by ``horizon`` is due at ``horizon``
        (its run is coalesced there)."""
        due = [
            horizon
            if horizon is not None and _pending(f, horizon) > COALESCE_AFTER
            else f.progress["next"]
            for f in self.faults.values()
            if f.kind == "flap"
        ]
        return min(due) if due else None

    def pending(self, now: float) -> int:
        """How many flap changes are due by ``now``."""
        return sum(_pending(f, now) for f in self.faults.values() if f.kind == "flap")

    def run_due(
        self, now: float, horizon: float | None = None, coalesce_after: int = COALESCE_AFTER
    ) -> None:
        """Carry out the flap changes due by ``now``, in order; a flap with more than
        ``coalesce_after`` changes due by ``horizon`` (default ``now``) waits for it and
        is then carried out as one run (:meth:`_flap_run`)."""
        end = now if horizon is None else max(horizon, now)
        while True:
            due, runs = [], []
            for f in self.faults.values():
                if f.kind != "flap" or f.progress["next"] > now:
                    continue
                if _pending(f, end) > coalesce_after:
                    if now >= end:
                        runs.append(f)
                else:
                    due.append(f)
            for f in runs:
                self._flap_run(f, now)
            if not due:
                return
            f = min(due, key=lambda f: (f.progress["next"], f.id))
            self._flap_step(f)

    def _flap_run(self, f: Fault, now: float) -> None:
        """The changes of flap ``f`` due by ``now`` at once: the link ends as the last
        leaves it (a last down, or a last down and up, carried out, so the subnet
        manager hears of it), LinkDownedCounter counts every down, and one event says
        how many flaps the run held (its ``counter``)."""
        p = self.targets[f.id].ports[0]
        pr, n = f.progress, _pending(f, now)
        half, count = f.options["period"] / 2, f.options["count"]
        was_down, first = pr["down"], pr["flaps"] + 1
        ups = (n + 1) // 2 if was_down else n // 2
        downs = n - ups
        down = was_down if n % 2 == 0 else not was_down
        # carried out: the last change, or the last two when the link ends as it began
        real = [False] if not down else [True]
        if down == was_down:
            real = [not down, down]
        others = p.held - (1 if was_down else 0)  # other faults holding the link down
        extra = downs - real.count(True)
        if extra > 0 and not others:
            for q in link_ends(p):  # each down of an up link counts (IBA 16.1.3.5)
                q.counters.add("LinkDownedCounter", extra)
        for going_down in real:
            if going_down:
                self.ports.hold(p)
            else:
                self.ports.release(p)
        pr["down"], pr["flaps"] = down, pr["flaps"] + ups
        pr["next"] += n * half
        name = link_name(p)
        state = "down" if down else ("held down" if p.held else "up")
        self.event(
            events.LINK_FLAPPING,
            name,
            f"Link flapped {ups} times: {name} (flaps {first} to {pr['flaps']} of {count}, "
            f"{n} changes in {n * half:g} s coalesced; {state} now)",
            counter=ups,
        )
        if pr["flaps"] >= count:
            self.faults.pop(f.id, None)  # done: the link is as it was
            self.targets.pop(f.id, None)

    def _flap_step(self, f: Fault) -> None:
        p = self.targets[f.id].ports[0]
        ev = self.event
        pr = f.progress
        half = f.options["period"] / 2
        if not pr["down"]:
            pr["down"] = True
            if self.ports.hold(p):
                ev(
                    events.LINK_DOWN,
                    link_name(p),
                    f"Link went down: {link_name(p)} (flap {pr['flaps'] + 1} of {f.options['count']})",
                )
            pr["next"] += half
            return
        pr["down"] = False
        pr["flaps"] += 1
        if self.ports.release(p):
            ev(
                events.LINK_UP,
                link_name(p),
                f"Link is up: {link_name(p)} (flap {pr['flaps']} of {f.options['count']})",
            )
        elif p.held:
            ev(
                events.STILL_HELD,
                link_name(p),
                f"Link {link_name(p)} stays down: held by {ids(self.stack.holding(p))} "
                f"(flap {pr['flaps']} of {f.options['count']})",
            )
        if pr["flaps"] >= f.options["count"]:
            self.faults.pop(f.id, None)  # done: the link is as it was
            self.targets.pop(f.id, None)
        else:
            pr["next"] += half

    def accrue(self, seconds: float) -> bool:
        """``seconds`` of bit errors on every link with an ``errors`` fault, at the rate
        of the latest on each link (the others only keep count of the data received, to
        take over from there); whether a counter moved."""
        moved = False
        for f in list(self.faults.values()):
            if f.kind != "errors":
                continue
            p = self.targets[f.id].ports[0]
            ends = self.ends.setdefault(
                f.id, {end_key(q): ber.EndState.at(q) for q in link_ends(p)}
            )
            if self.stack.latest(p, "errors") is not f:
                for q in link_ends(p):
                    ber.step(q, ends[end_key(q)], 0.0, seconds)
                continue
            recov = 0
            for q in link_ends(p):
                end = ends[end_key(q)]
                before = dict(end.totals)
                added = ber.step(q, end, f.options["ber"], seconds)
                if added:
                    moved = True
                recov = max(recov, added.get("LinkErrorRecoveryCounter", 0))
                self._thresholds(q, before, end.totals)
            if recov:
                total = f.progress.get("recoveries", 0) + recov
                downs, f.progress["recoveries"] = divmod(total, f.options["down_after"])
                for _ in range(downs):
                    self._give_up(p)
        return moved

    def _thresholds(self, q: SimPort, before: dict, after: dict) -> None:
        for name, top in ber.THRESHOLDS.items():
            if before.get(name, 0) <= top < after.get(name, 0):
                self.event(
                    events.COUNTER_THRESHOLD,
                    port_name(q),
                    f"{name} counter threshold exceeded on {port_name(q)}. "
                    f"Threshold is {top}, received value is {after[name]}.",
                )

    def _give_up(self, p: SimPort) -> None:
        """Error recovery failed: the link goes down and trains again."""
        if not p.up:
            return
        ev = self.event
        self.ports.hold(p)
        ev(
            events.LINK_DOWN,
            link_name(p),
            f"Link went down: {link_name(p)} (error recovery failed)",
        )
        self.ports.release(p)
        ev(events.LINK_RETRAINED, link_name(p), f"Link {link_name(p)} retrained after errors")
