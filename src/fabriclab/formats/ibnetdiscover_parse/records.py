"""What a dump says, collected line by line before any Node is made: one record per
node id (its identity, addresses and known ports) and the cables between node ids, with
the rules for ports out of range, cables listed twice and ports cabled twice.

Problems are warnings (the first PROBLEMS_KEPT kept, the rest counted), each with the
source and line it was found at.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...errors import ProblemLog
from ...ib import rates
from ...ib.enums import NodeType
from ...ib.ids import MAX_PORTS
from ...limits import DUMP_LINE_MAX
from .tokens import ID_GUID, LONG_ID_GUID, TYPE_BY_PREFIX


@dataclass
class NodeRec:
    """One node as the dump describes it so far."""

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


class Records:
    """The nodes and cables of one dump, as its lines are read; each format's reader
    (:mod:`.default_format`, :mod:`.ports_format`) fills them in."""

    def __init__(self, source: str):
        self.source = source
        self.recs: dict[str, NodeRec] = {}
        self.order: list[str] = []
        self.links: dict[tuple[str, int], tuple[str, int, tuple | None, int]] = {}
        self.log = ProblemLog()
        self.from_guid: int | None = None
        self.from_port_guid: int | None = None
        self.generated: str | None = None

    def warn(self, line: int, what: str) -> None:
        self.log.add(f"{self.source}:{line}" if line else self.source, what)

    def rec(self, label: str, type: NodeType | None = None, line: int = 0) -> NodeRec:
        r = self.recs.get(label)
        if r is None:
            m = ID_GUID.match(label)
            if m is None and LONG_ID_GUID.match(label):
                self.warn(
                    line,
                    f"node id {label[:40]!r} has a GUID of more than 64 bits; kept as a plain name",
                )
            t = type or (TYPE_BY_PREFIX[m.group(1)] if m else NodeType.CA)
            r = NodeRec(label, t)
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
