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
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from ...errors import InputError, Problem
from ...ib.caps import CAP2_IS_LINK_WIDTH_2X
from ...ib.rates import SPEEDS, WIDTHS, Speed, Width
from ..fabric.state import SimPort
from . import ber, events
from .targets import LINK, PORT, SWITCH, TRAY, Target, link_name, port_name

KINDS = ("down", "flap", "degrade", "errors", "drop", "nvlink")


@dataclass
class Fault:
    """A fault as asked (kind, target text, options) and how far it has got."""

    id: int
    kind: str
    target: str
    options: dict
    since: float  # clock seconds when it was injected
    progress: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        """The fault as the API, the journal and ``fault list`` show it."""
        return {
            "id": self.id,
            "kind": self.kind,
            "target": self.target,
            "options": self.options,
            "since": self.since,
            "progress": self.progress,
        }


class DropRule:
    """A port's MAD loss: ``rate`` percent, drawn from its own seeded generator so a run
    is repeatable."""

    def __init__(self, rate: float, seed: int):
        self.rate = rate
        self._rng = random.Random(seed)

    def __call__(self, attr: int) -> bool:
        return self._rng.random() * 100.0 < self.rate


def _always(attr: int) -> bool:
    return True


def _bad(where: str, what: str) -> InputError:
    return InputError([Problem(where, what)])


def check_options(kind: str, target: Target, opts: dict) -> dict:
    """The options of a fault of ``kind`` on ``target``, checked and normalised (an
    InputError naming the first bad one)."""
    where = target.text
    if kind in ("flap", "degrade", "errors") and target.kind != LINK:
        raise _bad(
            where, f"{kind} takes a link (SWITCH[port] or HOST/HCA[port]), not a {target.kind}"
        )
    if kind == "down" and target.kind == PORT:
        raise _bad(where, "port 0 is not a link")
    if kind == "nvlink" and target.kind != TRAY:
        raise _bad(where, f"nvlink takes a tray, not a {target.kind}")
    out: dict = {}
    if kind == "nvlink":
        out = {"gpus": _gpu_list(opts.get("gpus"))}
    if kind == "flap":
        period = float(opts.get("period", 2.0))
        count = int(opts.get("count", 1))
        if not 0.001 <= period <= 86400:
            raise _bad("--period", f"{period:g} s: want 0.001 to 86400 seconds")
        if not 1 <= count <= 100000:
            raise _bad("--count", f"{count}: want 1 to 100000 flaps")
        out = {"period": period, "count": count}
    elif kind == "degrade":
        p = target.ports[0]
        out = _degrade_options(where, p, opts.get("width"), opts.get("speed"))
    elif kind == "errors":
        rate = float(opts.get("ber", 0))
        if not 0 < rate <= 1e-3:
            raise _bad("--ber", f"{rate:g}: want a bit-error rate above 0, at most 1e-3")
        down_after = int(opts.get("down_after", ber.DOWN_AFTER))
        if not 1 <= down_after <= 255:
            raise _bad("--down-after", f"{down_after}: want 1 to 255 recoveries")
        out = {"ber": rate, "down_after": down_after}
    elif kind == "drop":
        rate = float(opts.get("rate", 100))
        if not 0 < rate <= 100:
            raise _bad("--rate", f"{rate:g}: want a percentage above 0, at most 100")
        out = {"rate": rate, "seed": int(opts.get("seed", 1))}
    return out


def _gpu_list(gpus) -> list[int] | None:
    """``--gpus 0,1`` (or a list) as sorted GPU indices; None: the whole tray."""
    if gpus is None or gpus == "":
        return None
    items = gpus.split(",") if isinstance(gpus, str) else gpus
    if not isinstance(items, list | tuple):
        raise _bad("--gpus", f"{gpus!r}: want GPU indices like 0,1")
    out = set()
    for g in items:
        text = str(g).strip()
        if not text.isdigit() or int(text) > 255:
            raise _bad("--gpus", f"{g!r}: want GPU indices like 0,1")
        out.add(int(text))
    return sorted(out)


