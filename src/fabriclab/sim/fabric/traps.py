"""Traps: the Notices (SubnTrap) a node sends its master subnet manager when something
about it changed (IBA Vol. 1, 14.2.5.1), and the change a subnet manager attaching at a
port, or leaving it, makes to that port's CapabilityMask (IsSM).

Which attached tool is the subnet manager at a port, and how a Notice reaches it, are
the ways in's business (:class:`SmPorts`, implemented by :mod:`..wire.notices`).
"""

from __future__ import annotations

from typing import Protocol

from ...ib.caps import CAP_IS_CAP_MASK_NOTICE, CAP_IS_NOTICE, CAP_IS_SM, CAP_IS_TRAP
from ...ib.enums import NodeType
from ...ib.mad.consts import TRAP_BAD_PKEY, TRAP_CAPABILITY_MASK_CHANGE, TRAP_LINK_STATE_CHANGE
from ...ib.mad.view import trap
from .router import Router
from .state import SimPort


class SmPorts(Protocol):
    """The subnet managers attached to the fabric, as its traps see them."""

    def sm_at(self, port: SimPort) -> object | None:
        """The subnet manager attached at ``port`` that takes traps, if any."""
        ...

    def deliver(self, sm: object, src: SimPort, mad: bytes) -> None:
        """Hand the Notice ``mad`` from ``src`` to ``sm``."""
        ...


class Traps:
    """Sends the traps of the fabric's nodes to their subnet managers (``sms``; none
    until the fabric is served), along ``router``'s routes."""

    def __init__(self, router: Router, sms: SmPorts | None = None):
        self.router = router
        self.sms = sms
        self._tid = 0

    def send(self, port: SimPort, number: int, **details: int) -> None:
        """Trap ``number`` from ``port``'s node to its master SM, if it has one and a
        route to it.  Switches raise traps from port 0.  ``details``: the Notice's data
        fields, for a trap other than 128 and 144 (whose the fabric fills in)."""
        src = port.node.ports[0] if port.node.is_switch else port
        if src is None or not src.lid or not src.smlid or self.sms is None:
            return
        dest = self.router.lid_route(src, src.smlid, True)[0]
        if dest is None:
            return
        sm = self.sms.sm_at(dest)
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
        self.sms.deliver(sm, src, mad)

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

    def sm_attached(self, port: SimPort, on: bool) -> None:
        """A subnet manager is now attached at ``port``, or none is any longer: the
        port's IsSM capability follows, and a port that reports capability changes says
        so with trap 144."""
        old = port.cap_mask
        port.cap_mask = old | CAP_IS_SM if on else old & ~CAP_IS_SM
        if port.cap_mask != old:
            port.changed()
            if old & (CAP_IS_NOTICE | CAP_IS_TRAP) and old & CAP_IS_CAP_MASK_NOTICE:
                self.send(port, TRAP_CAPABILITY_MASK_CHANGE)
