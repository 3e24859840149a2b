"""ibnetdiscover's ports report (``-p``) read into records: one line per port with its
far end, or none for a port that is down; multi-port CAs are told apart from single-port
ones by their port GUIDs, since the report names ports, not nodes.
"""

from __future__ import annotations

import re

from ...ib import rates
from ...ib.enums import NodeType
from ...ib.ids import NODE_DESC_BYTES
from ...limits import DUMP_LINE_MAX
from .records import NodeRec, Records
from .tokens import ANYHEX, LID, TYPE_BY_ABBR, hex_guid

PORTS_LINE = re.compile(
    rf"^(CA|SW|RT)\s+({LID})\s+(\d{{1,8}})\s+0x({ANYHEX})\s+(\S+)\s+(\S+)\s*(.*)$"
)
# Descriptions are at most 64 bytes: bounded, two quoted descriptions cannot make the
# match backtrack quadratically (an unbounded '(.*)' - '(.*)' took 17 s on a 100 KB line).
_PORTS_PEER = re.compile(
    rf"^-\s+(CA|SW|RT)\s+({LID})\s+(\d{{1,8}})\s+0x({ANYHEX})\s+\(\s*'(.{{0,{NODE_DESC_BYTES}}})'\s+-\s+"
    rf"'(.{{0,{NODE_DESC_BYTES}}})'\s*\)\s*$"
)


def looks_like_ports(lines: list[str]) -> bool:
    """Whether a dump is a ports report: its first line that is not a comment is a port line."""
    for line in lines:
        s = line.strip()
        if not s or s.startswith(("#", "ibwarn")):
            continue
        return len(s) <= DUMP_LINE_MAX and bool(PORTS_LINE.match(s))
    return False


class PortsFormatParser(Records):
    """The records of a ports report."""

    def read(self, lines: list[str]) -> None:
        """Two passes: -p names ports, not nodes, so CA node identities are decided only
        once every port is known (see ``_ca_bases``)."""
        rows = []
        for no, raw in enumerate(lines, 1):
            line = raw.strip()
            if not line or line.startswith(("#", "ibwarn")):
                continue
            if self.long_line(no, line):
                continue
            m = PORTS_LINE.match(line)
            if not m:
                self.warn(no, f"not an ibnetdiscover -p line: {line[:60]!r}")
                continue
            t, lid, pnum, pguid = m.group(1), int(m.group(2)), int(m.group(3)), hex_guid(m.group(4))
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
                fguid = hex_guid(pm.group(4))
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

    def port_rec(self, t: str, lid: int, pnum: int, pguid: int, desc: str, bases: dict) -> NodeRec:
        ntype = TYPE_BY_ABBR[t]
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
