"""Traps: the Notices (SubnTrap) a node sends its master subnet manager when something
about it changed (IBA Vol. 1, 14.2.5.1), and the change the fabric server makes itself:
a subnet manager attaching at a port, or leaving it, shows in that port's
CapabilityMask (IsSM).
"""

from __future__ import annotations

from ..ib import simwire
from ..ib.caps import CAP_IS_CAP_MASK_NOTICE, CAP_IS_NOTICE, CAP_IS_SM, CAP_IS_TRAP
from ..ib.enums import NodeType
from ..ib.mad.consts import (
    TRAP_BAD_PKEY,
    TRAP_CAPABILITY_MASK_CHANGE,
    TRAP_LINK_STATE_CHANGE,
    Method,
    MgmtClass,
)
from ..ib.mad.view import trap
from .agents import receiver
from .router import Router
from .state import SimPort
from .transport import Client, Stats, Transport


class Traps:
    """Sends the traps of the fabric's nodes to the subnet managers attached to
    ``transport``, along ``router``'s routes."""

    def __init__(self, transport: Transport, router: Router, stats: Stats):
        self.transport = transport
        self.router = router
        self.stats = stats
        self._tid = 0

    def send(self, port: SimPort, number: int, **details: int) -> None:
        """Trap ``number`` from ``port``'s node to its master SM, if it has one and a
        route to it.  Switches raise traps from port 0.  ``details``: the Notice's data
        fields, for a trap other than 128 and 144 (whose the fabric fills in)."""
        src = port.node.ports[0] if port.node.is_switch else port
        if src is None or not src.lid or not src.smlid:
            return
        dest = self.router.lid_route(src, src.smlid, True)[0]
        if dest is None:
            return
        clients = self.transport.clients.values()
        found = receiver(clients, dest, int(MgmtClass.SMI), 1, int(Method.TRAP), 0)
        sm = found[0] if found else next((c for c in clients if c.issm and c.port is dest), None)
        if sm is None:
            return
        node = src.node
        if number == TRAP_LINK_STATE_CHANGE:
            details = {"NoticeDataLID": src.lid}
        elif number == TRAP_CAPABILITY_MASK_CHANGE:
            details = {"NoticeDataTrap144LID": src.lid, "NoticeDataTrap144CapMask": src.cap_mask}
        self._tid = (self._tid + 1) & 0xFFFF_FFFF
        mad = trap(
            self._tid,
            number,
            src.lid,
            NodeType.SWITCH if node.is_switch else NodeType.CA,
            **details,
        )
        self.stats.traps += 1
        self.transport.send(sm, simwire.request(src.smlid, src.lid, mad))

    def bad_pkey(self, port: SimPort, number: int, src: SimPort, drop) -> None:
        """Trap ``number`` (257: a CA, 259: a switch port) for a packet from ``src``
        that ``port`` discarded for its P_Key (``drop``: a partitions.Drop)."""
        details = {}
        if number == TRAP_BAD_PKEY:
            details = {
                "NoticeDataTrap257LID1": src.lid,
                "NoticeDataTrap257LID2": drop.port.lid,
                "NoticeDataTrap257Key": drop.pkey,
            }
        self.send(port, number, **details)

    def set_issm(self, cl: Client, on: bool) -> None:
        """Client ``cl`` is now the subnet manager at its port, or no longer: the port's
        IsSM capability follows (while any SM is attached there), and a port that
        reports capability changes says so with trap 144."""
        cl.issm = on
        port = cl.port
        if not on and any(c.issm and c.port is port for c in self.transport.clients.values()):
            return
        old = port.cap_mask
        port.cap_mask = old | CAP_IS_SM if on else old & ~CAP_IS_SM
        if port.cap_mask != old:
            port.changed()
            if old & (CAP_IS_NOTICE | CAP_IS_TRAP) and old & CAP_IS_CAP_MASK_NOTICE:
                self.send(port, TRAP_CAPABILITY_MASK_CHANGE)