def _degrade_options(where: str, p: SimPort, width, speed) -> dict:
    if not width and not speed:
        raise _bad(where, "degrade needs --width and/or --speed")
    peer = p.peer
    assert peer is not None
    out: dict = {}
    m = p.fabric_port
    if width:
        w = WIDTHS.get(str(width).lower())
        if w is None:
            raise _bad("--width", f"{width!r}: want one of 1x, 2x, 4x, 8x, 12x")
        if w.lanes >= m.width.lanes:
            raise _bad("--width", f"{w} is not narrower than the link's {m.width}")
        for q in (p, peer):
            if not q.width_supported & w.value:
                raise _bad("--width", f"{port_name(q)} does not support {w}")
            if w.value == WIDTHS["2x"].value and not _cap_port(q).cap_mask2 & CAP2_IS_LINK_WIDTH_2X:
                # tools show 2x only where CapabilityMask2 says IsLinkWidth2xSupported
                # (libibmad dump.c; iblinkinfo reads it from a switch's port 0)
                raise _bad("--width", f"{port_name(q)} has no IsLinkWidth2xSupported")
        out["width"] = w.token
    if speed:
        s = SPEEDS.get(str(speed).upper())
        if s is None:
            raise _bad("--speed", f"{speed!r}: want one of {', '.join(SPEEDS)}")
        if s.order >= m.speed.order:
            raise _bad("--speed", f"{s} is not slower than the link's {m.speed}")
        out["speed"] = s.token
    return out


def _key(q: SimPort) -> int:
    """A port's key in an errors fault's per-end state (node index and port number)."""
    return q.node.index << 8 | q.num


def _link_ends(p: SimPort) -> tuple[SimPort, SimPort]:
    """Both ends of ``p``'s link (a fault on a link is only ever on a cabled port)."""
    assert p.peer is not None
    return p, p.peer


def _cap_port(q: SimPort) -> SimPort:
    """The port whose CapabilityMask speaks for ``q`` (a switch's port 0)."""
    if q.node.is_switch:
        p0 = q.node.ports[0]
        return p0 if p0 is not None else q
    return q


