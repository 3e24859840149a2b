"""Where a fault changes a port: links held down and let go (several faults may hold one
link; it comes back when the last lets go), ports that answer no MAD, ports that lose a
share of their MADs (the latest fault's share), and links retrained at a lower width or
speed.

The changes go through :class:`...fabric.links.Links` (PortInfo, trap 128) and the MAD
path's drop rules (:mod:`...wire.dispatch`'s ``drops``, one callable per port).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable

from ....ib.rates import Speed, Width
from ...fabric.links import Links
from ...fabric.state import SimPort


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


def end_key(q: SimPort) -> int:
    """A port's key in an errors fault's per-end state (node index and port number)."""
    return q.node.index << 8 | q.num


def link_ends(p: SimPort) -> tuple[SimPort, SimPort]:
    """Both ends of ``p``'s link (a fault on a link is only ever on a cabled port)."""
    assert p.peer is not None
    return p, p.peer


class PortFaults:
    """What faults do to the ports of a fabric whose links are ``links`` and whose MAD
    path drops what ``drops`` (port -> rule) says."""

    def __init__(self, links: Links, drops: dict[SimPort, Callable[[int], bool]]):
        self.links = links
        self.drops = drops
        self._dead: dict[SimPort, int] = {}  # ports that answer nothing (switch/tray down)
        self._rules: dict[SimPort, dict[int, DropRule]] = {}  # port -> fault id -> rule

    # --- link holding ------------------------------------------------------------------

    def hold(self, p: SimPort, quiet: bool = False) -> bool:
        """One more fault holds ``p``'s link down; whether it went down now."""
        peer = p.peer
        for q in (p, peer):
            if q is not None:
                q.held += 1
        if p.held == 1:
            was_up = p.up
            self.links.fail_link(p, quiet=quiet)
            return was_up
        return False

    def release(self, p: SimPort) -> bool:
        """One fault fewer holds ``p``'s link down; whether it came back now."""
        peer = p.peer
        for q in (p, peer):
            if q is not None and q.held:
                q.held -= 1
        if p.held == 0:
            self.links.restore_link(p)
            return p.up
        return False

    def retrain(self, p: SimPort, w: Width | None, s: Speed | None, quiet: bool) -> None:
        """``p``'s link trains at width ``w`` and speed ``s`` (None: what it supports);
        ``quiet``: no trap (restoring a journal)."""
        for q in (p, p.peer):
            if q is not None:
                q.width_trained, q.speed_trained = w, s
        if quiet:
            for q in (p, p.peer):
                if q is not None:
                    q.changed()
        else:
            self.links.retrain_link(p)

    # --- MADs lost -----------------------------------------------------------------------

    def set_dead(self, ports: Iterable[SimPort], on: bool) -> None:
        """One more (``on``) or one fewer fault keeps ``ports`` from answering MADs."""
        for q in ports:
            n = self._dead.get(q, 0) + (1 if on else -1)
            if n > 0:
                self._dead[q] = n
            else:
                self._dead.pop(q, None)
            self._refresh_drop(q)

    def set_loss(self, q: SimPort, fault_id: int, rule: DropRule | None) -> None:
        """Fault ``fault_id`` makes ``q`` lose MADs as ``rule`` says (None: that fault
        lets go); the latest fault's rule applies."""
        rules = self._rules.setdefault(q, {})
        if rule is None:
            rules.pop(fault_id, None)
        else:
            rules[fault_id] = rule
        if not rules:
            del self._rules[q]
        self._refresh_drop(q)

    def _refresh_drop(self, q: SimPort) -> None:
        drops = self.drops
        if q in self._dead:
            drops[q] = _always
        elif q in self._rules:
            rules = self._rules[q]
            drops[q] = rules[max(rules)]
        else:
            drops.pop(q, None)
