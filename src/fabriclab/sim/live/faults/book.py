"""Faults injected into a running fabric, and what each does to it while it lasts.

- ``down``: a link (named by either end), every link of a switch (which also stops
  answering MADs), or every HCA link of a tray (whose HCAs stop answering) fails; the
  ends go Down/Polling, switches raise trap 128.  Clearing it brings the links back.
- ``flap``: a link goes down and comes back, ``count`` times, every ``period`` seconds
  (down for the first half of each period).
- ``degrade``: a link retrains at a narrower width (4x -> 2x -> 1x) or a lower speed;
  PortInfo's LinkWidthActive / LinkSpeedActive / LinkSpeedExtActive(2) show it at both
  ends while LinkWidthSupported etc. stay, so ``iblinkinfo`` says "Could be ...".
- ``errors``: a bit-error rate on a link (:mod:`.ber`).
- ``drop``: a port loses that percentage of the MADs it is asked to answer (ibsim's
  ``Error`` command).  As there, it is the port a MAD reaches that loses it: a directed
  route enters a switch by an external port, so ``SWITCH[0]`` catches only LID-routed
  MADs, and naming the switch covers every port.

Several faults may hold one link down; it comes back when the last lets go.

This module keeps the faults in force and applies and clears each kind; their options
are checked by :mod:`.options`, the ports changed by :mod:`.ports`, and
flaps and bit errors move with the clock in :mod:`.timeline`.
"""

from __future__ import annotations

from ....ib.rates import SPEEDS, WIDTHS
from ...fabric.state import SimPort
from .. import events
from . import ber
from .fault import Fault
from .options import bad
from .ports import DropRule, PortFaults, end_key, link_ends
from .targets import SWITCH, TRAY, Target, link_name
from .timeline import Timeline


