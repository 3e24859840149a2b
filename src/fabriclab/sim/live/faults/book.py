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

Faults stack (:mod:`.stack`): each is its own entry with its own id, and what it does
lasts until the last fault doing it lets go; when a fault clears and others still hold
its target, the event log says which.

This module keeps the faults in force and applies and clears each kind; their options
are checked by :mod:`.options`, the ports changed by :mod:`.ports`, and
flaps and bit errors move with the clock in :mod:`.timeline`.
"""

from __future__ import annotations

from ...fabric.state import SimPort
from .. import events
from . import ber
from .fault import Fault
from .options import bad
from .ports import DropRule, PortFaults, end_key, link_ends
from .stack import Stack, drop_ports, ids
from .targets import SWITCH, TRAY, Target, link_name
from .timeline import COALESCE_AFTER, Timeline


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
        self.stack = Stack(self.faults, self.targets)
        self.timeline = Timeline(
            self.faults, self.targets, self.ends, self.ports, live.event, self.stack
        )

    # --- injecting and clearing ----------------------------------------------------------

    def add(self, kind: str, target: Target, opts: dict, quiet: bool = False) -> Fault:
        """Inject a fault (its options already checked); ``quiet``: restoring a journal
        (no counters, traps or events for what had already happened).  A fault on what
        other faults already hold stacks on them (:mod:`.stack`)."""
        if kind == "nvlink":
            self._nvlink_gpus(target, opts.get("gpus"))
        f = Fault(self.next_id, kind, target.text, opts, self.live.clock.now())
        self.next_id += 1
        self.faults[f.id] = f
        self.targets[f.id] = target
        self._apply(f, target, quiet)
        return f

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
        return list(range(n)) if gpus is None else list(gpus)

    def _apply(self, f: Fault, t: Target, quiet: bool) -> None:
        ev = self.live.event
        if f.kind == "down":
            self._down(f, t, quiet)
        elif f.kind == "nvlink":
            # the model's fault: nvidia-smi's fabric view and the NVLink domain feeds
            # (Slurm blocks, topograph) follow it (model/cluster.py)
            self.live.resolver.cluster.nvlink_fault(t.text, f.options["gpus"])
            if not quiet:
                ev(
                    events.NVLINK_FAULT,
                    t.text,
                    f"NVLink fault on {t.text}: {_gpus(f.options['gpus'])} out of the NVLink fabric",
                )
        elif f.kind == "flap":
            f.progress = {"flaps": 0, "down": False, "next": f.since}
        elif f.kind == "degrade":
            self._retrain(f, t.ports[0], quiet, added=True)
        elif f.kind == "errors":
            p = t.ports[0]
            self.ends[f.id] = {end_key(q): ber.EndState.at(q) for q in link_ends(p)}
            f.progress = {"recoveries": 0}
            if not quiet:
                before = [g for g in self.stack.on_link(p, ("errors",)) if g is not f]
                also = (
                    f" (in place of {ids(before[-1:])}'s {before[-1].options['ber']:g} while it lasts)"
                    if before
                    else ""
                )
                ev(
                    events.HIGH_BER,
                    link_name(p),
                    f"Bit-error rate {f.options['ber']:g} on link {link_name(p)}{also}",
                )
        elif f.kind == "drop":
            ports = drop_ports(t)
            before = [g for g in self.stack.dropping(ports) if g is not f]
            for q in ports:
                self.ports.set_loss(q, f.id, DropRule(f.options["rate"], f.options["seed"]))
            if not quiet:
                also = f" (in place of {ids(before)} where they meet)" if before else ""
                ev(
                    events.MAD_DROP,
                    t.text,
                    f"{t.text} loses {f.options['rate']:g}% of the MADs it is asked to answer{also}",
                )

    def _down(self, f: Fault, t: Target, quiet: bool) -> None:
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
        others = [g for g in self.stack.same_whole(t) if g is not f]
        also = f"; already held down by {ids(others)}" if others else ""
        if t.kind == SWITCH:
            ev(
                events.SWITCH_DOWN,
                t.text,
                f"Switch {t.text} is down ({len(went)} links went down{also})",
            )
        elif t.kind == TRAY:
            ev(events.TRAY_DOWN, t.text, f"Computer {t.text} is down (all its HCAs{also})")
        elif not went:
            p = t.ports[0]
            held = [g for g in self.stack.holding(p) if g is not f]
            why = f"already held down by {ids(held)}" if held else "it was already down"
            ev(
                events.STILL_HELD,
                link_name(p),
                f"Link {link_name(p)}: fault {f.id} holds it down too ({why})",
            )
        for p in went:
            ev(events.LINK_DOWN, link_name(p), f"Link went down: {link_name(p)}")

    def _up(self, f: Fault, t: Target) -> None:
        """Down fault ``f`` (out of the book) lets go of ``t``: what no other fault holds
        comes back; the events say what still holds the rest."""
        ev = self.live.event
        came = [p for p, _ in t.links if self.ports.release(p)]
        kept = [(p, self.stack.holding(p)) for p, _ in t.links if p.held]
        if t.kind == SWITCH:
            node = t.ports[0].node if t.ports else None
            if node is not None:
                self.ports.set_dead([q for q in node.ports if q is not None], False)
        elif t.kind == TRAY:
            self.ports.set_dead(t.ports, False)
        if t.kind in (SWITCH, TRAY):
            noun, up = (
                ("Switch", events.SWITCH_UP) if t.kind == SWITCH else ("Computer", events.TRAY_UP)
            )
            whole = self.stack.same_whole(t)
            if whole:
                ev(
                    events.STILL_HELD,
                    t.text,
                    f"{noun} {t.text} still down: held by {ids(whole)} (fault {f.id} cleared)",
                )
            else:
                still = "; ".join(f"{link_name(p)} ({ids(h)})" for p, h in kept)
                ev(
                    up,
                    t.text,
                    f"{noun} {t.text} is up" + (f"; still down: {still}" if still else ""),
                )
        elif kept:
            p, held = kept[0]
            ev(
                events.STILL_HELD,
                link_name(p),
                f"Link {link_name(p)} still down: held by {ids(held)} (fault {f.id} cleared)",
            )
        for p in came:
            ev(events.LINK_UP, link_name(p), f"Link is up: {link_name(p)}")

    def _retrain(self, f: Fault, p: SimPort, quiet: bool, added: bool) -> None:
        """The link of ``p`` trains as the degrade faults in force say (the narrowest and
        slowest), now that ``f`` was ``added`` (or cleared); the events say how."""
        w, s, in_force = self.stack.degraded(p)
        changed_w, changed_s = w != p.width_trained, s != p.speed_trained
        if changed_w or changed_s:
            self.ports.retrain(p, w, s, quiet)
        if quiet:
            return
        ev, name, m = self.live.event, link_name(p), p.fabric_port
        now = f"{w or m.width} {s or m.speed}"
        if not in_force:
            ev(events.LINK_OPTIMAL, name, f"Link {name} retrained at {now}")
            return
        if changed_w and w:
            ev(events.NON_OPTIMAL_WIDTH, name, f"Link {name} retrained at {w} (could be {m.width})")
        if changed_s and s:
            ev(events.NON_OPTIMAL_SPEED, name, f"Link {name} retrained at {s} (could be {m.speed})")
        others = [g for g in in_force if g is not f]
        if (changed_w and not w) or (changed_s and not s):
            ev(
                events.LINK_OPTIMAL,
                name,
                f"Link {name} retrained at {now}; still degraded by {ids(others)}",
            )
        elif not (changed_w or changed_s):
            what = f"fault {f.id} added" if added else f"fault {f.id} cleared"
            ev(
                events.STILL_HELD,
                name,
                f"Link {name} stays at {now}: held there by {ids(others)} ({what})",
            )

    def clear(self, f: Fault) -> None:
        """End fault ``f``: the fabric goes back to what it would be without it (and
        with the other faults in force)."""
        self.faults.pop(f.id, None)
        t = self.targets.pop(f.id)
        ev = self.live.event
        if f.kind == "down":
            self._up(f, t)
        elif f.kind == "nvlink":
            self._nvlink_clear(f, t)
        elif f.kind == "flap":
            if f.progress.get("down"):
                p = t.ports[0]
                if self.ports.release(p):
                    ev(events.LINK_UP, link_name(p), f"Link is up: {link_name(p)}")
                elif p.held:
                    ev(
                        events.STILL_HELD,
                        link_name(p),
                        f"Link {link_name(p)} still down: held by {ids(self.stack.holding(p))} "
                        f"(fault {f.id} cleared)",
                    )
        elif f.kind == "degrade":
            self._retrain(f, t.ports[0], False, added=False)
        elif f.kind == "errors":
            self.ends.pop(f.id, None)
            p = t.ports[0]
            now = self.stack.latest(p, "errors")
            if now is not None:
                ev(
                    events.HIGH_BER,
                    link_name(p),
                    f"Bit-error rate on link {link_name(p)} back to {now.options['ber']:g} "
                    f"(fault {now.id}; fault {f.id} cleared)",
                )
            else:
                ev(
                    events.BER_CLEARED,
                    link_name(p),
                    f"Bit-error rate on link {link_name(p)} back to normal",
                )
        elif f.kind == "drop":
            ports = drop_ports(t)
            for q in ports:
                self.ports.set_loss(q, f.id, None)
            still = self.stack.dropping(ports)
            if still:
                ev(
                    events.STILL_HELD,
                    t.text,
                    f"{t.text} still loses MADs: {ids(still)} (fault {f.id} cleared)",
                )
            else:
                ev(events.MAD_DROP_CLEARED, t.text, f"{t.text} answers every MAD again")

    def _nvlink_clear(self, f: Fault, t: Target) -> None:
        cluster = self.live.resolver.cluster
        cluster.nvlink_clear(t.text, f.options["gpus"])
        mine = self._nvlink_gpus(t, f.options["gpus"])
        held: dict[int, list[Fault]] = {}
        # GPUs another nvlink fault still holds stay faulted
        for g in self.faults.values():
            if g.kind == "nvlink" and g.target == t.text:
                cluster.nvlink_fault(t.text, g.options["gpus"])
                for i in set(mine) & set(self._nvlink_gpus(t, g.options["gpus"])):
                    held.setdefault(i, []).append(g)
        back = [i for i in mine if i not in held]
        still = "; ".join(f"GPU {i} ({ids(held[i])})" for i in sorted(held))
        ev = self.live.event
        if back:
            text = _gpus(f.options["gpus"]) if not held else _gpus(back)
            ev(
                events.NVLINK_CLEARED,
                t.text,
                f"NVLink fault on {t.text} cleared: {text} back"
                + (f"; still out: {still}" if still else ""),
            )
        else:
            ev(
                events.STILL_HELD,
                t.text,
                f"NVLink fault {f.id} on {t.text} cleared; still out: {still}",
            )

    # --- time (:mod:`.timeline`) --------------------------------------------------

    def next_due(self, horizon: float | None = None) -> float | None:
        """When a flap next changes a link (clock seconds), if one will (a long run of
        changes due by ``horizon``: at ``horizon``, coalesced)."""
        return self.timeline.next_due(horizon)

    def run_due(self, now: float, horizon: float | None = None, coalesce_after: int = 0) -> None:
        """Carry out the flap transitions due by ``now``, in order (long runs up to
        ``horizon`` coalesced; ``coalesce_after``: runs longer than this, if given)."""
        self.timeline.run_due(now, horizon, coalesce_after or COALESCE_AFTER)

    def pending(self, now: float) -> int:
        """How many flap transitions are due by ``now``."""
        return self.timeline.pending(now)

    def accrue(self, seconds: float) -> bool:
        """``seconds`` of bit errors on every link with an ``errors`` fault (the latest
        on each link); whether a counter moved."""
        return self.timeline.accrue(seconds)


def _gpus(gpus: list[int] | None) -> str:
    return "every GPU" if gpus is None else "GPU " + ",".join(map(str, gpus))
