"""The net file of OFA's ``ibsim`` simulator, so the Debian ibsim can load any fabric.

ibsim reads ibnetdiscover's own format (``ibsim/sim_net.c``): ``vendid=``/``devid=``/
``sysimgguid=`` and ``switchguid=``/``caguid=`` set the next node's identity, a node
header line names it, and its port lines cable it; ``lid N`` and ``enhanced port 0``
on a switch header and ``# lid N lmc M`` on CA port lines set LIDs.  So the net file is
the whole fabric in that format, every node once, in fabric order, with a comment
header.

What ibsim cannot express (its limits, not the file's):
- a CA port GUID equal to the node GUID: ibsim gives port N the GUID node+N, so a
  single-port ConnectX-7 (port GUID = node GUID on real hardware) shows node+1;
- speeds it does not know: ibsim 0.10 (Debian 12) stops at HDR, ibsim 0.12 at NDR;
  an unknown speed token leaves the port at ibsim's default (SDR enabled);
- a router port's LID and speed: ibsim reads neither from a router's port lines, so
  the SM gives it the lowest free LID and its link runs at QDR at most;
- more than 2048 nodes, 256 switches or 13,312 ports unless started with -N/-S/-P
  (``limits()`` gives the numbers to pass).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ib import rates
from ..ib.enums import NodeType
from ..model.fabric import Fabric
from .ibnetdiscover_render import ca_block, switch_block


def render(fabric: Fabric, *, title: str = "") -> str:
    """The net file of a fabric: every switch, then every CA, then every router, each once."""
    out = ["# ibsim net file written by fabriclab", "\n"]
    if title:
        out.insert(1, f"\n# {title}")
    for n in fabric.nodes:
        if n.is_switch:
            switch_block(n, list(n.iter_ports())[1:], out)
    for n in fabric.nodes:
        if n.type == NodeType.CA:
            ca_block(n, list(n.iter_ports()), out)
    for n in fabric.nodes:
        if n.type == NodeType.ROUTER:
            ca_block(n, list(n.iter_ports()), out)
    return "".join(out)


@dataclass(frozen=True)
class Limits:
    """The sizes of ibsim's node, switch and port tables a fabric needs."""

    nodes: int
    switches: int
    ports: int

    def args(self) -> list[str]:
        """ibsim flags that make room for this fabric (never below ibsim's defaults)."""
        return [
            "-N",
            str(max(self.nodes, 2048)),
            "-S",
            str(max(self.switches, 256)),
            "-P",
            str(max(self.ports, 13312)),
        ]


def limits(fabric: Fabric) -> Limits:
    """Table sizes ibsim needs: nodes, switches, and ports (a switch counts port 0)."""
    ports = sum(n.nports + (1 if n.is_switch else 0) for n in fabric.nodes)
    return Limits(len(fabric.nodes), len(fabric.switches()), ports)


# Speed tokens each ibsim release parses on a port line (sim_net.c).
KNOWN_SPEEDS = {
    (0, 10): {"SDR", "DDR", "QDR", "FDR10", "FDR", "EDR", "HDR"},
    (0, 12): {"SDR", "DDR", "QDR", "FDR10", "FDR", "EDR", "HDR", "NDR"},
}


def as_ibsim_shows(fabric: Fabric, version: tuple[int, int] = (0, 10)) -> Fabric:
    """Change ``fabric`` in place into what ibsim serves for its net file: CA port N has
    GUID node+N; a link whose speed ibsim cannot parse comes up at SDR; and since ibsim
    reads no speed from a router's port lines, a router's link runs at QDR at most.
    Used to compare the real tools' output under ibsim with fabriclab's renderer."""
    known = KNOWN_SPEEDS[version]
    sdr, qdr = rates.SPEEDS["SDR"], rates.SPEEDS["QDR"]
    for n in fabric.nodes:
        for p in n.iter_ports():
            if not n.is_switch:
                p.guid = n.guid + p.num
            if p.peer is None:
                continue
            if p.speed.token not in known:
                p.speed = sdr
            if NodeType.ROUTER in (n.type, p.peer.node.type):
                p.speed = rates.slower(p.speed, qdr)
    return fabric
