"""The fabric's traps meet the attached tools: which client is the subnet manager a
Notice goes to (the agent registered for SubnTrap at the port, else the client that
holds IsSM there), and IsSM following the subnet managers that attach and leave."""

from __future__ import annotations

from ...ib import simwire
from ...ib.mad.consts import Method, MgmtClass
from ..fabric.routed import SmStandIn
from ..fabric.state import SimPort
from ..fabric.traps import Traps
from .agents import receiver
from .client import Client
from .stats import Stats
from .transport import Transport

_SMI, _TRAP = int(MgmtClass.SMI), int(Method.TRAP)


class SmClients:
    """The subnet managers among ``transport``'s clients, for ``traps``."""

    def __init__(self, transport: Transport, traps: Traps, stats: Stats):
        self.transport = transport
        self.traps = traps
        self.stats = stats
        self.standin: SmStandIn | None = None  # a --routed fabric's SM until a real one
        traps.sms = self

    def sm_at(self, port: SimPort) -> Client | None:
        """The client at ``port`` that takes a SubnTrap: the agent registered for it
        (host library), else one that holds IsSM there."""
        clients = self.transport.clients.values()
        found = receiver(clients, port, _SMI, 1, _TRAP, 0)
        if found:
            return found[0]
        return next((c for c in clients if c.issm and c.port is port), None)

    def deliver(self, sm: object, src: SimPort, mad: bytes) -> None:
        """Send the Notice ``mad`` from ``src`` to the client ``sm``."""
        assert isinstance(sm, Client)
        self.stats.traps += 1
        self.transport.send(sm, simwire.request(src.smlid, src.lid, mad))

    def set_issm(self, cl: Client, on: bool) -> None:
        """Client ``cl`` is now the subnet manager at its port, or no longer: the
        port's IsSM follows while any subnet manager is attached there."""
        cl.issm = on
        port = cl.port
        if on and self.standin is not None and self.standin.leave(port):
            self.traps.sm_attached(self.standin.port, False)  # the real SM takes over
        if not on and any(c.issm and c.port is port for c in self.transport.clients.values()):
            return
        self.traps.sm_attached(port, on)
