"""The fabric server's per-MAD path: a MAD from a client is routed through the fabric
from the port the client is attached at, and answered or delivered.

- it reaches an SMA or PMA attribute a node implements: the node answers;
- otherwise it is delivered to a client attached at the port it reached: a response
  to the client whose request it answers (client id in TransactionID bits 48-63, as
  ibsim does); a request to the agent registered for it there through the host library
  (:mod:`.agents`, as the kernel chooses), else, on QP0/QP1, to the port's ibsim
  subnet manager (SMInfo, SA);
- nothing there: a Get/Set is answered "unsupported method/attribute" (what the
  kernel's MAD layer does for a class nobody registered); anything else, or a MAD that
  cannot be routed, comes back to the sender as a timeout (status 110).

Malformed datagrams are dropped, counted and logged (a few per kind and interval, then
how many more there were).  A request is answered in place, in the buffer it was
received in: its bytes become the answer's (as a real agent turns a MAD around), with
no copies on the way.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from typing import Any

from ...ib.ids import PERMISSIVE_LID
from ...ib.mad.consts import STATUS_METHOD_ATTR_UNSUPPORTED, Attr, Method, MgmtClass
from ...ib.mad.view import requester
from ...ib.simwire import REQUEST_MAD, REQUEST_SIZE, SIM_STATUS_TIMEOUT, RequestView
from ..fabric.pma import Pma
from ..fabric.routed import SmStandIn
from ..fabric.router import Router, dr_in, retrace
from ..fabric.sma import Sma
from ..fabric.state import SimPort
from .agents import OUI_AT, VENDOR_RANGE2, receiver
from .client import Client
from .stats import Stats
from .transport import Transport

log = logging.getLogger("fabriclab.sim")

_SMI, _SMI_DR, _PERF = int(MgmtClass.SMI), int(MgmtClass.SMI_DIRECT), int(MgmtClass.PERF)
_GET, _SET, _TRAP_REPRESS = int(Method.GET), int(Method.SET), int(Method.TRAP_REPRESS)
_SM_INFO = int(Attr.SM_INFO)
_MAX_HOPS = 63  # a directed route's HopCount is at most 63 (14.2.1.2)
_METHOD_AT = REQUEST_MAD + 3  # the MAD header's Method (13.4.2) ...
_ATTR_AT = REQUEST_MAD + 16  # ... AttributeID and AttributeModifier
_ATTR_MOD = struct.Struct(">H2xI")


class Dispatch:
    """Routes and answers the MADs ``transport`` receives, with the nodes' agents
    (``sma``, ``pma``) and ``router``."""

    def __init__(self, transport: Transport, sma: Sma, pma: Pma, router: Router, stats: Stats):
        self.transport = transport
        self.stats = stats
        self.router = router
        self.clients = transport.clients
        self._send = transport.send
        self._warn = transport.rlog.warning
        self._sma, self._pma = sma.handlers, pma.handlers  # attribute -> handler
        self._dr_out, self._lid_route = router.dr_out, router.lid_route
        # The request in the receive buffer, and its readers and writers (bound once:
        # attribute lookups here are per MAD)
        request = RequestView(transport.buf)
        mad = request.mad
        self.buf, self.mem, self.whole = transport.buf, request.mem, request.whole
        self.addresses, self.set_slid = request.addresses, request.set_slid
        self.set_status, self.turn_around = request.set_status, request.turn_around
        self.header, self.note_requester = mad.header, mad.note_requester
        self.initial_path, self.return_path = mad.initial_path, mad.return_path
        self.smp_data, self.gmp_data = mad.smp_data, mad.gmp_data
        self.trace = log.isEnabledFor(logging.DEBUG)  # log every MAD (-vv)
        # ports that lose the MADs they are asked to answer (faults: a drop rate, a switch
        # or tray down): port -> drop(attribute id) -> whether this one is lost
        self.drops: dict[SimPort, Callable[[int], bool]] = {}
        self.standin: SmStandIn | None = None  # answers SMInfo until a real SM attaches
        # the native MAD core (:mod:`.native`), or None: the Python path serves alone
        self.native: Any = None

    def use_native(self, core) -> None:
        """Let the native core answer what it can first (not while tracing every MAD)."""
        self.native = None if self.trace else core

    def process(self, cl: Client, n: int) -> None:
        """The datagram of ``n`` bytes from ``cl`` in the receive buffer: the native core's
        if it answers it, else the Python path's (:meth:`reference`)."""
        native = self.native
        if native is not None:
            r = native.answer(cl.port._r, cl.id, n)
            if r >= 0:
                return self.routed(cl, r)
            if r == -2:
                try:
                    cl.sock.send(self.whole)
                except OSError:
                    self._send(cl, self.whole)
                return
        self.reference(cl, n)

    def routed(self, cl: Client, row: int) -> None:
        """A directed-route SMP Get or Set the native core routed to port row ``row`` (and
        counted there and back, and in the statistics): the SMA answers it, as the
        reference path does from its handler call on."""
        dest = cl.port._f.objs[row]
        dlid, slid, dqp, sqp = self.addresses()
        method = self.buf[_METHOD_AT]
        attr, mod = _ATTR_MOD.unpack_from(self.buf, _ATTR_AT)
        area = self.smp_data
        status, data = self._sma[attr](dest, method, mod, bytes(self.mem[area]))
        if method == _SET:
            self.router.forget(links=False)  # LIDs or forwarding tables may have moved
        self.buf[area] = data
        self.turn_around(status, True, dlid, slid, dqp, sqp)
        self.stats.answered += 1
        try:
            cl.sock.send(self.whole)
        except OSError:
            self._send(cl, self.whole)

    def reference(self, cl: Client, n: int) -> None:
        """The datagram of ``n`` bytes from ``cl`` in the receive buffer, on the Python
        path (the reference the native core answers alike)."""
        # The hot path: one call per MAD, written for the interpreter (locals, no
        # helper calls where a line will do).
        stats = self.stats
        stats.mads += 1
        if n != REQUEST_SIZE:
            stats.malformed += 1
            self._warn(
                "malformed datagrams",
                "client %d: datagram of %d bytes dropped (want %d)",
                cl.id,
                n,
                REQUEST_SIZE,
            )
            return
        dlid, slid, dqp, sqp = self.addresses()
        (base, mclass, resp, method, tid, attr, mod, d, hop_ptr, hops, dr_slid, dr_dlid) = (
            self.header()
        )
        by = stats.classes
        k = mclass << 8 | method | resp << 7
        by[k] = by.get(k, 0) + 1
        if self.trace:
            log.debug(
                "client %d: class 0x%02x method 0x%02x%s attr 0x%04x mod 0x%x dlid %d "
                "dqp %d tid 0x%x",
                cl.id,
                mclass,
                method,
                " (resp)" if resp else "",
                attr,
                mod,
                dlid,
                dqp,
                tid,
            )
        if base != 1:
            stats.malformed += 1
            self._warn("malformed datagrams", "client %d: MAD base version %d dropped", cl.id, base)
            return
        if method == _TRAP_REPRESS:  # the SM acknowledging a trap: nothing to do
            return
        if not resp:  # note the requester in the TransactionID, so the answer finds it
            self.note_requester(cl.id)
        src = cl.port
        back = None
        if mclass == _SMI_DR:
            if d != resp or hop_ptr != 0 or hops > _MAX_HOPS:
                stats.malformed += 1
                self._warn(
                    "malformed datagrams",
                    "client %d: malformed directed-route SMP (D=%d hop %d/%d) dropped",
                    cl.id,
                    d,
                    hop_ptr,
                    hops,
                )
                return
            if dr_slid != PERMISSIVE_LID or dr_dlid != PERMISSIVE_LID:
                self._warn(
                    "unsupported MADs",
                    "client %d: directed route with a LID-routed part is not supported",
                    cl.id,
                )
                return self.timeout(cl)
            if resp:
                dest = dr_in(src, self.mem[self.return_path], hops)
                return self._deliver_response(cl, dest, tid)
            dest, rpath, back = self._dr_out(src, self.mem[self.initial_path], hops)
            if dest is None:
                return self.timeout(cl)
            self.buf[self.return_path] = rpath
        else:
            if slid == 0:
                slid = src.lid
                self.set_slid(slid)
            dest = src if dlid == PERMISSIVE_LID else self._lid_route(src, dlid, mclass == _SMI)[0]
            if dest is None:
                if resp:
                    stats.dropped += 1
                    return
                return self.timeout(cl)
            if resp:
                return self._deliver_response(cl, dest, tid)
        # --- a request reached ``dest``: does one of the node's agents implement it?
        if mclass == _SMI_DR or mclass == _SMI:
            handler = self._sma.get(attr)
            area = self.smp_data
        elif mclass == _PERF:
            handler = self._pma.get(attr)
            area = self.gmp_data
        else:
            handler, area = None, self.gmp_data
        if handler is None:
            standin = self.standin
            if (
                standin is None
                or attr != _SM_INFO
                or area is self.gmp_data
                or not standin.answers(dest)
            ):
                return self._forward_request(cl, dest, mclass, method, attr, dqp)
            handler = standin.sm_info  # the master SM of a --routed fabric, standing in
        drops = self.drops
        if drops and dest in drops and drops[dest](attr):
            # the port loses it (a fault): the sender sees a timeout, as ibsim's Error
            # rate does at the port a MAD reaches (sim_mad.c process_packet)
            return self.timeout(cl)
        if method == _GET:
            status, data = handler(dest, method, mod, bytes(self.mem[area]))
        elif method == _SET:
            status, data = handler(dest, method, mod, bytes(self.mem[area]))
            if mclass != _PERF:
                self.router.forget(links=False)  # LIDs or forwarding tables may have moved
        else:
            status, data = STATUS_METHOD_ATTR_UNSUPPORTED, bytes(self.mem[area])
        # it must make its way back to the requester
        if back is not None:
            retrace(back)  # a directed route's answer retraces its steps
        elif slid and dest is not src:
            arrived = self._lid_route(dest, slid, mclass == _SMI)[0]
            if arrived is None or arrived.node is not src.node:
                return self.timeout(cl)
        self.buf[area] = data  # handlers answer with exactly the attribute's bytes
        self.turn_around(status, mclass == _SMI_DR, dlid, slid, dqp, sqp)
        stats.answered += 1
        try:
            cl.sock.send(self.whole)
        except OSError:
            self._send(cl, self.whole)  # retried there, with the error handling

    def failed(self, cl: Client, n: int) -> None:
        """Processing the datagram raised (a bug): it is counted and logged, and the
        tool sees a timeout rather than waiting forever."""
        self.stats.malformed += 1
        self._warn("failed MADs", "client %d: MAD processing failed", cl.id, exc_info=True)
        if n == REQUEST_SIZE:
            self.timeout(cl)

    def timeout(self, cl: Client) -> None:
        """Tell the sender its MAD went nowhere (umad reports a timeout at once)."""
        self.stats.timed_out += 1
        self.set_status(SIM_STATUS_TIMEOUT)
        self._send(cl, self.whole)

    def _deliver_response(self, cl: Client, dest: SimPort | None, tid: int) -> None:
        """A client answers another client's request (the SM answering an SA query)."""
        target = self.clients.get(requester(tid))
        if dest is None or target is None or target.port.node is not dest.node:
            self.stats.dropped += 1
            log.debug("client %d: response with no requester at its destination dropped", cl.id)
            return
        self.stats.forwarded += 1
        self._send(target, self.whole)

    def _forward_request(
        self, cl: Client, dest: SimPort, mclass: int, method: int, attr: int, dqp: int
    ) -> None:
        """A request no node agent implements: the subnet manager at ``dest`` gets QP0 and
        QP1 requests (SMInfo, SA queries); a client listening on another QP gets those."""
        clients = self.clients.values()
        at = REQUEST_MAD
        oui = (
            int.from_bytes(self.buf[at + OUI_AT : at + OUI_AT + 3])
            if mclass in VENDOR_RANGE2
            else 0
        )
        found = receiver(clients, dest, mclass, self.buf[at + 2], method, oui)
        if found is not None:
            target: Client | None = found[0]
        elif dqp <= 1:
            target = next((c for c in clients if c.issm and c.port is dest), None)
        else:
            target = next(
                (c for c in clients if c.qp == dqp and c.port is dest and c.agents is None), None
            )
        if target is not None:
            self.stats.forwarded += 1
            self._send(target, self.whole)
            return
        if method in (Method.GET, Method.SET):
            # nobody registered for it: the MAD layer answers "unsupported" (as the
            # kernel's does for a class no agent serves)
            self.turn_around(STATUS_METHOD_ATTR_UNSUPPORTED, mclass == _SMI_DR, *self.addresses())
            self.stats.answered += 1
            self._send(cl, self.whole)
            return
        log.debug(
            "client %d: class 0x%x attribute 0x%x method 0x%x has no receiver at %s",
            cl.id,
            mclass,
            attr,
            method,
            dest.ref(),
        )
        self.timeout(cl)
