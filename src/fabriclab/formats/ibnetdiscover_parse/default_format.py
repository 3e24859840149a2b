"""ibnetdiscover's default output read into records: node blocks (ids, the node line)
and their port lines, as infiniband-diags prints them (fast paths) and as other writers
vary them: ``ibwarn:`` lines and other noise, ``-g`` chassis grouping, ``-f`` field
suffixes, ibdiagnet's file (port labels ``[1](1/1/1)``, fixed spaces) and ibsim net
files (node ids that are names, directives).
"""

from __future__ import annotations

import re

from ...ib.enums import NodeType
from ...ib.ids import MAX_PORTS
from .records import NodeRec, Records
from .tokens import ANYHEX, HEX, ID_GUID, LID, PORT, TYPE_BY_WORD, hex_guid, rate_tokens

_NODE_RE = re.compile(r'^(Switch|Ca|Hca|Rt)\s+(\d{1,8})\s+"([^"]*)"\s*(.*)$')
_SW_TAIL = re.compile(
    rf'^#\s*"(.*)"\s+(enhanced|base)\s+port\s+0\s+lid\s+({LID})\s+lmc\s+(\d{{1,3}})'
)
_DESC_TAIL = re.compile(r'^#\s*"(.*)"')
_PORT_RE = re.compile(
    rf'^\[({PORT})\](?:\[ext {PORT}\])?((?:\([^)]*\))*)\s*"([^"]+)"\[({PORT})\](?:\[ext {PORT}\])?'
    rf"(?:\s*\(({ANYHEX})\))?\s*(.*)$"
)
_FAST_SW_PORT = re.compile(
    rf'^\[({PORT})\]\t"([SHR]-[0-9a-f]{{16}})"\[({PORT})\](?:\(({HEX})\) )?\t\t# "(.*)" lid ({LID}) (\S+)$'
)
_FAST_CA_PORT = re.compile(
    rf'^\[({PORT})\]\(({HEX})\) \t"([SHR]-[0-9a-f]{{16}})"\[({PORT})\](?: \(({HEX})\) )?\t\t'
    rf'# lid ({LID}) lmc (\d{{1,3}}) "(.*)" lid ({LID}) (\S+)$'
)
_SW_PORT_TAIL = re.compile(rf'^#\s*"(.*)"\s+lid\s+({LID})(?:\s+(\S+))?')
_CA_PORT_TAIL = re.compile(
    rf'^#\s*lid\s+({LID})\s+lmc\s+(\d{{1,3}})\s+"(.*)"\s+lid\s+({LID})(?:\s+(\S+))?'
)
_IDS_RE = re.compile(
    rf"^(vendid|devid|sysimgguid|switchguid|caguid|rtguid)\s*=\s*0x({ANYHEX})(?:\(({ANYHEX})\))?"
)
_FROM_RE = re.compile(rf"^#\s*Initiated from node ({HEX}) port ({HEX})")
_GEN_RE = re.compile(r"^#\s*Topology file: generated on (.*)$")
_GROUPING = re.compile(
    r"^(Chassis \d+|Non-Chassis Nodes|Hostname:|# (Spine|Line) Nodes|# Chassis (Switches|CAs))"
)
_DIRECTIVE = re.compile(r"^\w{1,64}\s*=")  # ibsim net directives: width=, speed=, …
_HEXES = re.compile(r"\(([^)]*)\)")


class DefaultFormatParser(Records):
    """The records of a dump in the default format (and its variants)."""

    def read(self, lines: list[str]) -> None:
        """Reads a dump's lines into the records, and the header's source port and date."""
        ids: dict[str, tuple[int, int | None]] = {}
        ids_line = 0
        cur: NodeRec | None = None
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
                value = hex_guid(m.group(2))
                paren = hex_guid(m.group(3)) if m.group(3) else None
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

    def node_line(self, m: re.Match, ids: dict, no: int) -> NodeRec | None:
        word, nports, label, tail = m.group(1), int(m.group(2)), m.group(3), m.group(4)
        t = TYPE_BY_WORD[word]
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
                r.desc = label if not ID_GUID.match(label) else ""
        return r

    def port_line(self, cur: NodeRec, line: str, no: int) -> None:
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
                self.add_link(cur.label, pnum, rlabel, rp, rate_tokens(m.group(7)), no)
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
                self.add_link(cur.label, pnum, rlabel, rp, rate_tokens(m.group(10)), no)
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
                rate = rate_tokens(tm.group(3))
                if far.type == NodeType.SWITCH:
                    if not far.lid:
                        far.lid = rlid
                else:
                    far.port_lids.setdefault(rp, (rlid, 0))
        else:
            hexes = [g.strip() for g in _HEXES.findall(lparen)]
            hexes = [g for g in hexes if g and all(c in "0123456789abcdefABCDEF" for c in g)]
            if hexes:
                g = hex_guid(hexes[-1])
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
                rate = rate_tokens(tm.group(5))
                if far.type == NodeType.SWITCH:
                    if not far.lid:
                        far.lid = rlid
                else:
                    far.port_lids.setdefault(rp, (rlid, 0))
        if rguid:
            g = hex_guid(rguid)
            if g is None:
                self.warn(no, f"port GUID {rguid[:40]} has more than 64 bits; ignored")
            elif far.type != NodeType.SWITCH:
                far.port_guids[rp] = g
        self.add_link(cur.label, pnum, rlabel, rp, rate, no)

    def in_node(self, cur: NodeRec, pnum: int, no: int) -> bool:
        if cur.nports and pnum > cur.nports:
            self.warn(no, f"{cur.label} has {cur.nports} ports, not {pnum}")
            return False
        return True
