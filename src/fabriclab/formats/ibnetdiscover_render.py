"""``ibnetdiscover`` (rdma-core infiniband-diags) output, rendered from a fabric.

Rendering follows ``infiniband-diags/ibnetdiscover.c``: the header, then switches and
CAs in libibnetdisc's order (see :mod:`.libibnetdisc`), each node as its ids block,
header line and one line per connected port.  ``-p`` is the one-line-per-port report.
``rdma_core`` picks the release whose output to follow (see :mod:`.rdma_core`: they
differ on XDR links); the default is the latest.
"""

from __future__ import annotations

import time

from ..ib.enums import NodeType
from ..model.fabric import Fabric, Node, Port
from .libibnetdisc import Scan, scan
from .rdma_core import LATEST, speed_shown


def header(start: Port, now: float | None = None, *, mads: tuple[int, int] | None = None) -> str:
    """The comment header: when (``now``, default the clock), ``-m``'s hops and MADs, and
    the node and port the scan started from."""
    t = time.time() if now is None else now
    out = f"#\n# Topology file: generated on {time.ctime(t)}\n#\n"
    if mads is not None:
        out += f"# Reported max hops discovered: {mads[0]}\n# Total MADs used: {mads[1]}\n"
    out += f"# Initiated from node {start.node.guid:016x} port {start.guid:016x}\n"
    return out


def _rate(p: Port, rdma_core: int) -> str:
    return f"{p.width.token}{speed_shown(p.speed, rdma_core).token}"


def _ids(n: Node) -> str:
    s = f"\nvendid=0x{n.vendid:x}\ndevid=0x{n.devid:x}\n"
    if n.sysimgguid:
        s += f"sysimgguid=0x{n.sysimgguid:x}\n"
    return s


def switch_block(n: Node, ports: list[Port], out: list[str], rdma_core: int = LATEST) -> None:
    """Append a switch's block to ``out``: its ids, header line and a line per cabled port."""
    esp = "enhanced" if n.enhanced_port0 else "base"
    out.append(
        f"{_ids(n)}switchguid=0x{n.guid:x}({n.port_guid:x})\n"
        f'Switch\t{n.nports} "{n.label}"\t\t# "{n.desc}" {esp} port 0 lid {n.lid} lmc {n.lmc}\n'
    )
    for p in ports:
        q = p.peer
        if q is None:
            continue
        r = q.node
        if r.is_switch:
            out.append(
                f'[{p.num}]\t"{r.label}"[{q.num}]\t\t# "{r.desc}" lid {r.lid} {_rate(p, rdma_core)}\n'
            )
        else:
            out.append(
                f'[{p.num}]\t"{r.label}"[{q.num}]({q.guid:x}) \t\t# "{r.desc}" lid {q.lid} {_rate(p, rdma_core)}\n'
            )


def ca_block(n: Node, ports: list[Port], out: list[str], rdma_core: int = LATEST) -> None:
    """Append a CA's or router's block to ``out``: its ids, header line and a line per
    cabled port."""
    kind, key = ("Rt", "rt") if n.type == NodeType.ROUTER else ("Ca", "ca")
    out.append(f'{_ids(n)}{key}guid=0x{n.guid:x}\n{kind}\t{n.nports} "{n.label}"\t\t# "{n.desc}"\n')
    for p in ports:
        q = p.peer
        if q is None:
            continue
        r = q.node
        far = f" ({q.guid:x}) " if not r.is_switch else ""
        out.append(
            f'[{p.num}]({p.guid:x}) \t"{r.label}"[{q.num}]{far}\t\t'
            f'# lid {p.lid} lmc {p.lmc} "{r.desc}" lid {q.base_lid} {_rate(p, rdma_core)}\n'
        )


def render(
    fabric: Fabric,
    start: Port,
    *,
    now: float | None = None,
    report_max_hops: bool = False,
    found: Scan | None = None,
    rdma_core: int = LATEST,
) -> str:
    """``ibnetdiscover`` (of rdma-core ``rdma_core``) run on the host that owns ``start``
    (default output)."""
    s = found or scan(fabric, start)
    out = [header(start, now, mads=(s.max_hops, s.total_mads) if report_max_hops else None)]
    for n in s.of_type(switch=True):
        switch_block(n, s.ports(n), out, rdma_core)
    cas = s.of_type(switch=False)
    for n in cas:
        if n.type == NodeType.CA:
            ca_block(n, s.ports(n), out, rdma_core)
    for n in cas:
        if n.type == NodeType.ROUTER:
            ca_block(n, s.ports(n), out, rdma_core)
    return "".join(out)


_TYPE = {NodeType.CA: "CA", NodeType.SWITCH: "SW", NodeType.ROUTER: "RT"}


def render_ports(
    fabric: Fabric, start: Port, *, found: Scan | None = None, rdma_core: int = LATEST
) -> str:
    """``ibnetdiscover -p`` (of rdma-core ``rdma_core``): every port libibnetdisc holds,
    node by node, ports descending."""
    s = found or scan(fabric, start)
    out: list[str] = []
    for n in s.nodes:
        t = _TYPE[n.type]
        for p in reversed(s.ports(n)):
            line = (
                f"{t:>2} {p.base_lid:5d} {p.num:2d} 0x{p.guid:016x} {p.width.token} "
                f"{speed_shown(p.speed, rdma_core).token}"
            )
            q = p.peer
            if q is not None:
                r = q.node
                line += (
                    f" - {_TYPE[r.type]:>2} {q.base_lid:5d} {q.num:2d} 0x{q.guid:016x}"
                    f" ( '{n.desc}' - '{r.desc}' )\n"
                )
            else:
                line += f"{'':36s}'{n.desc}'\n"
            out.append(line)
    return "".join(out)
