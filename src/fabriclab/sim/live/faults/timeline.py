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

    def next_due(self) -> float | None:
        """When a flap next changes a link (clock seconds), if one will."""
        due = [f.progress["next"] for f in self.faults.values() if f.kind == "flap"]
        return min(due) if due else None

    def run_due(self, now: float) -> None:
        """Carry out the flap transitions due by ``now``, in order."""
        while True:
            due = [
                f for f in self.faults.values() if f.kind == "flap" and f.progress["next"] <= now
            ]
            if not due:
                return
            f = min(due, key=lambda f: (f.progress["next"], f.id))
            self._flap_step(f)

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