class FaultBook:
    """The faults in force and their effect on the fabric.  ``live`` gives access to
    the links, the MAD path's drops, the event log and the clock."""

    def __init__(self, live):
        self.live = live
        self.faults: dict[int, Fault] = {}
        self.next_id = 1
        self._dead: dict[SimPort, int] = {}  # ports that answer nothing (switch/tray down)
        self._rules: dict[SimPort, DropRule] = {}
        self.targets: dict[int, Target] = {}  # fault id -> what it was resolved to
        self.ends: dict[int, dict[int, ber.EndState]] = {}  # errors faults, by end

    # --- link holding ------------------------------------------------------------------

    def hold(self, p: SimPort, quiet: bool = False) -> bool:
        """One more fault holds ``p``'s link down; whether it went down now."""
        peer = p.peer
        for q in (p, peer):
            if q is not None:
                q.held += 1
        if p.held == 1:
            was_up = p.up
            self.live.links.fail_link(p, quiet=quiet)
            return was_up
        return False

    def release(self, p: SimPort) -> bool:
        """One fault fewer holds ``p``'s link down; whether it came back now."""
        peer = p.peer
        for q in (p, peer):
            if q is not None and q.held:
                q.held -= 1
        if p.held == 0:
            self.live.links.restore_link(p)
            return p.up
        return False

    def _set_dead(self, ports, on: bool) -> None:
        for q in ports:
            n = self._dead.get(q, 0) + (1 if on else -1)
            if n > 0:
                self._dead[q] = n
            else:
                self._dead.pop(q, None)
            self._refresh_drop(q)

    def _refresh_drop(self, q: SimPort) -> None:
        drops = self.live.drops
        if q in self._dead:
            drops[q] = _always
        elif q in self._rules:
            drops[q] = self._rules[q]
        else:
            drops.pop(q, None)

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
                raise _bad(target.text, f"already has a {kind} fault (id {f.id}); clear it first")

    def _nvlink_gpus(self, target: Target, gpus: list[int] | None) -> list:
        """The GPUs an nvlink fault on ``target`` takes (checked: an InputError)."""
        cluster = self.live.resolver.cluster
        tray = cluster.tray(target.text)
        if tray is None or not tray.gpus:
            raise _bad(target.text, "the tray has no GPUs")
        n = len(tray.gpus)
        bad = [i for i in gpus or () if i >= n]
        if bad:
            raise _bad("--gpus", f"no GPU {bad[0]} on {target.text} (it has GPUs 0-{n - 1})")
        return list(tray.gpus) if gpus is None else [tray.gpus[i] for i in gpus]

    def _check_nvlink(self, target: Target, gpus: list[int] | None) -> None:
        mine = {id(g) for g in self._nvlink_gpus(target, gpus)}
        for f in self.faults.values():
            if f.kind == "nvlink" and f.target == target.text:
                theirs = {id(g) for g in self._nvlink_gpus(target, f.options["gpus"])}
                if mine & theirs:
                    raise _bad(
                        target.text, f"already has an nvlink fault (id {f.id}) on those GPUs"
                    )

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
            self._retrain(p, w, s, quiet)
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
            self.ends[f.id] = {_key(q): ber.EndState.at(q) for q in _link_ends(p)}
            f.progress = {"recoveries": 0}
            if not quiet:
                ev(
                    events.HIGH_BER,
                    link_name(p),
                    f"Bit-error rate {f.options['ber']:g} on link {link_name(p)}",
                )
        elif f.kind == "drop":
            for q in self._drop_ports(t):
                self._rules[q] = DropRule(f.options["rate"], f.options["seed"])
                self._refresh_drop(q)
            if not quiet:
                ev(
                    events.MAD_DROP,
                    t.text,
                    f"{t.text} loses {f.options['rate']:g}% of the MADs it is asked to answer",
                )

    def _down(self, t: Target, quiet: bool) -> None:
        ev = self.live.event
        went = [p for p, _ in t.links if self.hold(p, quiet)]
        if t.kind == SWITCH:
            node = t.ports[0].node if t.ports else None
            if node is not None:
                self._set_dead([q for q in node.ports if q is not None], True)
        elif t.kind == TRAY:
            self._set_dead(t.ports, True)
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
        came = [p for p, _ in t.links if self.release(p)]
        if t.kind == SWITCH:
            node = t.ports[0].node if t.ports else None
            if node is not None:
                self._set_dead([q for q in node.ports if q is not None], False)
            ev(events.SWITCH_UP, t.text, f"Switch {t.text} is up")
        elif t.kind == TRAY:
            self._set_dead(t.ports, False)
            ev(events.TRAY_UP, t.text, f"Computer {t.text} is up")
        for p in came:
            ev(events.LINK_UP, link_name(p), f"Link is up: {link_name(p)}")

    def _retrain(self, p: SimPort, w: Width | None, s: Speed | None, quiet: bool) -> None:
        for q in (p, p.peer):
            if q is not None:
                q.width_trained, q.speed_trained = w, s
        if quiet:
            for q in (p, p.peer):
                if q is not None:
                    q.changed()
        else:
            self.live.links.retrain_link(p)

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
                if self.release(p):
                    ev(events.LINK_UP, link_name(p), f"Link is up: {link_name(p)}")
        elif f.kind == "degrade":
            p = t.ports[0]
            self._retrain(p, None, None, False)
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
                self._rules.pop(q, None)
                self._refresh_drop(q)
            ev(events.MAD_DROP_CLEARED, t.text, f"{t.text} answers every MAD again")

    # --- time --------------------------------------------------------------------------

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
        ev = self.live.event
        pr = f.progress
        half = f.options["period"] / 2
        if not pr["down"]:
            pr["down"] = True
            if self.hold(p):
                ev(
                    events.LINK_DOWN,
                    link_name(p),
                    f"Link went down: {link_name(p)} (flap {pr['flaps'] + 1} of {f.options['count']})",
                )
            pr["next"] += half
            return
        pr["down"] = False
        pr["flaps"] += 1
        if self.release(p):
            ev(
                events.LINK_UP,
                link_name(p),
                f"Link is up: {link_name(p)} (flap {pr['flaps']} of {f.options['count']})",
            )
        if pr["flaps"] >= f.options["count"]:
            self.faults.pop(f.id, None)  # done: the link is as it was
            self.targets.pop(f.id, None)
        else:
            pr["next"] += half

    def accrue(self, seconds: float) -> bool:
        """``seconds`` of bit errors on every link with an ``errors`` fault; whether a
        counter moved."""
        moved = False
        for f in list(self.faults.values()):
            if f.kind != "errors":
                continue
            p = self.targets[f.id].ports[0]
            ends = self.ends.setdefault(f.id, {_key(q): ber.EndState.at(q) for q in _link_ends(p)})
            recov = 0
            for q in _link_ends(p):
                end = ends[_key(q)]
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
                self.live.event(
                    events.COUNTER_THRESHOLD,
                    port_name(q),
                    f"{name} counter threshold exceeded on {port_name(q)}. "
                    f"Threshold is {top}, received value is {after[name]}.",
                )

    def _give_up(self, p: SimPort) -> None:
        """Error recovery failed: the link goes down and trains again."""
        if not p.up:
            return
        ev = self.live.event
        self.hold(p)
        ev(
            events.LINK_DOWN,
            link_name(p),
            f"Link went down: {link_name(p)} (error recovery failed)",
        )
        self.release(p)
        ev(events.LINK_RETRAINED, link_name(p), f"Link {link_name(p)} retrained after errors")
