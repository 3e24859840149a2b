"""Overlapping faults: which of the faults in force touch a link, a port, a switch or a
tray, and what those of one kind come to together.

The one rule: faults stack.  Each is its own entry with its own id, and what it does
lasts until the last fault doing it lets go:

- ``down`` and ``flap``: a link held by several comes back when the last lets go; a
  switch or tray answers MADs again when its last ``down`` clears;
- ``degrade``: the narrowest width and the slowest speed in force apply;
- ``errors`` and ``drop``: the latest in force on a link (a port) applies; when it
  clears, the one before it applies again;
- ``nvlink``: a GPU is back when no fault holds it.
"""

from __future__ import annotations

from ....ib.rates import SPEEDS, WIDTHS, Speed, Width
from ...fabric.state import SimPort
from .fault import Fault
from .targets import LINK, SWITCH, Target


def ids(faults: list[Fault]) -> str:
    """``fault 2`` or ``faults 2, 3``."""
    if not faults:
        return "no fault"
    nums = ", ".join(str(f.id) for f in faults)
    return f"fault{'s' if len(faults) > 1 else ''} {nums}"


def drop_ports(target: Target) -> list[SimPort]:
    """The ports a ``drop`` fault on ``target`` makes lose MADs (a switch: all of them)."""
    if target.kind == SWITCH:
        node = target.ports[0].node if target.ports else None
        return [q for q in node.ports if q is not None] if node else []
    return list(target.ports)


class Stack:
    """The faults in force (``faults``) and what each was resolved to (``targets``),
    looked at by what they touch."""

    def __init__(self, faults: dict[int, Fault], targets: dict[int, Target]):
        self.faults, self.targets = faults, targets

    def on_link(self, p: SimPort, kinds: tuple[str, ...]) -> list[Fault]:
        """The faults of ``kinds`` whose target has ``p``'s link (oldest first)."""
        ends = {id(p), id(p.peer)}
        return [
            f
            for f in self.faults.values()
            if f.kind in kinds and ends & {id(q) for q in self.targets[f.id].ports}
        ]

    def holding(self, p: SimPort) -> list[Fault]:
        """The faults holding ``p``'s link down: ``down`` faults and flaps in their down
        half."""
        return [
            f
            for f in self.on_link(p, ("down", "flap"))
            if f.kind == "down" or f.progress.get("down")
        ]

    def same_whole(self, t: Target) -> list[Fault]:
        """The ``down`` faults on the switch or tray ``t`` names (by any name of it)."""
        if t.kind == LINK:
            return []
        mine = {id(q.node) for q in t.ports} if t.kind == SWITCH else {id(q) for q in t.ports}
        out = []
        for f in self.faults.values():
            other = self.targets[f.id]
            if f.kind != "down" or other.kind != t.kind:
                continue
            theirs = (
                {id(q.node) for q in other.ports}
                if t.kind == SWITCH
                else {id(q) for q in other.ports}
            )
            if mine & theirs:
                out.append(f)
        return out

    def degraded(self, p: SimPort) -> tuple[Width | None, Speed | None, list[Fault]]:
        """The width and speed ``p``'s link trains at under the ``degrade`` faults in
        force (None: what it supports), and those faults."""
        in_force = self.on_link(p, ("degrade",))
        widths = [WIDTHS[f.options["width"]] for f in in_force if "width" in f.options]
        speeds = [SPEEDS[f.options["speed"]] for f in in_force if "speed" in f.options]
        w = min(widths, key=lambda x: x.lanes, default=None)
        s = min(speeds, key=lambda x: x.order, default=None)
        return w, s, in_force

    def latest(self, p: SimPort, kind: str) -> Fault | None:
        """The latest fault of ``kind`` on ``p``'s link: the one that applies."""
        on = self.on_link(p, (kind,))
        return max(on, key=lambda f: f.id) if on else None

    def dropping(self, ports: list[SimPort]) -> list[Fault]:
        """The ``drop`` faults in force on any of ``ports``."""
        mine = {id(q) for q in ports}
        return [
            f
            for f in self.faults.values()
            if f.kind == "drop" and mine & {id(q) for q in drop_ports(self.targets[f.id])}
        ]
