"""The MAD agents tools register on a port through fabriclab's host library, and the
kernel's rules for them: which agent an incoming request goes to, and which
registrations collide.

As the kernel's MAD layer does (``drivers/infiniband/core/mad.c``: ``find_mad_agent``,
``method_in_use``, ``find_vendor_oui``): a request goes to the agent registered on the
port it reached for its class, class version and method (and, for vendor range 2
classes 0x30-0x4f, the OUI at MAD bytes 37-39); two agents on one port may not both
take the same (version, class, method).  Beyond the kernel: a class the subnet manager
serves on its port is its own (:func:`sm_holds`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..fabric.state import SimPort
from .client import Client

VENDOR_RANGE2 = range(0x30, 0x50)  # classes whose agents are chosen by OUI too
OUI_AT = 37  # vendor range 2 MADs carry their OUI at bytes 37-39 (ib_mad.h, ib_vendor_mad)


@dataclass(frozen=True)
class Agent:
    """One registered agent of a client: its id on that client's open umad file, its
    class, class version, OUI (vendor range 2), methods (a 128-bit mask: bit m is
    method m) and RMPP version."""

    id: int
    mclass: int
    version: int
    oui: int
    methods: int
    rmpp: int = 0

    def takes(self, mclass: int, version: int, method: int, oui: int) -> bool:
        """Whether a request of this class, version, method (and OUI) is this agent's."""
        return (
            self.mclass == mclass
            and self.version == version
            and (self.methods >> (method & 0x7F)) & 1 == 1
            and (mclass not in VENDOR_RANGE2 or self.oui == oui)
        )

    def collides(self, other: Agent) -> bool:
        """Whether the two want a (version, class[, OUI], method) in common."""
        return (
            self.mclass == other.mclass
            and self.version == other.version
            and (self.mclass not in VENDOR_RANGE2 or self.oui == other.oui)
            and self.methods & other.methods != 0
        )


def receiver(
    clients: Iterable[Client], port: SimPort, mclass: int, version: int, method: int, oui: int
) -> tuple[Client, Agent] | None:
    """The client and agent at ``port`` that take this request, if any."""
    for c in clients:
        if c.agents and c.port is port:
            for a in c.agents.values():
                if a.takes(mclass, version, method, oui):
                    return c, a
    return None


def in_use(clients: Iterable[Client], port: SimPort, agent: Agent) -> bool:
    """Whether another agent at ``port`` already takes one of ``agent``'s methods (the
    kernel refuses the registration: "Method %d already in use")."""
    return any(
        a.collides(agent) for c in clients if c.agents and c.port is port for a in c.agents.values()
    )


def sm_holds(clients: Iterable[Client], port: SimPort, sm_pid: int, agent: Agent) -> bool:
    """Whether the subnet manager's process ``sm_pid`` takes requests of ``agent``'s
    class (version, OUI) at ``port``, when ``agent`` would take some too.  fabriclab's
    own rule, beyond the kernel's (where only root opens a umad file): no other process
    may take a class the SM serves, not even with methods the SM left free."""
    if not agent.methods:
        return False  # an agent for answers only (saquery's, smpquery's) takes nothing
    return any(
        a.methods
        and a.mclass == agent.mclass
        and a.version == agent.version
        and (a.mclass not in VENDOR_RANGE2 or a.oui == agent.oui)
        for c in clients
        if c.agents and c.port is port and c.pid == sm_pid
        for a in c.agents.values()
    )
