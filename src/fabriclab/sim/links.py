"""Link state changes a subnet manager asks for through PortInfo (IBA Vol. 1,
14.2.5.6): a port disabled takes its link down at both ends, a port enabled again
trains its link, a port set Down retrains it.  Routes through the link are forgotten,
and each switch whose port changed reports it (SwitchInfo.PortStateChange, trap 128).
"""

from __future__ import annotations

from ..ib.enums import PhysState, PortState
from ..ib.mad.consts import TRAP_LINK_STATE_CHANGE
from .router import Router
from .state import SimPort
from .traps import Traps


class Links:
    """Carries out the link changes the SMA is asked for (it is the SMA's ``events``)."""

    def __init__(self, router: Router, traps: Traps):
        self.router = router
        self.traps = traps

    def _changed(self, ports: list[SimPort]) -> None:
        self.router.forget(links=True)
        for p in ports:
            p.changed()
            if p.node.is_switch:
                p.node.sw.state_change = 1  # type: ignore[union-attr]
        for p in ports:
            if p.node.is_switch:
                self.traps.send(p, TRAP_LINK_STATE_CHANGE)

    def disable_port(self, p: SimPort) -> None:
        """PortPhysicalState Disabled: the link goes down at both ends."""
        peer = p.peer
        p.phys, p.state = PhysState.DISABLED, PortState.DOWN
        changed = [p]
        if peer is not None and peer.phys == PhysState.LINKUP:
            peer.phys, peer.state = PhysState.POLLING, PortState.DOWN
            peer.counters.add("LinkDownedCounter")
            changed.append(peer)
        if p.fabric_port.peer is not None:
            p.counters.add("LinkDownedCounter")
        self._changed(changed)

    def enable_port(self, p: SimPort) -> None:
        """Disabled -> Polling: if cabled to a port that is not disabled, the link trains
        and both ends come up in INIT."""
        p.phys, p.state = PhysState.POLLING, PortState.DOWN
        peer = p.peer
        changed = [p]
        if peer is not None and peer.phys != PhysState.DISABLED:
            for q in (p, peer):
                q.phys, q.state = PhysState.LINKUP, PortState.INIT
            changed.append(peer)
        self._changed(changed)

    def retrain_port(self, p: SimPort) -> None:
        """PortState Down (an SM resetting a port): the link retrains and both ends come
        back in INIT.  Nothing failed, so no error counter moves."""
        if not p.up:
            return
        for q in (p, p.peer):
            q.state = PortState.INIT  # type: ignore[union-attr]
        self._changed([p, p.peer])  # type: ignore[list-item]
