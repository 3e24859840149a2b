"""Miswiring on the other networks: Ethernet cables swapped on purpose (``up --networks
--swap``), and the cabling LLDP finds compared with the spec's, as
:mod:`.miswire` does for the compute fabric.

An end is written as the fault commands write it: ``SWITCH[port]`` for a switch port,
``ENDPOINT/IFACE`` for an endpoint's interface.  A cable is a pair of ends, each
``(node, interface)``, a switch's interface its port's name (``swp3``).
"""

from __future__ import annotations

import dataclasses
import re

from ..errors import InputError, Problem
from ..ethernet import SWITCH_MODELS, port_name
from .cluster import Cluster
from .miswire import swap as swap_ib
from .networks import Networks

End = tuple[str, str]
Cable = tuple[End, End]
_PORT = re.compile(r"^(.+)\[(\d+)\]$")
_SWP = re.compile(r"^swp(\d+)$")


def _bad(where: str, what: str) -> InputError:
    return InputError([Problem(where, what)])


def is_ethernet(nets: Networks | None, text: str) -> bool:
    """Whether ``text`` names an end on the other networks (not an InfiniBand port,
    which ``HOST/HCA[port]`` and an InfiniBand switch's ``NAME[port]`` write)."""
    if nets is None:
        return False
    text = text.strip()
    m = _PORT.match(text)
    if m:
        return m.group(1) in nets.switches
    node, sep, _ = text.partition("/")
    return bool(sep) and node in nets.endpoints


def end_ref(nets: Networks, text: str) -> End:
    """The end ``text`` names: a port of a switch (cabled or free) or an interface of an
    endpoint."""
    text = text.strip()
    m = _PORT.match(text)
    if m and m.group(1) in nets.switches:
        sw, num = nets.switches[m.group(1)], int(m.group(2))
        if not 1 <= num <= SWITCH_MODELS[sw.model].ports:
            raise _bad(text, f"{sw.name} ({SWITCH_MODELS[sw.model].name}) has no port {num}")
        return sw.name, port_name(num)
    node, sep, iface = text.partition("/")
    ep = nets.endpoints.get(node) if sep else None
    if ep is None:
        raise _bad(text, "an Ethernet end is written SWITCH[port] or ENDPOINT/IFACE")
    if all(i.name != iface for i in ep.interfaces):
        raise _bad(text, f"{node} has no interface {iface!r}")
    return node, iface


def swap(nets: Networks, a_text: str, b_text: str) -> Networks:
    """``nets`` with the far ends of the cables at ``a`` and ``b`` exchanged (what was
    cabled to ``a`` is cabled to ``b`` and the reverse; a free port hands over none):
    the cabling built, while ``nets`` stays the intended one.  Checked before anything
    changes."""
    a, b = end_ref(nets, a_text), end_ref(nets, b_text)
    where = f"{a_text},{b_text}"
    far: dict[End, End] = {}
    for p, q in nets.links:
        far[p], far[q] = q, p
    qa, qb = far.get(a), far.get(b)
    if a == b or qa == b:
        raise _bad(where, "both ends of one cable: nothing to swap")
    if qa is None and qb is None:
        raise _bad(where, "neither end is cabled")
    touched = {a, b}
    links = [c for c in nets.links if not touched & set(c)]
    links += [(x, q) for x, q in ((a, qb), (b, qa)) if q is not None]
    return dataclasses.replace(nets, links=links)


def swap_all(cluster: Cluster, pairs: list[str], built: bool) -> None:
    """Miswire ``cluster`` as ``up --swap A,B`` (each of ``pairs``) asks: two InfiniBand
    ports (:func:`.miswire.swap`) or two Ethernet ends (its networks' built cabling;
    ``built``: whether they are built at all)."""
    for pair in pairs:
        a, sep, b = pair.partition(",")
        if not sep:
            raise _bad("--swap", f"{pair!r}: give two ports, PORT,PORT")
        eth = [is_ethernet(cluster.networks, x) for x in (a, b)]
        if not any(eth):
            swap_ib(cluster, a, b)
        elif not all(eth):
            raise _bad(f"--swap {pair}", "an Ethernet end and an InfiniBand port: swap alike")
        elif not built:
            raise _bad(f"--swap {pair}", "Ethernet cables are built only with --networks")
        else:
            assert cluster.networks is not None
            cluster.networks = swap(cluster.networks, a, b)


def name(nets: Networks, end: End) -> str:
    """An end as the commands write it."""
    m = _SWP.match(end[1])
    if end[0] in nets.switches and m:
        return f"{end[0]}[{m.group(1)}]"
    return f"{end[0]}/{end[1]}"


def compare(nets: Networks, actual: list[Cable]) -> list[str]:
    """One line per cabling problem of ``actual`` (cables as found, each seen from one end
    or both) against ``nets``'s: each wrong cable with both its ends and where the spec
    cables each, a cable of the spec's with nothing found at either end."""
    want: dict[End, End] = {}
    for p, q in nets.links:
        want[p], want[q] = q, p
    lines: list[str] = []
    seen: set[End] = set()
    done: set[frozenset[End]] = set()
    for p, q in actual:
        key = frozenset((p, q))
        if key in done:
            continue
        done.add(key)
        if (p[0] not in nets.switches, p) > (q[0] not in nets.switches, q):
            p, q = q, p  # the switch end first, then by name: the same line every time
        seen.update((p, q))
        if want.get(p) == q:
            continue
        where = "; ".join(
            f"the spec cables {name(nets, x)} to {name(nets, w)}"
            if w is not None
            else f"{name(nets, x)} is free in the spec"
            for x, w in ((p, want.get(p)), (q, want.get(q)))
        )
        lines.append(f"wrong cable {name(nets, p)} <-> {name(nets, q)} ({where})")
    lines.sort()  # by the switch end: the same lines in the same order every time
    for p, q in nets.links:
        if p not in seen and q not in seen:
            if p[0] not in nets.switches:
                p, q = q, p
            lines.append(f"missing cable {name(nets, p)} <-> {name(nets, q)} (no neighbour seen)")
    return lines
