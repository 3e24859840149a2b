"""The records of a dump made into a Fabric: nodes with their identities, addresses
and port counts, then the cables; what InfiniBand does not allow is warned about and
repaired by the rules ``validate`` applies (fabriclab.model.addressing).
"""

from __future__ import annotations

from ...ib import rates
from ...ib.ids import DEVID_MAX, NODE_DESC_BYTES, VENDID_MAX
from ...model import addressing
from ...model.fabric import Fabric, FabricError, Node
from .records import Records
from .tokens import ID_GUID


def to_fabric(recs: Records) -> Fabric:
    """The nodes and cables of the records as a Fabric, with what InfiniBand does not allow
    warned about and repaired."""
    fab = Fabric()
    nodes: dict[str, Node] = {}
    for x, xp in recs.links:
        r = recs.recs[x]
        if xp > r.max_port:
            r.max_port = xp
    for label in recs.order:
        r = recs.recs[label]
        if not r.defined_at:
            recs.warn(
                0,
                f"node {label} ({r.desc or '?'}) is only named as the far end of a "
                "cable; its ports are unknown",
            )
        nports = max(r.nports, r.max_port, 1)
        ident = None if ID_GUID.match(label) else label
        guid = r.guid if r.guid is not None else 0
        desc = r.desc or ""
        if len(desc.encode()) > NODE_DESC_BYTES:
            recs.warn(
                r.defined_at if r.defined_at > 0 else 0,
                f"{label}: description {desc[:30]!r}… is longer than the {NODE_DESC_BYTES} "
                "bytes of a NodeDescription; cut to that",
            )
            desc = desc.encode()[:NODE_DESC_BYTES].decode(errors="ignore")
        n = Node(
            r.type,
            guid,
            nports,
            desc,
            vendid=r.vendid,
            devid=r.devid,
            sysimgguid=r.sysimgguid,
            port_guid=r.port_guid,
            ident=ident,
        )
        n.lid, n.lmc, n.enhanced_port0 = r.lid, r.lmc, r.enhanced
        for pn, pg in r.port_guids.items():
            if 0 < pn <= nports:
                n.ports[pn].guid = pg  # type: ignore[union-attr]
        for pn, (lid, lmc) in r.port_lids.items():
            if 0 < pn <= nports:
                p = n.ports[pn]
                p.lid, p.lmc = lid, lmc  # type: ignore[union-attr]
        for pn, (w, s) in r.down_ports.items():
            p = n.ports[pn]
            if p is not None:
                p.width, p.speed = w, s
        for what, value, top in (
            ("vendor id", n.vendid, VENDID_MAX),
            ("device id", n.devid, DEVID_MAX),
        ):
            if value > top:
                recs.warn(
                    r.defined_at if r.defined_at > 0 else 0,
                    f"{label}: {what} 0x{value:x} is more than its {top.bit_length()} bits; "
                    "taken as 0",
                )
                if what == "vendor id":
                    n.vendid = 0
                else:
                    n.devid = 0
        try:
            fab.add(n)
        except FabricError as e:  # duplicate GUID under two ids
            recs.warn(0, str(e))
            continue
        nodes[label] = n
    done: set = set()
    for (a, ap), (b, bp, rate, line) in recs.links.items():
        if (a, ap) in done or a not in nodes or b not in nodes:
            continue
        done.add((a, ap))
        done.add((b, bp))
        w, s = rate if rate else (rates.UNKNOWN_WIDTH, rates.UNKNOWN_SPEED)
        pa, pb = nodes[a].ports[ap], nodes[b].ports[bp]
        if pa is None or pb is None:
            recs.warn(line, f"bad port in {a}[{ap}] -- {b}[{bp}]")
            continue
        try:
            fab.connect(pa, pb, w, s)
        except FabricError as e:
            recs.warn(line, str(e))
    _repair_addresses(recs, fab)
    return fab


def _repair_addresses(recs: Records, fab: Fabric) -> None:
    """What ``validate`` would refuse (fabriclab.model.addressing), repaired: a LID
    outside the unicast range or overlapping another is left unassigned (import gives
    it one from the LID plan); a node whose GUID another node owns is left out."""
    for a in addressing.problems(fab):
        if a.kind == "lid":
            if a.port is not None:
                a.port.lid = a.port.lmc = 0
            else:
                a.node.lid = a.node.lmc = 0
            recs.warn(0, f"{a.node.label} ({a.node.desc}): {a.what}; left unassigned")
        elif a.node in fab.nodes:
            fab.remove(a.node)
            recs.warn(0, f"{a.node.label} ({a.node.desc}): {a.what}; node left out")
