"""Link state changes a subnet manager asks for through PortInfo (IBA Vol. 1,
14.2.5.6): a port disabled takes its link down at both ends, a port enabled again
trains its link, a port set Down retrains it.  Routes through the link are forgotten,
and each switch whose port changed reports it (SwitchInfo.PortStateChange, trap 128).

Whoever watches the links (:meth:`Links.watch`, the live fabric's event log) is told of
every link that went down or came up, and why: a PortInfo Set (an SM, ``ibportstate``)
or a fault.
"""

from __future__ import annotations

from collections.abc import Callable

from ...ib.enums import PhysState, PortState
from ...ib.mad.consts import TRAP_LINK_STATE_CHANGE
from .router import Router
from .state import SimPort
from .traps import Traps

# why a link changed, as a watcher is told
BY_SM = "sm"  # a PortInfo Set of PortPhysicalState (an SM, ibportstate)
BY_FAULT = "fault"  # a fault failed or restored the cable (the fault book tells of it)

# a watcher: (the end whose change it was, whether the link is up now, why)
Watcher = Callable[[SimPort, bool, str], None]


class Links:
    """Carries out the link changes the SMA is asked for (it is the SMA's ``events``)."""

    def __init__(self, router: Router, traps: Traps):
        self.router = router
        self.traps = traps
        self._watchers: list[Watcher] = []

    def watch(self, watcher: Watcher) -> None:
        """Tell ``watcher`` of every link that goes down or comes up from now on."""
        self._watchers.append(watcher)

    def _tell(self, p: SimPort, was_up: bool, why: str) -> None:
        """``p``'s link was ``was_up``; tell the watchers if that changed."""
        if p.up != was_up:
            for w in self._watchers:
                w(p, p.up, why)

    def _changed(self, ports: list[SimPort]) -> None:
        self.router.forget_links(ports)
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
        was_up = p.up
        p.phys, p.state = PhysState.DISABLED, PortState.DOWN
        changed = [p]
        if peer is not None and peer.phys == PhysState.LINKUP:
            peer.phys, peer.state = PhysState.POLLING, PortState.DOWN
            peer.counters.add("LinkDownedCounter")
            changed.append(peer)
        if p.fabric_port.peer is not None:
            p.counters.add("LinkDownedCounter")
        self._changed(changed)
        self._tell(p, was_up, BY_SM)

    def enable_port(self, p: SimPort) -> None:
        """Disabled -> Polling: if cabled to a port that is not disabled, the link trains
        and both ends come up in INIT."""
        was_up = p.up
        p.phys, p.state = PhysState.POLLING, PortState.DOWN
        peer = p.peer
        changed = [p]
        if peer is not None and peer.phys != PhysState.DISABLED and not p.held:
            for q in (p, peer):
                q.phys, q.state = PhysState.LINKUP, PortState.INIT
            changed.append(peer)
        self._changed(changed)
        self._tell(p, was_up, BY_SM)

    def retrain_port(self, p: SimPort) -> None:
        """PortState Down (an SM resetting a port): the link retrains and both ends come
        back in INIT.  Nothing failed, so no error counter moves."""
        if not p.up:
            return
        for q in (p, p.peer):
            q.state = PortState.INIT  # type: ignore[union-attr]
        self._changed([p, p.peer])  # type: ignore[list-item]

    def fail_link(self, p: SimPort, *, quiet: bool = False) -> None:
        """The cable of ``p`` fails (a fault): both ends go Down/Polling, as when ibsim
        unlinks a port (sim_cmd.c unlink_port); an up link counts LinkDownedCounter at
        both ends (the link error recovery failed, IBA 16.1.3.5).  ``quiet``: restoring
        saved state, nothing is counted or announced."""
        peer = p.peer
        ends = [q for q in (p, peer) if q is not None]
        was_up = p.up
        for q in ends:
            if q.phys != PhysState.DISABLED:
                q.phys = PhysState.POLLING
            q.state = PortState.DOWN
            if was_up and not quiet:
                q.counters.add("LinkDownedCounter")
        if quiet:
            self.router.forget_links(ends)
            for q in ends:
                q.changed()
        else:
            self._changed(ends)
            self._tell(p, was_up, BY_FAULT)

    def restore_link(self, p: SimPort) -> None:
        """The cable of ``p`` works again: unless an end is administratively disabled
        the link trains and both ends come up in INIT; the switches report the change
        (trap 128), so the subnet manager sweeps and activates it."""
        peer = p.peer
        if peer is None or p.up:
            return
        if p.phys == PhysState.DISABLED or peer.phys == PhysState.DISABLED:
            return
        for q in (p, peer):
            q.phys, q.state = PhysState.LINKUP, PortState.INIT
        self._changed([p, peer])
        self._tell(p, False, BY_FAULT)

    def retrain_link(self, p: SimPort) -> None:
        """The link of ``p`` retrains (at another width or speed): both ends go back to
        INIT and report the change; nothing failed, no error counter moves."""
        peer = p.peer
        for q in (p, peer):
            if q is not None:
                q.changed()
        if p.up and peer is not None:
            for q in (p, peer):
                q.state = PortState.INIT
            self._changed([p, peer])
