"""Addresses as InfiniBand allows them, checked in one place: every LID range (a switch's,
or a CA port's: ``lid .. lid + 2**LMC - 1``) unicast and overlapping no other, and every
GUID 64-bit, non-zero and owned by one node.  The model builder (``validate``) refuses a
fabric with such problems; the dump parser (``import``) repairs them with a warning, so
that import never writes a spec that validate rejects."""

from __future__ import annotations

from dataclasses import dataclass

from ..ib.ids import GUID_MAX, LID_MAX, LID_MIN, LMC_MAX
from .fabric import Fabric, Node, Port


@dataclass(frozen=True)
class AddressProblem:
    """One LID or GUID InfiniBand does not allow, and the node (and port) it belongs to."""

    node: Node
    port: Port | None  # the CA port whose LID or GUID it is; None: the node's own
    kind: str  # "lid" or "guid"
    what: str


def _name(n: Node) -> str:
    return n.name or (f"{n.label} ({n.desc})" if n.desc else n.label)


def _lid_ends(fabric: Fabric):
    """(node, port or None, lid, lmc) of every assigned LID: a switch's port 0, each CA
    port."""
    for n in fabric.nodes:
        if n.is_switch:
            if n.lid:
                yield n, None, n.lid, n.lmc
        else:
            for p in n.iter_ports():
                if p.lid:
                    yield n, p, p.lid, p.lmc


def _show(lid: int, lmc: int) -> str:
    if not lmc:
        return f"LID {lid}"
    return f"LIDs {lid}-{lid + (1 << lmc) - 1} (LMC {lmc})"


def lid_problems(fabric: Fabric) -> list[AddressProblem]:
    """LIDs outside the unicast range, LMCs out of range, and LID ranges that overlap an
    earlier one (in LID order)."""
    out: list[AddressProblem] = []
    ranges = []
    for n, p, lid, lmc in _lid_ends(fabric):
        where = f" of port {p.num}" if p is not None and n.nports > 1 else ""
        if not LID_MIN <= lid <= LID_MAX:
            shown = (
                f"LID {lid} (0x{lid:x})"
                if 0 <= lid.bit_length() <= 64 and lid > 0
                else f"LID {lid}"
            )
            out.append(
                AddressProblem(
                    n,
                    p,
                    "lid",
                    f"{shown}{where} is not a unicast LID "
                    f"(0x{LID_MIN:04x}-0x{LID_MAX:04x}, IBA 4.1.3)",
                )
            )
            continue
        if not 0 <= lmc <= LMC_MAX:
            out.append(AddressProblem(n, p, "lid", f"LMC {lmc}{where} is not 0-{LMC_MAX}"))
            continue
        top = lid + (1 << lmc) - 1
        if top > LID_MAX:
            out.append(
                AddressProblem(
                    n,
                    p,
                    "lid",
                    f"LID {lid} with LMC {lmc}{where} spans LIDs "
                    f"{lid}-{top}, past the last unicast LID {LID_MAX} (0x{LID_MAX:x})",
                )
            )
            continue
        ranges.append((lid, top, lmc, n, p))
    ranges.sort(key=lambda r: (r[0], r[1]))
    last = None  # the range reaching highest so far
    for r in ranges:
        lid, top, lmc, n, p = r
        if last is not None and lid <= last[1]:
            other = last
            shared = lid
            what = (
                f"LID {shared} is already used by {_name(other[3])}"
                if not other[2] and not lmc
                else f"{_show(lid, lmc)} overlap{'s' if not lmc else ''} {_show(other[0], other[2])} "
                f"of {_name(other[3])} at LID {shared}"
            )
            out.append(AddressProblem(n, p, "lid", what))
            continue
        if last is None or top > last[1]:
            last = r
    return out


def guid_problems(fabric: Fabric) -> list[AddressProblem]:
    """Node and port GUIDs.  A node may repeat its own GUID (a switch's ports share the
    port-0 GUID; a one-port CA's port GUID is its node GUID), but no GUID belongs to two
    nodes.  A node named only by an id (ibsim nets) gets its GUIDs from the plan, except
    port GUIDs given explicitly."""
    out: list[AddressProblem] = []
    owner: dict[int, Node] = {}
    for n in fabric.nodes:
        ends: list[tuple[Port | None, int]] = []
        if n.ident is None:
            ends = [(None, n.guid), (None, n.port_guid)]
        if not n.is_switch:
            ends += [
                (p, p.guid)
                for p in n.iter_ports()
                if n.ident is None or p.guid != n.port_guid_for(p.num)
            ]
        mine: set[int] = set()
        seen: set[int] = set()
        for p, g in ends:
            if g in seen:
                continue
            seen.add(g)
            label = "GUID" if p is None else f"port {p.num} GUID"
            if g <= 0 or g > GUID_MAX:
                shown = f"0x{g:x}" if 0 <= g.bit_length() <= 80 else f"of {g.bit_length()} bits"
                out.append(
                    AddressProblem(
                        n, p, "guid", f"{label} {shown} is not a 64-bit GUID (1-0x{GUID_MAX:x})"
                    )
                )
                continue
            other = owner.get(g)
            if other is not None and other is not n:
                out.append(
                    AddressProblem(
                        n, p, "guid", f"{label} 0x{g:016x} is already used by {_name(other)}"
                    )
                )
                continue
            mine.add(g)
        for g in mine:
            owner.setdefault(g, n)
    return out


def problems(fabric: Fabric) -> list[AddressProblem]:
    """Every GUID problem, then every LID problem."""
    return guid_problems(fabric) + lid_problems(fabric)
