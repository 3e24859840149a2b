"""Faults on the other networks of a fabric up with ``--networks``: a link, a switch or a
whole network taken down and brought back, a link's rate capped, each written to the
fabric's event log.

A link is named by its switch end (``SWITCH[port]``) or its endpoint end
(``ENDPOINT/IFACE``).  Down is the switch end of each link set down, so the endpoint's
interface loses its carrier, as when a cable is pulled or a switch dies; a switch takes
every cabled port down, a network every port of its switches.  A rate is a token
bucket (``tbf``) at both ends of each link, each direction capped.  Delay and loss
need the kernel's ``sch_netem``; where it is missing (these machines' kernels) they
are refused with one line.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from pyroute2 import NetNS
from pyroute2.netlink.exceptions import NetlinkError

from ...errors import InputError, Problem
from ...ethernet import port_name
from ...model import net_cabling
from ...model.networks import Networks
from .names import namespace

_PORT = re.compile(r"^(.+)\[(\d+)\]$")
_RATE = re.compile(r"^(\d+(?:\.\d+)?)\s*([kmgt]?)(bit|bps|b/s)?$", re.I)
_UNIT = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
TBF_LATENCY = "50ms"  # how long a packet may wait in the bucket
# (event kind, object kind) written for each change; the kinds' ids are the fabric's
# own (see ..live.events)
Emit = Callable[[str, str, str], None]


def _bad(where: str, what: str) -> InputError:
    return InputError([Problem(where, what)])


def parse_rate(text: str) -> int:
    """A rate as tc takes it (``1gbit``, ``100mbit``, ``2.5Gbit``): bits per second."""
    m = _RATE.match(text.strip())
    if not m:
        raise _bad("--rate", f"{text!r}: want a rate such as 1gbit or 100mbit")
    bits = float(m.group(1)) * _UNIT[m.group(2).lower()]
    if not 8_000 <= bits <= 1e12:
        raise _bad("--rate", f"{text!r}: between 8kbit and 1tbit")
    return int(bits)


def _cable(sw_end: tuple[str, str], other: tuple[str, str]) -> str:
    """A link as answers name it: ``SWITCH[port] -- NODE/IFACE``."""
    return f"{sw_end[0]}[{sw_end[1][3:]}] -- {other[0]}/{other[1]}"


class NetFaults:
    """The faults of one fabric's other networks (``fabric``: its name, for the
    namespaces); ``emit(what, object, description)`` writes an event."""

    def __init__(
        self, fabric: str, nets: Networks, emit: Emit, now: Callable[[], float] = time.monotonic
    ):
        self.fabric, self.nets, self.emit, self.now = fabric, nets, emit, now
        self.down: set[tuple[str, str]] = set()  # (switch, port name) held down
        self.rates: dict[tuple[str, str], int] = {}
        self.flaps: dict[str, Flap] = {}  # by target, as it was written

    def links(self, target: str) -> tuple[str, list[tuple[tuple[str, str], tuple[str, str]]]]:
        """What ``target`` names (link, switch or network) and its links, each as (its
        switch end, its other end), every end (node, interface)."""
        nets = self.nets
        out = []
        for a, b in nets.links:  # an endpoint's cable lists the endpoint first
            out.append((b, a) if a[0] not in nets.switches else (a, b))
        m = _PORT.match(target)
        if m and m.group(1) in nets.switches:
            end = (m.group(1), port_name(int(m.group(2))))
            hit = [x for x in out if end in x]
            if not hit:
                raise _bad(target, "nothing is cabled to that port")
            return "link", hit
        node, sep, iface = target.partition("/")
        if sep and node in nets.endpoints:
            hit = [x for x in out if x[1] == (node, iface)]
            if not hit:
                raise _bad(target, f"{node} has no interface {iface!r}")
            return "link", hit
        if target in nets.switches:
            return "switch", [x for x in out if target in (x[0][0], x[1][0])]
        if any(n.name == target for n in nets.networks):
            sws = {s.name for s in nets.switches.values() if s.network == target}
            return "network", [x for x in out if x[0][0] in sws]
        raise _bad(target, "no link (SWITCH[port], ENDPOINT/IFACE), switch or network of that name")

    def _state(self, end: tuple[str, str], up: bool) -> None:
        with NetNS(namespace(self.fabric, end[0])) as n:
            n.link("set", index=n.link_lookup(ifname=end[1])[0], state="up" if up else "down")

    def set_down(self, target: str, down: bool, flapping: bool = False) -> dict:
        """Take ``target`` down (``down``) or bring it back, ending a flap of it (but
        when ``flapping``: the flap's own change); what changed."""
        kind, links = self.links(target)
        if not flapping:
            self.flaps.pop(target, None)
        changed = []
        for sw_end, other in links:
            if (sw_end in self.down) == down:
                continue
            self._state(sw_end, not down)
            (self.down.add if down else self.down.discard)(sw_end)
            changed.append(_cable(sw_end, other))
        what = "down" if down else "up"
        if kind == "link":
            for c in changed:
                self.emit(f"link-{what}", c, f"Ethernet link {what} (fault net)")
        elif changed:
            self.emit(
                f"switch-{what}" if kind == "switch" else f"link-{what}",
                target,
                f"{kind} {target}: {len(changed)} link(s) {what} (fault net)",
            )
        return {"target": target, "kind": kind, "action": what, "links": changed}

    def _rate(self, end: tuple[str, str], bits: int | None) -> None:
        """Cap what ``end`` sends at ``bits`` per second (None: lift the cap)."""
        with NetNS(namespace(self.fabric, end[0])) as n:
            i = n.link_lookup(ifname=end[1])[0]
            if bits is None:  # the root qdisc back to the interface's own
                for q in n.get_qdiscs(index=i):
                    if q.get_attr("TCA_KIND") in ("tbf", "netem"):
                        n.tc("del", index=i, handle=q["handle"], parent=q["parent"])
            else:
                burst = max(bits // 8 // 100, 16_384)  # 10 ms of bytes
                n.tc("replace", "tbf", i, rate=f"{bits}bit", burst=burst, latency=TBF_LATENCY)
        if bits is None:
            self.rates.pop(end, None)
        else:
            self.rates[end] = bits

    def set_rate(self, target: str, rate: str | None) -> dict:
        """Cap each direction of ``target``'s links at ``rate`` (None: lift the cap)."""
        kind, links = self.links(target)
        bits = parse_rate(rate) if rate is not None else None
        done = []
        for sw_end, other in links:
            for end in (sw_end, other):
                self._rate(end, bits)
            done.append(_cable(sw_end, other))
        if bits is None:
            self.emit(
                "rate-cleared", target, f"{kind} {target}: rate cap lifted on {len(done)} link(s)"
            )
        else:
            self.emit("rate", target, f"{kind} {target}: {rate} each way on {len(done)} link(s)")
        return {"target": target, "kind": kind, "action": "rate", "rate": bits, "links": done}

    def set_netem(self, target: str, delay_ms: float | None, loss_pct: float | None) -> dict:
        """Delay and loss on ``target``'s links (netem at both ends); refused with one
        line where the kernel has no ``sch_netem``."""
        kind, links = self.links(target)
        opts: dict = {}
        if delay_ms is not None:
            opts["delay"] = int(delay_ms * 1000)  # microseconds
        if loss_pct is not None:
            opts["loss"] = loss_pct
        for sw_end, other in links:
            for end in (sw_end, other):
                with NetNS(namespace(self.fabric, end[0])) as n:
                    i = n.link_lookup(ifname=end[1])[0]
                    try:
                        n.tc("replace", "netem", i, **opts)
                    except NetlinkError as e:
                        if e.code == 2:  # ENOENT: no such qdisc kind in this kernel
                            what = "--delay" if delay_ms is not None else "--loss"
                            raise _bad(
                                what,
                                "needs the kernel's sch_netem, which this machine's kernel does not have",
                            ) from None
                        raise
        self.emit("rate", target, f"{kind} {target}: netem {opts}")
        return {"target": target, "kind": kind, "action": "netem", **opts}

    # --- flapping ------------------------------------------------------------------

    def flap(self, target: str, period: float, count: int) -> dict:
        """Take ``target`` down and back up ``count`` times, each flap ``period`` seconds
        of the fabric's clock, down the first half of it; what it names."""
        kind, links = self.links(target)
        self.flaps[target] = Flap(period, count, False, self.now())
        self.run_due(self.now())
        return {
            "target": target,
            "kind": kind,
            "action": "flap",
            "period": period,
            "count": count,
            "links": [_cable(a, b) for a, b in links],
        }

    def next_due(self) -> float | None:
        """When a flap's next change is due."""
        return min((f.next for f in self.flaps.values()), default=None)

    def run_due(self, now: float) -> None:
        """Carry out the flaps' changes due by ``now``."""
        for target, f in list(self.flaps.items()):
            while self.flaps.get(target) is f and f.next <= now:
                f.down = not f.down
                self.set_down(target, f.down, flapping=True)
                f.next += f.period / 2
                if not f.down:
                    f.left -= 1
                    if f.left == 0:
                        del self.flaps[target]

    # --- the state, for listings and the journal ------------------------------------

    def _name(self, end: tuple[str, str]) -> str:
        return net_cabling.name(self.nets, end)

    def state(self) -> dict:
        """The faults in force: links down (by their switch port), rate caps (by end,
        bits per second), flaps with where they are."""
        return {
            "down": sorted(self._name(e) for e in self.down),
            "rates": {self._name(e): b for e, b in sorted(self.rates.items())},
            "flaps": [
                {"target": t, "period": f.period, "left": f.left, "down": f.down, "next": f.next}
                for t, f in self.flaps.items()
            ],
        }

    def restore(self, doc: dict, where: str) -> None:
        """Bring back a :meth:`state` (``up --resume``), without writing its events
        again; a name the networks do not have is refused (``where``: the journal)."""
        ends: dict[str, tuple[str, str]] = {}
        for a, b in self.nets.links:
            for e in (a, b):
                ends[self._name(e)] = e
        for i, text in enumerate(doc.get("down", [])):
            if text not in ends or ends[text][0] not in self.nets.switches:
                raise _bad(f"{where}: net.down.{i}", f"{text!r}: no switch port of a cable")
        for text in doc.get("rates", {}):
            if text not in ends:
                raise _bad(f"{where}: net.rates", f"{text!r}: no end of a cable")
        for i, f in enumerate(doc.get("flaps", [])):
            try:
                self.links(f["target"])
            except InputError:
                raise _bad(f"{where}: net.flaps.{i}.target", repr(f["target"])) from None
        for text in doc.get("down", []):
            self._state(ends[text], False)
            self.down.add(ends[text])
        for text, bits in doc.get("rates", {}).items():
            self._rate(ends[text], bits)
        for f in doc.get("flaps", []):
            self.flaps[f["target"]] = Flap(f["period"], f["left"], f["down"], f["next"])


@dataclass
class Flap:
    """A flap of the other networks: its period, the flaps left, whether its target is
    down now, when its next change is due (the fabric's clock)."""

    period: float
    left: int
    down: bool
    next: float
