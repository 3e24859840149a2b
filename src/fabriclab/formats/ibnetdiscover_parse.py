"""``ibnetdiscover`` (rdma-core infiniband-diags) output, parsed into a fabric.

Parsing accepts what real dumps contain: ``ibwarn:`` lines and other noise before the
header, ``-g`` chassis grouping, ``-f`` field suffixes, ibdiagnet's variant (port
labels ``[1](1/1/1)``, fixed spaces), ibsim net files (node ids that are names), down
ports (``-p``), routers, multi-port CAs, and nodes that appear only as the far end of
a port line.  Anything it cannot read is reported with its line number and skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .. import inputs
from ..errors import InputError, Problem, ProblemLog
from ..ib import rates
from ..ib.enums import NodeType
from ..ib.ids import DEVID_MAX, MAX_PORTS, NODE_DESC_BYTES, VENDID_MAX
from ..limits import DUMP_BYTES_MAX, DUMP_LINE_MAX
from ..model import addressing
from ..model.fabric import Fabric, FabricError, Node, Port

# Hostile input is bounded before it is read: a line longer than any ibnetdiscover
# prints is skipped, every number pattern has a bounded number of digits (so int() is
# cheap and never refused), GUIDs have at most 16 hex digits, ports are 1-254, and no
# pattern can backtrack more than a bounded amount.  Problems are warnings (the first
# PROBLEMS_KEPT kept, the rest counted); addresses that InfiniBand does not allow are
# repaired by the same rules ``validate`` applies (fabriclab.model.addressing).


@dataclass
class Dump:
    """A parsed ibnetdiscover file."""

    fabric: Fabric
    source: str
    kind: str  # "topology" or "ports"
    from_guid: int | None = None
    from_port_guid: int | None = None
    generated: str | None = None
    warnings: list[Problem] = field(default_factory=list)
    warnings_dropped: int = 0  # warnings beyond the kept ones, counted only

    @property
    def from_port(self) -> Port | None:
        """The port the dump was taken from, when the header names it."""
        if self.from_port_guid is None:
            return None
        node = self.fabric.by_guid.get(self.from_guid or -1)
        if node is None:
            return None
        for p in node.iter_ports():
            if p.guid == self.from_port_guid and p.peer is not None:
                return p
        return next((p for p in node.iter_ports() if p.peer is not None), None)


_PORT = r"\d{1,3}"  # a port number or port count (checked against 1-254 after matching)
_LID = r"\d{1,6}"  # a LID (checked against the unicast range by the addressing rules)
_HEX = r"[0-9a-fA-F]{1,16}"  # a GUID: 64 bits
_ANYHEX = r"[0-9a-fA-F]{1,64}"  # as written; more than 16 digits is reported
_NODE_RE = re.compile(r'^(Switch|Ca|Hca|Rt)\s+(\d{1,8})\s+"([^"]*)"\s*(.*)$')
_SW_TAIL = re.compile(
    rf'^#\s*"(.*)"\s+(enhanced|base)\s+port\s+0\s+lid\s+({_LID})\s+lmc\s+(\d{{1,3}})'
)
_DESC_TAIL = re.compile(r'^#\s*"(.*)"')
_PORT_RE = re.compile(
    rf'^\[({_PORT})\](?:\[ext {_PORT}\])?((?:\([^)]*\))*)\s*"([^"]+)"\[({_PORT})\](?:\[ext {_PORT}\])?'
    rf"(?:\s*\(({_ANYHEX})\))?\s*(.*)$"
)
_FAST_SW_PORT = re.compile(
    rf'^\[({_PORT})\]\t"([SHR]-[0-9a-f]{{16}})"\[({_PORT})\](?:\(({_HEX})\) )?\t\t# "(.*)" lid ({_LID}) (\S+)$'
)
_FAST_CA_PORT = re.compile(
    rf'^\[({_PORT})\]\(({_HEX})\) \t"([SHR]-[0-9a-f]{{16}})"\[({_PORT})\](?: \(({_HEX})\) )?\t\t'
    rf'# lid ({_LID}) lmc (\d{{1,3}}) "(.*)" lid ({_LID}) (\S+)$'
)
_SW_PORT_TAIL = re.compile(rf'^#\s*"(.*)"\s+lid\s+({_LID})(?:\s+(\S+))?')
_CA_PORT_TAIL = re.compile(
    rf'^#\s*lid\s+({_LID})\s+lmc\s+(\d{{1,3}})\s+"(.*)"\s+lid\s+({_LID})(?:\s+(\S+))?'
)
_IDS_RE = re.compile(
    rf"^(vendid|devid|sysimgguid|switchguid|caguid|rtguid)\s*=\s*0x({_ANYHEX})(?:\(({_ANYHEX})\))?"
)
_FROM_RE = re.compile(rf"^#\s*Initiated from node ({_HEX}) port ({_HEX})")
_GEN_RE = re.compile(r"^#\s*Topology file: generated on (.*)$")
_RATE_RE = re.compile(r"^(\d{1,2}x)([A-Za-z0-9?]{1,8})$")
_PORTS_LINE = re.compile(
    rf"^(CA|SW|RT)\s+({_LID})\s+(\d{{1,8}})\s+0x({_ANYHEX})\s+(\S+)\s+(\S+)\s*(.*)$"
)
# Descriptions are at most 64 bytes: bounded, two quoted descriptions cannot make the
# match backtrack quadratically (an unbounded '(.*)' - '(.*)' took 17 s on a 100 KB line).
_PORTS_PEER = re.compile(
    rf"^-\s+(CA|SW|RT)\s+({_LID})\s+(\d{{1,8}})\s+0x({_ANYHEX})\s+\(\s*'(.{{0,{NODE_DESC_BYTES}}})'\s+-\s+"
    rf"'(.{{0,{NODE_DESC_BYTES}}})'\s*\)\s*$"
)
_GROUPING = re.compile(
    r"^(Chassis \d+|Non-Chassis Nodes|Hostname:|# (Spine|Line) Nodes|# Chassis (Switches|CAs))"
)
_DIRECTIVE = re.compile(r"^\w{1,64}\s*=")  # ibsim net directives: width=, speed=, …
_ID_GUID = re.compile(r"^([SHR])-([0-9a-fA-F]{1,16})$")
_LONG_ID_GUID = re.compile(r"^[SHR]-[0-9a-fA-F]{17,}$")
_HEXES = re.compile(r"\(([^)]*)\)")
_TYPE_BY_PREFIX = {"S": NodeType.SWITCH, "H": NodeType.CA, "R": NodeType.ROUTER}
_TYPE_BY_WORD = {
    "Switch": NodeType.SWITCH,
    "Ca": NodeType.CA,
    "Hca": NodeType.CA,
    "Rt": NodeType.ROUTER,
}
_TYPE_BY_ABBR = {"SW": NodeType.SWITCH, "CA": NodeType.CA, "RT": NodeType.ROUTER}


_RATE_CACHE: dict[str, tuple[rates.Width, rates.Speed] | None] = {}
_RATE_CACHE_MAX = 256  # garbage tokens must not grow it without bound


def _rate_tokens(tok: str | None) -> tuple[rates.Width, rates.Speed] | None:
    if not tok:
        return None
    hit = _RATE_CACHE.get(tok)
    if hit is not None or tok in _RATE_CACHE:
        return hit
    m = _RATE_RE.match(tok)
    out = (rates.width_or_unknown(m.group(1)), rates.speed_or_unknown(m.group(2))) if m else None
    if len(_RATE_CACHE) < _RATE_CACHE_MAX:
        _RATE_CACHE[tok] = out
    return out


@dataclass
class _NodeRec:
    label: str
    type: NodeType
    nports: int = 0
    desc: str | None = None
    guid: int | None = None
    port_guid: int | None = None
    sysimgguid: int = 0
    vendid: int = 0
    devid: int = 0
    lid: int = 0
    lmc: int = 0
    enhanced: bool = False
    defined_at: int = 0  # line of its block, 0 = only named by others
    port_guids: dict[int, int] = field(default_factory=dict)
    port_lids: dict[int, tuple[int, int]] = field(default_factory=dict)
    down_ports: dict[int, tuple[rates.Width, rates.Speed]] = field(default_factory=dict)
    max_port: int = 0


def _guid(text: str) -> int | None:
    """A GUID as written, or None when it has more than 64 bits."""
    return int(text, 16) if len(text.lstrip("0")) <= 16 else None


class _Parser:
    def __init__(self, source: str):
        self.source = source
        self.recs: dict[str, _NodeRec] = {}
        self.order: list[str] = []
        self.links: dict[tuple[str, int], tuple[str, int, tuple | None, int]] = {}
        self.log = ProblemLog()
        self.from_guid: int | None = None
        self.from_port_guid: int | None = None
        self.generated: str | None = None

    def warn(self, line: int, what: str) -> None:
        self.log.add(f"{self.source}:{line}" if line else self.source, what)

    def rec(self, label: str, type: NodeType | None = None, line: int = 0) -> _NodeRec:
        r = self.recs.get(label)
        if r is None:
            m = _ID_GUID.match(label)
            if m is None and _LONG_ID_GUID.match(label):
                self.warn(
                    line,
                    f"node id {label[:40]!r} has a GUID of more than 64 bits; kept as a plain name",
                )
            t = type or (_TYPE_BY_PREFIX[m.group(1)] if m else NodeType.CA)
            r = _NodeRec(label, t)
            if m:
                r.guid = int(m.group(2), 16)
            self.recs[label] = r
            self.order.append(label)
        return r

    def port_ok(self, pnum: int, label: str, line: int) -> bool:
        """A cabled port is 1-254 (port 0 is a switch's internal port, and NumPorts is
        8 bits with 255 reserved)."""
        if pnum == 0:
            self.warn(
                line,
                f"{label}[0]: port 0 is a switch's internal port and has no cable; line skipped",
            )
            return False
        if pnum > MAX_PORTS:
            self.warn(line, f"{label}[{pnum}]: InfiniBand ports are 1-{MAX_PORTS}; line skipped")
            return False
        return True

    def add_link(self, a: str, ap: int, b: str, bp: int, rate, line: int) -> None:
        """Record a cable; a dump lists most cables from both ends."""
        if not (self.port_ok(ap, a, line) and self.port_ok(bp, b, line)):
            return
        if a == b and ap == bp:
            self.warn(line, f"{a}[{ap}] is cabled to itself; line skipped")
            return
        links = self.links
        end_a, end_b = (a, ap), (b, bp)
        far_of_a = links.get(end_a)  # (node, port, rate, line) already recorded
        if far_of_a is None:
            far_of_b = links.get(end_b)
            if far_of_b is not None and (far_of_b[0], far_of_b[1]) != end_a:
                self.warn(
                    line,
                    f"{b}[{bp}] is cabled to {far_of_b[0]}[{far_of_b[1]}] "
                    f"(line {far_of_b[3]}) and to {a}[{ap}]; keeping the first",
                )
                return
            links[end_a] = (b, bp, rate, line)
            links[end_b] = (a, ap, rate, line)
        elif (far_of_a[0], far_of_a[1]) != end_b:
            self.warn(
                line,
                f"{a}[{ap}] is cabled to {far_of_a[0]}[{far_of_a[1]}] "
                f"(line {far_of_a[3]}) and to {b}[{bp}]; keeping the first",
            )
        elif rate and not far_of_a[2]:
            links[end_a] = (b, bp, rate, far_of_a[3])
            links[end_b] = (a, ap, rate, far_of_a[3])

    def long_line(self, no: int, line: str) -> bool:
        if len(line) > DUMP_LINE_MAX:
            self.warn(
                no,
                f"a line of {len(line)} characters, longer than ibnetdiscover prints "
                f"(at most {DUMP_LINE_MAX}); skipped",
            )
            return True
        return False

    # -- default format -------------------------------------------------------------
    def parse_topology(self, lines: list[str]) -> None:
        ids: dict[str, tuple[int, int | None]] = {}
        ids_line = 0
        cur: _NodeRec | None = None
        for no, raw in enumerate(lines, 1):
            line = raw.strip()
            if not line:
                cur = None
                continue
            if self.long_line(no, line):
                continue
            c0 = line[0]
            if c0 == "[" and cur is not None:
                self.port_line(cur, line, no)
                continue
            if c0 == "#":
                m = _FROM_RE.match(line)
                if m:
                    self.from_guid, self.from_port_guid = int(m.group(1), 16), int(m.group(2), 16)
                elif (g := _GEN_RE.match(line)) is not None:
                    self.generated = g.group(1).strip()
                continue
            m = _IDS_RE.match(line)
            if m:
                value = _guid(m.group(2))
                paren = _guid(m.group(3)) if m.group(3) else None
                if value is None or (m.group(3) and paren is None):
                    self.warn(no, f"{m.group(1)} has more than 64 bits; ignored")
                else:
                    ids[m.group(1)] = (value, paren if m.group(3) else None)
                    ids_line = ids_line or no
                continue
            m = _NODE_RE.match(line)
            if m:
                cur = self.node_line(m, ids, no)
                ids, ids_line = {}, 0
                continue
            if c0 == "[":
                self.warn(no, "port line outside a node block")
                continue
            if line.startswith(("ibwarn", "Topology file", "Initiated")) or _GROUPING.match(line):
                continue
            if _DIRECTIVE.match(line):
                continue
            self.warn(no, f"not an ibnetdiscover line: {line[:60]!r}")
        if ids:
            self.warn(
                ids_line,
                f"{', '.join(ids)} without the node line that follows them: "
                "the file looks truncated",
            )

    def node_line(self, m: re.Match, ids: dict, no: int) -> _NodeRec | None:
        word, nports, label, tail = m.group(1), int(m.group(2)), m.group(3), m.group(4)
        t = _TYPE_BY_WORD[word]
        if not 1 <= nports <= MAX_PORTS:
            self.warn(
                no,
                f"{label} has {nports} ports, but a node has 1-{MAX_PORTS} (NumPorts is "
                "8 bits); its port count is taken from its cables",
            )
            nports = 0
        r = self.rec(label, t, no)
        if r.defined_at:
            self.warn(
                no, f"node {label} appears twice (first at line {r.defined_at}); keeping the first"
            )
            return r
        r.type = t
        r.defined_at = no
        r.nports = nports
        key = {NodeType.SWITCH: "switchguid", NodeType.CA: "caguid", NodeType.ROUTER: "rtguid"}[t]
        if key in ids:
            r.guid, pg = ids[key]
            if pg is not None:
                r.port_guid = pg
        if "vendid" in ids:
            r.vendid = ids["vendid"][0]
        if "devid" in ids:
            r.devid = ids["devid"][0]
        if "sysimgguid" in ids:
            r.sysimgguid = ids["sysimgguid"][0]
        sm = _SW_TAIL.match(tail) if t == NodeType.SWITCH else None
        if sm:
            r.desc = sm.group(1)
            r.enhanced = sm.group(2) == "enhanced"
            r.lid, r.lmc = int(sm.group(3)), int(sm.group(4))
        else:
            dm = _DESC_TAIL.match(tail)
            if dm:
                r.desc = dm.group(1)
            else:
                r.desc = label if not _ID_GUID.match(label) else ""
        return r

    def port_line(self, cur: _NodeRec, line: str, no: int) -> None:
        # Fast paths for lines exactly as infiniband-diags prints them (most of a dump).
        if cur.type == NodeType.SWITCH:
            m = _FAST_SW_PORT.match(line)
            if m:
                pnum, rlabel, rp = int(m.group(1)), m.group(2), int(m.group(3))
                if not self.in_node(cur, pnum, no):
                    return
                far = self.recs.get(rlabel) or self.rec(rlabel)
                if far.desc is None:
                    far.desc = m.group(5)
                if far.type == NodeType.SWITCH:
                    if not far.lid:
                        far.lid = int(m.group(6))
                else:
                    far.port_lids.setdefault(rp, (int(m.group(6)), 0))
                    if m.group(4) is not None:
                        far.port_guids[rp] = int(m.group(4), 16)
                self.add_link(cur.label, pnum, rlabel, rp, _rate_tokens(m.group(7)), no)
                return
        else:
            m = _FAST_CA_PORT.match(line)
            if m:
                pnum, rlabel, rp = int(m.group(1)), m.group(3), int(m.group(4))
                if not self.in_node(cur, pnum, no):
                    return
                cur.port_guids[pnum] = int(m.group(2), 16)
                cur.port_lids[pnum] = (int(m.group(6)), int(m.group(7)))
                far = self.recs.get(rlabel) or self.rec(rlabel)
                if far.desc is None:
                    far.desc = m.group(8)
                if far.type == NodeType.SWITCH:
                    if not far.lid:
                        far.lid = int(m.group(9))
                else:
                    far.port_lids.setdefault(rp, (int(m.group(9)), 0))
                    if m.group(5) is not None:
                        far.port_guids[rp] = int(m.group(5), 16)
                self.add_link(cur.label, pnum, rlabel, rp, _rate_tokens(m.group(10)), no)
                return
        m = _PORT_RE.match(line)
        if not m:
            self.warn(no, f"not a port line: {line[:60]!r}")
            return
        pnum, lparen, rlabel, rp, rguid, tail = (
            int(m.group(1)),
            m.group(2),
            m.group(3),
            int(m.group(4)),
            m.group(5),
            m.group(6),
        )
        if not self.in_node(cur, pnum, no):
            return
        far = self.rec(rlabel, line=no)
        rate = None
        if cur.type == NodeType.SWITCH:
            tm = _SW_PORT_TAIL.match(tail)
            if tm:
                if far.desc is None:
                    far.desc = tm.group(1)
                rlid = int(tm.group(2))
                rate = _rate_tokens(tm.group(3))
                if far.type == NodeType.SWITCH:
                    if not far.lid:
                        far.lid = rlid
                else:
                    far.port_lids.setdefault(rp, (rlid, 0))
        else:
            hexes = [g.strip() for g in _HEXES.findall(lparen)]
            hexes = [g for g in hexes if g and all(c in "0123456789abcdefABCDEF" for c in g)]
            if hexes:
                g = _guid(hexes[-1])
                if g is None:
                    self.warn(no, f"port GUID {hexes[-1][:40]} has more than 64 bits; ignored")
                else:
                    cur.port_guids[pnum] = g
            tm = _CA_PORT_TAIL.match(tail)
            if tm:
                cur.port_lids[pnum] = (int(tm.group(1)), int(tm.group(2)))
                if far.desc is None:
                    far.desc = tm.group(3)
                rlid = int(tm.group(4))
                rate = _rate_tokens(tm.group(5))
                if far.type == NodeType.SWITCH:
                    if not far.lid:
                        far.lid = rlid
                else:
                    far.port_lids.setdefault(rp, (rlid, 0))
        if rguid:
            g = _guid(rguid)
            if g is None:
                self.warn(no, f"port GUID {rguid[:40]} has more than 64 bits; ignored")
            elif far.type != NodeType.SWITCH:
                far.port_guids[rp] = g
        self.add_link(cur.label, pnum, rlabel, rp, rate, no)

    def in_node(self, cur: _NodeRec, pnum: int, no: int) -> bool:
        if cur.nports and pnum > cur.nports:
            self.warn(no, f"{cur.label} has {cur.nports} ports, not {pnum}")
            return False
        return True

    # -- ports report (-p) ------------------------------------------------------------
    def parse_ports(self, lines: list[str]) -> None:
        """Two passes: -p names ports, not nodes, so CA node identities are decided only
        once every port is known (see ``_ca_bases``)."""
        rows = []
        for no, raw in enumerate(lines, 1):
            line = raw.strip()
            if not line or line.startswith(("#", "ibwarn")):
                continue
            if self.long_line(no, line):
                continue
            m = _PORTS_LINE.match(line)
            if not m:
                self.warn(no, f"not an ibnetdiscover -p line: {line[:60]!r}")
                continue
            t, lid, pnum, pguid = m.group(1), int(m.group(2)), int(m.group(3)), _guid(m.group(4))
            w, s, rest = (
                rates.width_or_unknown(m.group(5)),
                rates.speed_or_unknown(m.group(6)),
                m.group(7).strip(),
            )
            if pguid is None:
                self.warn(no, f"port GUID 0x{m.group(4)[:40]} has more than 64 bits; line skipped")
                continue
            if not self.port_ok(pnum, f"0x{pguid:x}", no):
                continue
            pm = _PORTS_PEER.match(rest)
            if pm:
                fguid = _guid(pm.group(4))
                fport = int(pm.group(3))
                if fguid is None:
                    self.warn(
                        no, f"port GUID 0x{pm.group(4)[:40]} has more than 64 bits; line skipped"
                    )
                    continue
                if not self.port_ok(fport, f"0x{fguid:x}", no):
                    continue
                far = (pm.group(1), int(pm.group(2)), fport, fguid, pm.group(6))
                desc = pm.group(5)
            else:
                far = None
                desc = (
                    rest[1:-1]
                    if rest.startswith("'") and rest.endswith("'") and len(rest) > 1
                    else rest
                )
            rows.append((no, (t, lid, pnum, pguid, desc), far, (w, s)))
        ends = [r[1] for r in rows] + [r[2] for r in rows if r[2] is not None]
        bases = _ca_bases(ends)
        for no, end, far, rate in rows:
            a = self.port_rec(*end, bases)
            if far is not None:
                b = self.port_rec(*far, bases)
                self.add_link(a.label, end[2], b.label, far[2], rate, no)
            else:
                a.down_ports[end[2]] = rate
                a.max_port = max(a.max_port, end[2])

    def port_rec(self, t: str, lid: int, pnum: int, pguid: int, desc: str, bases: dict) -> _NodeRec:
        ntype = _TYPE_BY_ABBR[t]
        guid = pguid if ntype == NodeType.SWITCH else bases.get((desc, pguid, pnum), pguid)
        label = f"{ntype.prefix}-{guid:016x}"
        r = self.recs.get(label)
        if r is None:
            r = self.rec(label, ntype)
            r.desc = desc
            r.defined_at = -1
            if ntype == NodeType.SWITCH:
                r.port_guid = pguid
        if ntype == NodeType.SWITCH:
            r.lid = lid
        else:
            r.port_guids[pnum] = pguid
            r.port_lids[pnum] = (lid, 0)
        return r

    # -- to a Fabric ---------------------------------------------------------------
    def fabric(self) -> Fabric:
        fab = Fabric()
        nodes: dict[str, Node] = {}
        for x, xp in self.links:
            r = self.recs[x]
            if xp > r.max_port:
                r.max_port = xp
        for label in self.order:
            r = self.recs[label]
            if not r.defined_at:
                self.warn(
                    0,
                    f"node {label} ({r.desc or '?'}) is only named as the far end of a "
                    "cable; its ports are unknown",
                )
            nports = max(r.nports, r.max_port, 1)
            ident = None if _ID_GUID.match(label) else label
            guid = r.guid if r.guid is not None else 0
            desc = r.desc or ""
            if len(desc.encode()) > NODE_DESC_BYTES:
                self.warn(
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
                    self.warn(
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
                self.warn(0, str(e))
                continue
            nodes[label] = n
        done: set = set()
        for (a, ap), (b, bp, rate, line) in self.links.items():
            if (a, ap) in done or a not in nodes or b not in nodes:
                continue
            done.add((a, ap))
            done.add((b, bp))
            w, s = rate if rate else (rates.UNKNOWN_WIDTH, rates.UNKNOWN_SPEED)
            pa, pb = nodes[a].ports[ap], nodes[b].ports[bp]
            if pa is None or pb is None:
                self.warn(line, f"bad port in {a}[{ap}] -- {b}[{bp}]")
                continue
            try:
                fab.connect(pa, pb, w, s)
            except FabricError as e:
                self.warn(line, str(e))
        self.repair_addresses(fab)
        return fab

    def repair_addresses(self, fab: Fabric) -> None:
        """What ``validate`` would refuse (fabriclab.model.addressing), repaired: a LID
        outside the unicast range or overlapping another is left unassigned (import gives
        it one from the LID plan); a node whose GUID another node owns is left out."""
        for a in addressing.problems(fab):
            if a.kind == "lid":
                if a.port is not None:
                    a.port.lid = a.port.lmc = 0
                else:
                    a.node.lid = a.node.lmc = 0
                self.warn(0, f"{a.node.label} ({a.node.desc}): {a.what}; left unassigned")
            elif a.node in fab.nodes:
                fab.remove(a.node)
                self.warn(0, f"{a.node.label} ({a.node.desc}): {a.what}; node left out")


def _ca_bases(ends) -> dict:
    """Node GUIDs of multi-port CAs in a ports report: ports with the same description
    whose GUIDs sit at node+N (the mlx4 / ibsim convention) for two or more distinct N
    belong to one node.  Any other CA port is its own node, GUID = port GUID (mlx5)."""
    groups: dict = {}
    for t, _lid, pnum, pguid, desc in ends:
        if t != "SW" and pguid - pnum > 0:
            groups.setdefault((desc, pguid - pnum), set()).add((pguid, pnum))
    out = {}
    for (desc, base), members in groups.items():
        if len({p for _, p in members}) > 1:
            for pguid, pnum in members:
                out[(desc, pguid, pnum)] = base
    return out


def parse(text: str, source: str = "<input>") -> Dump:
    """Parse ibnetdiscover output (default or ``-p``, detected) into a fabric."""
    lines = text.splitlines()
    p = _Parser(source)
    if lines and not text.endswith(("\n", "\r")) and lines[-1].strip():
        p.warn(
            len(lines),
            f"the last line ends without a newline: the file looks truncated; "
            f"line skipped ({lines[-1].strip()[:40]!r})",
        )
        lines[-1] = ""
    kind = "ports" if _looks_like_ports(lines) else "topology"
    if kind == "ports":
        p.parse_ports(lines)
    else:
        p.parse_topology(lines)
    if not p.recs:
        raise InputError(
            [Problem(source, "no nodes found: not ibnetdiscover output")],
            warnings=p.log.items,
            warnings_dropped=p.log.dropped,
        )
    fab = p.fabric()
    return Dump(
        fab, source, kind, p.from_guid, p.from_port_guid, p.generated, p.log.items, p.log.dropped
    )


def _looks_like_ports(lines: list[str]) -> bool:
    for line in lines:
        s = line.strip()
        if not s or s.startswith(("#", "ibwarn")):
            continue
        return len(s) <= DUMP_LINE_MAX and bool(_PORTS_LINE.match(s))
    return False


def read_file(path: str) -> str:
    """A dump's text: size-checked before reading; a binary file is refused at once
    (ibnetdiscover prints text; any undecodable byte becomes U+FFFD)."""
    return inputs.read_text(
        path, DUMP_BYTES_MAX, "ibnetdiscover output", strict=False, prefix="no nodes found: "
    )


def parse_file(path: str) -> Dump:
    """``parse`` of a file read by ``read_file``."""
    return parse(read_file(path), path)
