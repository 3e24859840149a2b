"""Miswiring: cabling a fabric other than its spec says (two cables swapped, a cable to
the wrong leaf), and comparing a fabric's actual cabling with the intended one."""

from __future__ import annotations

import re

from ..errors import InputError, Problem
from ..ib.enums import PhysState
from .cluster import Cluster
from .fabric import DOWN_SPEED, DOWN_WIDTH, Fabric, Node, Port

_PORT_REF = re.compile(r"^(.+)\[(\d+)\]$")


def port_ref(cluster: Cluster, text: str) -> Port:
    """The port ``SWITCH[port]`` or ``HOST/HCA[port]`` names (as the spec's links write
    them; a switch or CA also by description, id or GUID)."""
    m = _PORT_REF.match(text.strip())
    if m is None:
        raise InputError([Problem(text, "a port is written SWITCH[port] or HOST/HCA[port]")])
    name, num = m.group(1), int(m.group(2))
    node: Node | None = None
    if "/" in name:
        host, _, hca = name.partition("/")
        tray = cluster.tray(host)
        node = tray.hca(hca) if tray is not None else None
    if node is None:
        node = cluster.fabric.find(name)
    if node is None:
        raise InputError([Problem(text, f"no switch or HCA {name!r}")])
    if not 1 <= num <= node.nports or node.ports[num] is None:
        raise InputError([Problem(text, f"{node.desc!r} has no port {num}")])
    return node.ports[num]  # type: ignore[return-value]


def swap(cluster: Cluster, a_text: str, b_text: str) -> tuple[Port, Port]:
    """Swap the far ends of the cables at ports ``a`` and ``b``: what was cabled to ``a``
    is now cabled to ``b`` and the reverse (a port with no cable hands over none).
    Ports on two leaves make "a cable to the wrong leaf".  Checked before anything
    changes."""
    a, b = port_ref(cluster, a_text), port_ref(cluster, b_text)
    if a is b or a.peer is b:
        raise InputError([Problem(f"{a_text},{b_text}", "both ends of one cable: nothing to swap")])
    if a.peer is None and b.peer is None:
        raise InputError([Problem(f"{a_text},{b_text}", "neither port is cabled")])
    qa, qb = a.peer, b.peer
    rates = {id(p): (p.width, p.speed) for p in (a, b) if p.peer is not None}
    fabric = cluster.fabric
    for p, q in ((a, qa), (b, qb)):
        if q is not None:
            p.peer = q.peer = None
    for p, q, rate_of in ((a, qb, b), (b, qa, a)):
        if q is not None:
            width, speed = rates[id(rate_of)]
            fabric.connect(p, q, width, speed)
    _unlink_free(a, b, qa, qb)
    return a, b


def _unlink_free(*ports: Port | None) -> None:
    """Ports left without a cable show as down (what an unplugged port shows)."""
    for p in ports:
        if p is not None and p.peer is None:
            p.width, p.speed, p.phys = DOWN_WIDTH, DOWN_SPEED, PhysState.POLLING


def _end(p: Port) -> tuple[int, int]:
    return p.node.guid, p.num


def _name(p: Port) -> str:
    return f'"{p.node.desc}"[{p.num}]'


def compare(intended: Fabric, actual: Fabric) -> list[str]:
    """One line per cabling problem of ``actual`` against ``intended`` (nodes matched by
    GUID): each wrong cable with both its ends and where the spec cables each of them, a
    cable the spec has and nothing in its place, a node the spec does not have."""
    want: dict[tuple[int, int], Port] = {}
    for p, q in intended.links():
        want[_end(p)], want[_end(q)] = q, p
    lines: list[str] = []
    seen: set[tuple[int, int]] = set()
    for n in actual.nodes:
        if n.guid not in intended.by_guid:
            lines.append(f'unknown node "{n.desc}" (GUID 0x{n.guid:016x}): not in the spec')
    for p, q in actual.links():
        if (not q.node.is_switch, q.node.desc, q.num) < (not p.node.is_switch, p.node.desc, p.num):
            p, q = q, p  # the switch end first, then by name: the same line every time
        seen.add(_end(p))
        seen.add(_end(q))
        wp, wq = want.get(_end(p)), want.get(_end(q))
        if wp is not None and _end(wp) == _end(q):
            continue
        where = "; ".join(
            f"the spec cables {_name(x)} to {_name(w)}" if w is not None else f"{_name(x)} is free"
            for x, w in ((p, wp), (q, wq))
        )
        lines.append(f"wrong cable {_name(p)} <-> {_name(q)} ({where})")
    for p, q in intended.links():
        if _end(p) not in seen and _end(q) not in seen:
            lines.append(f"missing cable {_name(p)} <-> {_name(q)}")
    return lines