class FaultBook:
    """The faults in force and their effect on the fabric.  ``live`` gives access to
    the links, the MAD path's drops, the resolver, the event log and the clock."""

    def __init__(self, live):
        self.live = live
        self.faults: dict[int, Fault] = {}
        self.next_id = 1
        self.ports = PortFaults(live.links, live.drops)
        self.targets: dict[int, Target] = {}  # fault id -> what it was resolved to
        self.ends: dict[int, dict[int, ber.EndState]] = {}  # errors faults, by end
        self.timeline = Timeline(self.faults, self.targets, self.ends, self.ports, live.event)

    # --- injecting and clearing ----------------------------------------------------------

    def add(self, kind: str, target: Target, opts: dict, quiet: bool = False) -> Fault:
        """Inject a fault (its options already checked); ``quiet``: restoring a journal
        (no counters, traps or events for what had already happened)."""
        self._check_conflict(kind, target, opts)
        f = Fault(self.next_id, kind, target.text, opts, self.live.clock.now())
        self.next_id += 1
        self.faults[f.id] = f
        self.targets[f.id] = target
        self._apply(f, target, quiet)
        return f

    def _check_conflict(self, kind: str, target: Target, opts: dict | None = None) -> None:
        if kind == "nvlink":
            self._check_nvlink(target, (opts or {}).get("gpus"))
            return
        if kind not in ("degrade", "errors", "drop", "flap"):
            return
        mine = {id(p) for p in target.ports} | {id(p.peer) for p in target.ports if p.peer}
        if kind == "drop":
            mine = {id(p) for p in self._drop_ports(target)}
        for f in self.faults.values():
            if f.kind != kind:
                continue
            other = self.targets[f.id]
            theirs = (
                {id(p) for p in self._drop_ports(other)}
                if kind == "drop"
                else {id(p) for p in other.ports} | {id(p.peer) for p in other.ports if p.peer}
            )
            if mine & theirs:
                raise bad(target.text, f"already has a {kind} fault (id {f.id}); clear it first")

    def _nvlink_gpus(self, target: Target, gpus: list[int] | None) -> list:
        """The GPUs an nvlink fault on ``target`` takes (checked: an InputError)."""
        cluster = self.live.resolver.cluster
        tray = cluster.tray(target.text)
        if tray is None or not tray.gpus:
            raise bad(target.text, "the tray has no GPUs")
        n = len(tray.gpus)
        missing = [i for i in gpus or () if i >= n]
        if missing:
            raise bad("--gpus", f"no GPU {missing[0]} on {target.text} (it has GPUs 0-{n - 1})")
        return list(tray.gpus) if gpus is None else [tray.gpus[i] for i in gpus]

    def _check_nvlink(self, target: Target, gpus: list[int] | None) -> None:
        mine = {id(g) for g in self._nvlink_gpus(target, gpus)}
        for f in self.faults.values():
            if f.kind == "nvlink" and f.target == target.text:
                theirs = {id(g) for g in self._nvlink_gpus(target, f.options["gpus"])}
                if mine & theirs:
                    raise bad(target.text, f"already has an nvlink fault (id {f.id}) on those GPUs")

    def _nvlink_text(self, f: Fault) -> str:
        gpus = f.options["gpus"]
        return "every GPU" if gpus is None else "GPU " + ",".join(map(str, gpus))

    def _drop_ports(self, target: Target) -> list[SimPort]:
        if target.kind == SWITCH:
            node = target.ports[0].node if target.ports else None
            return [q for q in node.ports if q is not None] if node else []
        return list(target.ports)

    def _apply(self, f: Fault, t: Target, quiet: bool) -> None:
        ev = self.live.event
        if f.kind == "down":
            self._down(t, quiet)
        elif f.kind == "nvlink":
            # the model's fault: nvidia-smi's fabric view and the NVLink domain feeds
            # (Slurm blocks, topograph) follow it (model/cluster.py)
            self.live.resolver.cluster.nvlink_fault(t.text, f.options["gpus"])
            if not quiet:
                ev(
                    events.NVLINK_FAULT,
                    t.text,
                    f"NVLink fault on {t.text}: {self._nvlink_text(f)} out of the NVLink fabric",
                )
        elif f.kind == "flap":
            f.progress = {"flaps": 0, "down": False, "next": f.since}
            if quiet:  # restored: the phase it was in
                pass
        elif f.kind == "degrade":
            p = t.ports[0]
            w = WIDTHS[f.options["width"]] if "width" in f.options else None
            s = SPEEDS[f.options["speed"]] if "speed" in f.options else None
            self.ports.retrain(p, w, s, quiet)
            if not quiet:
                if w:
                    ev(
                        events.NON_OPTIMAL_WIDTH,
                        link_name(p),
                        f"Link {link_name(p)} retrained at {w} (could be {p.fabric_port.width})",
                    )
                if s:
                    ev(
                        events.NON_OPTIMAL_SPEED,
                        link_name(p),
                        f"Link {link_name(p)} retrained at {s} (could be {p.fabric_port.speed})",
                    )
        elif f.kind == "errors":
            p = t.ports[0]
            self.ends[f.id] = {end_key(q): ber.EndState.at(q) for q in link_ends(p)}
            f.progress = {"recoveries": 0}
            if not quiet:
                ev(
                    events.HIGH_BER,
                    link_name(p),
                    f"Bit-error rate {f.options['ber']:g} on link {link_name(p)}",
                )
        elif f.kind == "drop":
            for q in self._drop_ports(t):
                self.ports.set_loss(q, DropRule(f.options["rate"], f.options["seed"]))
            if not quiet:
                ev(
                    events.MAD_DROP,
                    t.text,
                    f"{t.text} loses {f.options['rate']:g}% of the MADs it is asked to answer",
                )

    def _down(self, t: Target, quiet: bool) -> None:
        ev = self.live.event
        went = [p for p, _ in t.links if self.ports.hold(p, quiet)]
        if t.kind == SWITCH:
            node = t.ports[0].node if t.ports else None
            if node is not None:
                self.ports.set_dead([q for q in node.ports if q is not None], True)
        elif t.kind == TRAY:
            self.ports.set_dead(t.ports, True)
        if quiet:
            return
        if t.kind == SWITCH:
            ev(events.SWITCH_DOWN, t.text, f"Switch {t.text} is down ({len(went)} links went down)")
        elif t.kind == TRAY:
            ev(events.TRAY_DOWN, t.text, f"Computer {t.text} is down (all its HCAs)")
        for p in went:
            ev(events.LINK_DOWN, link_name(p), f"Link went down: {link_name(p)}")

    def _up(self, t: Target) -> None:
        ev = self.live.event
        came = [p for p, _ in t.links if self.ports.release(p)]
        if t.kind == SWITCH:
            node = t.ports[0].node if t.ports else None
            if node is not None:
                self.ports.set_dead([q for q in node.ports if q is not None], False)
            ev(events.SWITCH_UP, t.text, f"Switch {t.text} is up")
        elif t.kind == TRAY:
            self.ports.set_dead(t.ports, False)
            ev(events.TRAY_UP, t.text, f"Computer {t.text} is up")
        for p in came:
            ev(events.LINK_UP, link_name(p), f"Link is up: {link_name(p)}")

    def clear(self, f: Fault) -> None:
        """End fault ``f``: the fabric goes back to what it would be without it."""
        self.faults.pop(f.id, None)
        t = self.targets.pop(f.id)
        ev = self.live.event
        if f.kind == "down":
            self._up(t)
        elif f.kind == "nvlink":
            cluster = self.live.resolver.cluster
            cluster.nvlink_clear(t.text, f.options["gpus"])
            # GPUs another nvlink fault still holds stay faulted
            for g in self.faults.values():
                if g.kind == "nvlink" and g.target == t.text:
                    cluster.nvlink_fault(t.text, g.options["gpus"])
            ev(
                events.NVLINK_CLEARED,
                t.text,
                f"NVLink fault on {t.text} cleared: {self._nvlink_text(f)} back",
            )
        elif f.kind == "flap":
            if f.progress.get("down"):
                p = t.ports[0]
                if self.ports.release(p):
                    ev(events.LINK_UP, link_name(p), f"Link is up: {link_name(p)}")
        elif f.kind == "degrade":
            p = t.ports[0]
            self.ports.retrain(p, None, None, False)
            ev(
                events.LINK_OPTIMAL,
                link_name(p),
                f"Link {link_name(p)} retrained at {p.fabric_port.width} {p.fabric_port.speed}",
            )
        elif f.kind == "errors":
            self.ends.pop(f.id, None)
            ev(
                events.BER_CLEARED,
                link_name(t.ports[0]),
                f"Bit-error rate on link {link_name(t.ports[0])} back to normal",
            )
        elif f.kind == "drop":
            for q in self._drop_ports(t):
                self.ports.set_loss(q, None)
            ev(events.MAD_DROP_CLEARED, t.text, f"{t.text} answers every MAD again")

    # --- time (:mod:`.timeline`) --------------------------------------------------

    def next_due(self) -> float | None:
        """When a flap next changes a link (clock seconds), if one will."""
        return self.timeline.next_due()

    def run_due(self, now: float) -> None:
        """Carry out the flap transitions due by ``now``, in order."""
        self.timeline.run_due(now)

    def accrue(self, seconds: float) -> bool:
        """``seconds`` of bit errors on every link with an ``errors`` fault; whether a
        counter moved."""
        return self.timeline.accrue(seconds)
