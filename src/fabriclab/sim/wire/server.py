"""The fabric server: the ibsim protocol's server side, answering from fabriclab's model.

It is assembled from parts with one job each:

- :mod:`.transport`: the sockets, the epoll loop and the registry of attached clients;
- :mod:`.control`: the control channel (attach, detach, a node's identity), under
  :mod:`.admission`'s policy;
- :mod:`.dispatch`: each MAD routed (:mod:`..fabric.router`) and answered by the nodes'
  agents (:mod:`..fabric.sma`, :mod:`..fabric.pma`) or delivered to the client it is for;
- :mod:`..fabric.traps` and :mod:`..fabric.links`: the fabric reacting to itself (link
  state and capability changes), announced to the subnet manager (:mod:`.notices`);
- :mod:`..fabric.state`: the fabric's run-time state they all read and write.
"""

from __future__ import annotations

import logging
import os
import signal
from functools import partial

from ...ib import simwire
from ...model.fabric import Fabric
from ..fabric import routed
from ..fabric.links import Links
from ..fabric.pma import Pma
from ..fabric.router import Router
from ..fabric.sma import Sma
from ..fabric.state import SimFabric, SimPort
from ..fabric.traps import Traps
from . import native
from .admission import Policy
from .client import Client
from .control import Control
from .dispatch import Dispatch
from .notices import SmClients
from .ratelog import RateLimitedLog
from .stats import Stats
from .transport import Transport

log = logging.getLogger("fabriclab.sim")


class FabricServer:
    """Serve ``fabric`` under ``name`` (abstract sockets), or on UDP ``listen`` =
    (host, port) in remote mode.  ``resolve`` maps a client's SIM_HOST to a model port
    (returning (port, problem)); ``default_port`` is where a client without one goes;
    ``policy`` says who may attach and how many (:mod:`.admission`)."""

    def __init__(
        self,
        fabric: Fabric,
        name: str = simwire.DEFAULT_NAME,
        *,
        listen: tuple[str, int] | None = None,
        resolve=None,
        default_port=None,
        policy: Policy | None = None,
        cold: bool = False,
    ):
        self.name = name
        self.stats = Stats()
        self.sim = SimFabric(fabric, cold=cold)
        self.router = Router()
        self.transport = Transport(
            name, listen, policy or Policy(), self.stats, RateLimitedLog(log)
        )
        self.traps = Traps(self.router)
        self.sms = SmClients(self.transport, self.traps, self.stats)
        self.links = Links(self.router, self.traps)
        self.sma = Sma(events=self.links)
        self.pma = Pma()
        self.dispatch = Dispatch(self.transport, self.sma, self.pma, self.router, self.stats)
        self.control = Control(
            self.transport,
            self.sim,
            self.stats,
            resolve=resolve,
            default_port=default_port,
            set_issm=self.sms.set_issm,
        )
        transport = self.transport
        transport.on_control = self.control.handle
        transport.on_mad = self.dispatch.process
        core = native.make_core(
            self.sim,
            transport.buf,
            self.stats,
            self.dispatch.drops,
            self.sma.handlers,
            self._port_set,
            self._lft_set,
        )
        self.dispatch.use_native(core)
        if self.dispatch.native is not None:
            d = self.dispatch
            transport.pump = partial(native.pump, core, transport, d.reference, d.routed)
            transport.native_loop = native.Loop(core, transport, d.reference, d.routed)
        self.mad_core = "native" if self.dispatch.native is not None else "python"
        if transport.native_loop is not None:
            log.info(
                "MAD core: native, polling %d us before it sleeps", transport.native_loop.spin_us
            )
        else:
            log.info("MAD core: %s", self.mad_core)
        transport.on_mad_error = self.dispatch.failed
        transport.on_detach = self._client_left
        self.on_tick = transport.on_tick  # called every couple of seconds from the loop

    def bind(self) -> None:
        """Bind the control socket; OSError (address in use ...) goes to the caller."""
        self.transport.bind()

    def serve_forever(self, ready=None) -> None:
        """Serve until :meth:`stop` (binding first if need be); ``ready`` is called once
        serving."""
        if self.mad_core == "native":  # while the loop has nothing else to do
            ahead = self.sim.encode_ahead()
            self.transport.spare_time = lambda: next(ahead, None) is not None
        self.transport.serve_forever(ready)

    def stop(self, *_args) -> None:
        """Stop serving (a signal handler too)."""
        self.transport.stop()

    def install_signal_handlers(self) -> None:
        """SIGTERM and SIGINT stop the server at once: the signal wakes its loop (through
        a pipe written when it comes), which would otherwise sleep on until its next
        sweep."""
        self.transport.install_signal_handlers()
        r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        self.transport.watch(r, lambda: _drain(r))

    def close(self) -> None:
        """Detach every client and close every socket."""
        self.transport.close()

    def set_issm(self, cl: Client, on: bool) -> None:
        """Client ``cl`` is now the subnet manager at its port, or no longer."""
        self.sms.set_issm(cl, on)

    def _port_set(self, row: int) -> None:
        """The native core carried out a PortInfo Set of port row ``row``: what
        SimPort.changed and Dispatch.routed do after the Python SMA's (the port's PortInfo
        aside: the core encoded it anew)."""
        p = self.sim.flat.objs[row]
        p.gen.bump(port=p)
        self.router.forget(links=False)  # LIDs may have moved

    def _lft_set(self, node: int) -> None:
        """The native core wrote a block of switch ``node``'s forwarding table: what
        SimSwitch.write_lft_block and Dispatch.routed do after it."""
        sw = self.sim.nodes[node].sw
        if sw is not None:
            sw.gen.bump(switch=sw)
        self.router.forget(links=False)

    def routed(self, sm_port: SimPort) -> None:
        """The fabric as a subnet manager at ``sm_port`` leaves it (``up --routed``,
        :mod:`..fabric.routed`), with a stand-in answering SMInfo there until a real
        subnet manager attaches."""
        routed.configure(self.sim, sm_port)
        standin = routed.SmStandIn(sm_port)
        self.dispatch.standin = self.sms.standin = standin
        self.router.forget(links=True)

    @property
    def clients(self) -> dict[int, Client]:
        """The attached clients, by id."""
        return self.transport.clients

    def _client_left(self, cl: Client) -> None:
        self.control.client_left()
        if cl.issm:
            self.sms.set_issm(cl, False)


def _drain(fd: int) -> None:
    """Read what a signal wrote to the wake-up pipe."""
    try:
        os.read(fd, 512)
    except BlockingIOError:
        pass
