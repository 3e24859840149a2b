"""The fabric server: the ibsim protocol's server side, answering from fabriclab's model.

One thread, one epoll loop, requests handled in arrival order (libibnetdisc's
discovery order depends on answers coming back in the order they were asked).  A MAD
from a client is routed through the fabric from the port the client is attached at:

- it reaches an SMA or PMA attribute a node implements: the node answers;
- otherwise it is delivered to a client attached at the port it reached: a response
  to the client whose request it answers (client id in TransactionID bits 48-63, as
  ibsim does), a request on QP0/QP1 to the port's subnet manager (SMInfo, SA);
- nothing there: a Get/Set is answered "unsupported method/attribute" (what the
  kernel's MAD layer does for a class nobody registered); anything else, or a MAD that
  cannot be routed, comes back to the sender as a timeout (status 110).

Malformed datagrams are dropped and logged; a client that vanished is disconnected the
first time a datagram to it fails, and by a periodic sweep for local clients whose
socket is gone.
"""

from __future__ import annotations

import errno
import gc
import logging
import select
import signal
import socket
import struct
import time
from dataclasses import dataclass, field

from ..model.fabric import Fabric
from . import wire
from .mad.consts import (
    CAP_IS_CAP_MASK_NOTICE,
    CAP_IS_NOTICE,
    CAP_IS_SM,
    CAP_IS_TRAP,
    PERMISSIVE_LID,
    SIM_STATUS_TIMEOUT,
    STATUS_METHOD_ATTR_UNSUPPORTED,
    TRAP_CAPABILITY_MASK_CHANGE,
    TRAP_LINK_STATE_CHANGE,
    Attr,
    MgmtClass,
    Method,
    NodeTypeCode,
    PhysState,
    PortState,
)
from .mad.layouts import (
    DR_INITIAL_PATH,
    DR_RETURN_PATH,
    DR_SMP_HEADER,
    GMP_DATA,
    MAD_HEADER,
    NOTICE,
    PORT_INFO,
    SMP_DATA,
    SMP_DATA_SIZE,
)
from .pma import Pma
from .router import Router, dr_in, retrace
from .sma import Sma
from .state import SimFabric, SimPort

log = logging.getLogger("fabriclab.sim")

# One read of a MAD's first 64 bytes gives the common header and, for a directed-route
# SMP, its routing fields too (for other classes those bytes mean other things and are
# ignored).
_HEADER = DR_SMP_HEADER.getter("BaseVersion", "MgmtClass", "R", "Method", "TransactionID",
                               "AttributeID", "AttributeModifier", "D", "HopPointer",
                               "HopCount", "DrSLID", "DrDLID")
_SMI, _SMI_DR, _PERF, _SA = (int(MgmtClass.SMI), int(MgmtClass.SMI_DIRECT),
                             int(MgmtClass.PERF), int(MgmtClass.SA))
_GET, _SET, _TRAP_REPRESS = int(Method.GET), int(Method.SET), int(Method.TRAP_REPRESS)
_TID_CLIENT_SHIFT = 48
_NONE = object()
# Byte positions in a sim_request (see wire.REQUEST): the addresses, the status, the MAD.
_ADDR = struct.Struct(">H2xH2xII")  # dlid, slid, dqp, sqp
_LID = struct.Struct(">H")
_STATUS = struct.Struct(">I")
_STATUS16 = struct.Struct(">H")
_TID_HI = struct.Struct(">H")
_REQ = wire.REQUEST_SIZE
_MAD = wire.REQUEST_SIZE - wire.MAD_SIZE
_SMP_DATA, _GMP_DATA = _MAD + SMP_DATA, _MAD + GMP_DATA
_SMP_END = _SMP_DATA + SMP_DATA_SIZE
_GET_RESPONSE = int(Method.GET_RESPONSE)
_IPATH, _RPATH = _MAD + DR_INITIAL_PATH, _MAD + DR_RETURN_PATH
_SWEEP_INTERVAL = 2.0


def _turn_around(pkt: bytearray, mclass: int, status: int, dlid, slid, dqp, sqp) -> None:
    """Make the request in ``pkt`` its own GetResp: method, status (a directed route's
    with the D bit), and the addresses swapped."""
    pkt[_MAD + 3] = _GET_RESPONSE
    _STATUS16.pack_into(pkt, _MAD + 4, 0x8000 | status if mclass == _SMI_DR else status)
    _ADDR.pack_into(pkt, 0, slid, dlid, sqp, dqp)
    _STATUS.pack_into(pkt, 16, 0)


@dataclass
class Client:
    id: int
    key: int  # pid (local) or the client's data UDP port (remote)
    port: SimPort
    qp: int
    issm: bool
    nodeid: str
    sock: socket.socket
    addr: object = None  # remote mode: the client's control address
    host: str = ""  # remote mode: the client's IP address


@dataclass
class Stats:
    mads: int = 0
    answered: int = 0
    forwarded: int = 0
    dropped: int = 0
    malformed: int = 0
    traps: int = 0
    started: float = field(default_factory=time.monotonic)


class FabricServer:
    """Serve ``fabric`` under ``name`` (abstract sockets), or on UDP ``listen`` =
    (host, port) in remote mode.  ``resolve`` maps a client's SIM_HOST to a model port
    (returning (port, problem)); ``default_port`` is where a client without one goes."""

    def __init__(self, fabric: Fabric, name: str = wire.DEFAULT_NAME, *,
                 listen: tuple[str, int] | None = None, resolve=None, default_port=None):
        self.name = name
        self.listen = listen
        self.sim = SimFabric(fabric)
        self.sma = Sma(events=self)
        self.pma = Pma()
        self._sma, self._pma = self.sma.handlers, self.pma.handlers  # attribute -> handler
        self.router = Router()
        self._dr_out, self._lid_route = self.router.dr_out, self.router.lid_route
        self.resolve = resolve
        self.default_port = default_port
        self.clients: dict[int, Client] = {}
        self.stats = Stats()
        # epoll directly: at tens of thousands of MADs a second the selectors module's
        # bookkeeping shows up in the profile
        self._epoll = select.epoll()
        self._fds: dict[int, Client | None] = {}  # fd -> client (None: the control socket)
        self._ctl: socket.socket | None = None
        self._running = False
        self._next_sweep = 0.0
        self._buf = bytearray(4096)
        self._view = memoryview(self._buf)
        self._trap_tid = 0
        self.on_tick: list = []  # called every couple of seconds from the loop
        self.trace = log.isEnabledFor(logging.DEBUG)  # log every MAD (-vv)

    # --- sockets ----------------------------------------------------------------------

    @property
    def remote(self) -> bool:
        return self.listen is not None

    def _socket(self) -> socket.socket:
        fam = socket.AF_INET if self.remote else socket.AF_UNIX
        s = socket.socket(fam, socket.SOCK_DGRAM)
        s.setblocking(False)
        return s

    def _addr(self, kind: str, port_offset: int = 0):
        if self.remote:
            assert self.listen is not None
            return (self.listen[0], self.listen[1] + port_offset)
        return wire.sockname(self.name, kind)

    def bind(self) -> None:
        """Bind the control socket; OSError (address in use ...) goes to the caller."""
        self._ctl = self._socket()
        try:
            self._ctl.bind(self._addr("ctl"))
        except OSError:
            self._ctl.close()
            self._ctl = None
            raise
        self._watch(self._ctl, None)

    def _watch(self, sock: socket.socket, cl: Client | None) -> None:
        self._fds[sock.fileno()] = cl
        self._epoll.register(sock.fileno(), select.EPOLLIN)

    def _unwatch(self, sock: socket.socket) -> None:
        fd = sock.fileno()
        if self._fds.pop(fd, 0) != 0:
            self._epoll.unregister(fd)

    def close(self) -> None:
        for cl in list(self.clients.values()):
            self._drop_client(cl, "server stopping")
        if self._ctl is not None:
            self._unwatch(self._ctl)
            self._ctl.close()
            self._ctl = None
        self._epoll.close()

    # --- main loop --------------------------------------------------------------------

    def serve_forever(self, ready=None) -> None:
        if self._ctl is None:
            self.bind()
        # The fabric's objects live as long as the server: keep the cyclic garbage
        # collector from walking them again and again while MADs allocate.
        gc.collect()
        gc.freeze()
        self._running = True
        if ready is not None:
            ready()
        poll, fds, on_data = self._epoll.poll, self._fds, self._on_data
        while self._running:
            try:
                events = poll(_SWEEP_INTERVAL)
            except InterruptedError:
                continue
            for fd, _ in events:
                cl = fds.get(fd, _NONE)
                if cl is None:
                    self._on_ctl()
                elif cl is not _NONE:
                    on_data(cl)
            now = time.monotonic()
            if now >= self._next_sweep:
                self._sweep()
                for tick in self.on_tick:
                    tick()
                self._next_sweep = now + _SWEEP_INTERVAL

    def stop(self, *_args) -> None:
        self._running = False

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)

    # --- control channel --------------------------------------------------------------

    def _on_ctl(self) -> None:
        assert self._ctl is not None
        while True:
            try:
                raw, addr = self._ctl.recvfrom(4096)
            except BlockingIOError:
                return
            except OSError as e:
                log.warning("control socket: %s", e)
                return
            try:
                ctl = wire.Ctl.decode(raw)
                reply = self._handle_ctl(ctl, addr)
            except ValueError as e:
                self.stats.malformed += 1
                log.warning("control record dropped: %s", e)
                continue
            except Exception:  # one bad record never stops the server
                self.stats.malformed += 1
                log.exception("control record failed")
                continue
            try:
                self._ctl.sendto(reply.encode(), addr)
            except OSError as e:
                log.warning("control reply to %r failed: %s", addr, e)

    def _handle_ctl(self, ctl: wire.Ctl, addr) -> wire.Ctl:
        if ctl.type == wire.CTL_CONNECT:
            return self._connect(ctl, addr)
        cl = self.clients.get(ctl.clientid)
        if cl is None:
            if ctl.type == wire.CTL_DISCONNECT:
                return ctl
            log.warning("control %s from unknown client %d", wire.CTL_NAMES.get(ctl.type, ctl.type),
                        ctl.clientid)
            return wire.Ctl(ctl.clientid, wire.CTL_ERROR, ctl.length, ctl.data)
        port = cl.port
        node = port.node
        t = ctl.type
        if t == wire.CTL_DISCONNECT:
            self._drop_client(cl, "disconnected")
            return ctl
        if t == wire.CTL_GET_VENDOR:
            m = node.model
            data = wire.VENDOR.pack(m.vendid, m.devid, m.revision, 1)
        elif t == wire.CTL_GET_NODEINFO:
            data = node.node_info(port.num)
        elif t == wire.CTL_GET_PORTINFO:
            num = ctl.data[0]
            p = (node.port(num) if num and num <= node.model.nports else None) or port
            # LocalPortNum names the port the client sits on (umad2sim's sysfs port dir)
            data = PORT_INFO.pack({"LocalPort": 0 if node.is_switch else p.num},
                                  base=p.port_info())
        elif t == wire.CTL_GET_PKEYS:
            data = bytes(port.pkeys[:wire.CTL_DATA])
        elif t == wire.CTL_SET_ISSM:
            self._set_issm(cl, int.from_bytes(ctl.data[:4], "little") != 0)
            data = ctl.data
        elif t == wire.CTL_GET_PORT:
            data = wire.SIM_PORT.pack(port.lid, port.state)
        elif t == wire.CTL_GET_GID:
            # ibsim copies the GUID in host byte order here; the field is unused by umad2sim
            data = port.port_info()[8:16] + node.model.guid.to_bytes(8, "little")
        elif t == wire.CTL_GET_GUID:
            data = node.model.guid.to_bytes(8, "little")
        else:
            log.warning("client %d: unknown control type %d", cl.id, t)
            return wire.Ctl(ctl.clientid, wire.CTL_ERROR, ctl.length, ctl.data)
        return wire.Ctl(ctl.clientid, t, ctl.length, data)

    def _connect(self, ctl: wire.Ctl, addr) -> wire.Ctl:
        key, qp, issm, raw_nodeid = wire.CLIENT_INFO.unpack(ctl.data[:wire.CLIENT_INFO.size])
        nodeid = wire.cstring(raw_nodeid)
        error = wire.Ctl(ctl.clientid, wire.CTL_ERROR, ctl.length, ctl.data)
        port, problem = self._attach_port(nodeid)
        if port is None:
            log.warning("client %d refused: %s", key, problem)
            return error
        if issm and any(c.issm and c.port is port for c in self.clients.values()):
            log.warning("client %d refused: an SM is already attached at %s", key, port.ref())
            return error
        host = addr[0] if self.remote else ""
        for old in [c for c in self.clients.values() if c.key == key and c.host == host]:
            self._drop_client(old, "replaced by a new client with the same id")  # pid reuse
        cid = next(i for i in range(len(self.clients) + 1) if i not in self.clients)
        sock = self._socket()
        try:
            sock.bind(self._addr(f"out{cid}", cid + 1))
            if self.remote:
                sock.connect((host, key))
            else:
                sock.connect(wire.sockname(self.name, f"in{key}"))
        except OSError as e:
            sock.close()
            log.warning("client %d refused: cannot open its data socket: %s", key, e)
            return error
        cl = Client(cid, key, port, qp, bool(issm), nodeid, sock, addr, host)
        self.clients[cid] = cl
        self._watch(sock, cl)
        if cl.issm:
            self._set_issm(cl, True)
        log.info("client %d (%s %d) attached at %s", cid, "port" if self.remote else "pid", key,
                 port.ref())
        reply_id = nodeid if nodeid else port.node.model.label
        data = wire.CLIENT_INFO.pack(cid, qp, issm, reply_id.encode()[:31])
        return wire.Ctl(ctl.clientid, wire.CTL_CONNECT, ctl.length, data)

    def _attach_port(self, nodeid: str) -> tuple[SimPort | None, str]:
        if not nodeid:
            if self.default_port is None:
                return None, "no SIM_HOST and no default port"
            return self.sim.port_of(self.default_port), ""
        if self.resolve is None:
            return None, f"cannot resolve {nodeid!r}"
        model, problem = self.resolve(nodeid)
        if model is None:
            return None, problem
        return self.sim.port_of(model), ""

    def _drop_client(self, cl: Client, why: str) -> None:
        if self.clients.get(cl.id) is not cl:
            return
        del self.clients[cl.id]
        self._unwatch(cl.sock)
        cl.sock.close()
        if cl.issm:
            self._set_issm(cl, False)
        log.info("client %d detached (%s)", cl.id, why)

    def _sweep(self) -> None:
        """Local clients whose data socket is gone (the process died) are disconnected.
        The abstract socket namespace belongs to the network namespace, so this works
        for clients in other PID namespaces too, where their pid would not."""
        if self.remote or not self.clients:
            return
        try:
            with open("/proc/net/unix", "rb") as f:
                bound = {line.rsplit(None, 1)[-1] for line in f if b"@" in line}
        except OSError:
            return
        for cl in list(self.clients.values()):
            if b"@" + f"{self.name}:in{cl.key}".encode() + b"@" not in bound:
                self._drop_client(cl, f"its socket {self.name}:in{cl.key} is gone")

    def _set_issm(self, cl: Client, on: bool) -> None:
        cl.issm = on
        port = cl.port
        if not on and any(c.issm and c.port is port for c in self.clients.values()):
            return
        old = port.cap_mask
        port.cap_mask = old | CAP_IS_SM if on else old & ~CAP_IS_SM
        if port.cap_mask != old:
            port.changed()
            if old & (CAP_IS_NOTICE | CAP_IS_TRAP) and old & CAP_IS_CAP_MASK_NOTICE:
                self.send_trap(port, TRAP_CAPABILITY_MASK_CHANGE)

    # --- data channel -----------------------------------------------------------------
    #
    # A datagram is handled in place in the receive buffer: the request's bytes become
    # the answer's (as a real agent turns a MAD around), with no copies on the way.

    def _on_data(self, cl: Client) -> None:
        # A few datagrams per readiness event: an SM keeps several MADs in flight, and
        # reading the next one straight away saves an epoll round; epoll is
        # level-triggered, so whatever is left brings us back.
        buf, view, sock = self._buf, self._view, cl.sock
        for _ in range(8):
            try:
                n = sock.recv_into(buf)
            except BlockingIOError:
                return
            except OSError as e:
                self._drop_client(cl, f"receive failed: {e}")
                return
            try:
                self._process(cl, buf, n, view)
            except Exception:  # a bug must cost one MAD, not the fabric
                self.stats.malformed += 1
                log.exception("client %d: MAD processing failed", cl.id)
                if n == _REQ:  # and the tool sees a timeout rather than waiting forever
                    self._timeout(cl, buf, view)
            if self.clients.get(cl.id) is not cl:
                return

    def _send(self, cl: Client, pkt) -> bool:
        try:
            cl.sock.send(pkt)
            return True
        except BlockingIOError:
            log.warning("client %d is not reading; MAD dropped", cl.id)
        except OSError as e:
            if e.errno in (errno.ECONNREFUSED, errno.ENOTCONN, errno.ENOENT):
                self._drop_client(cl, "gone")
            else:
                log.warning("send to client %d failed: %s", cl.id, e)
        return False

    def _timeout(self, cl: Client, pkt: bytearray, view) -> None:
        """Tell the sender its MAD went nowhere (umad reports a timeout at once)."""
        self.stats.dropped += 1
        _STATUS.pack_into(pkt, 16, SIM_STATUS_TIMEOUT)
        self._send(cl, view[:_REQ])

    def _process(self, cl: Client, pkt: bytearray, n: int, view) -> None:
        # The hot path: one call per MAD, written for the interpreter (locals, no
        # helper calls where a line will do).
        stats = self.stats
        stats.mads += 1
        if n != _REQ:
            stats.malformed += 1
            log.warning("client %d: datagram of %d bytes dropped (want %d)", cl.id, n, _REQ)
            return
        dlid, slid, dqp, sqp = _ADDR.unpack_from(pkt, 0)
        (base, mclass, resp, method, tid, attr, mod, d, hop_ptr, hops, dr_slid,
         dr_dlid) = _HEADER(view[_MAD:_MAD + 64])
        if self.trace:
            log.debug("client %d: class 0x%02x method 0x%02x%s attr 0x%04x mod 0x%x dlid %d "
                      "dqp %d tid 0x%x", cl.id, mclass, method, " (resp)" if resp else "", attr,
                      mod, dlid, dqp, tid)
        if base != 1:
            stats.malformed += 1
            log.warning("client %d: MAD base version %d dropped", cl.id, base)
            return
        if method == _TRAP_REPRESS:  # the SM acknowledging a trap: nothing to do
            return
        if not resp:  # note the requester in TID bits 48-63, so the answer finds it
            _TID_HI.pack_into(pkt, _MAD + 8, cl.id)
        src = cl.port
        back = None
        if mclass == _SMI_DR:
            if d != resp or hop_ptr != 0 or hops > 63:
                stats.malformed += 1
                log.warning("client %d: malformed directed-route SMP (D=%d hop %d/%d) dropped",
                            cl.id, d, hop_ptr, hops)
                return
            if dr_slid != PERMISSIVE_LID or dr_dlid != PERMISSIVE_LID:
                log.warning("client %d: directed route with a LID-routed part is not supported",
                            cl.id)
                return self._timeout(cl, pkt, view)
            if resp:
                dest = dr_in(src, bytes(view[_RPATH:_RPATH + 64]), hops)
                return self._deliver_response(cl, dest, tid, view)
            dest, rpath, back = self._dr_out(src, view[_IPATH:_IPATH + 64], hops)
            if dest is None:
                return self._timeout(cl, pkt, view)
            pkt[_RPATH:_RPATH + 64] = rpath
        else:
            if slid == 0:
                slid = src.lid
                _LID.pack_into(pkt, 4, slid)
            dest = src if dlid == PERMISSIVE_LID else self._lid_route(src, dlid, mclass == _SMI)[0]
            if dest is None:
                if resp:
                    stats.dropped += 1
                    return
                return self._timeout(cl, pkt, view)
            if resp:
                return self._deliver_response(cl, dest, tid, view)
        # --- a request reached ``dest``: does one of the node's agents implement it?
        if mclass == _SMI_DR or mclass == _SMI:
            handler = self._sma.get(attr)
            offset, end = _SMP_DATA, _SMP_END
        elif mclass == _PERF:
            handler = self._pma.get(attr)
            offset, end = _GMP_DATA, _REQ
        else:
            handler = None
        if handler is None:
            return self._forward_request(cl, dest, pkt, view, mclass, method, attr, dqp)
        if method == _GET:
            status, data = handler(dest, method, mod, bytes(view[offset:end]))
        elif method == _SET:
            status, data = handler(dest, method, mod, bytes(view[offset:end]))
            if mclass != _PERF:
                self.router.forget(links=False)  # LIDs or forwarding tables may have moved
        else:
            status, data = STATUS_METHOD_ATTR_UNSUPPORTED, bytes(view[offset:end])
        # it must make its way back to the requester
        if back is not None:
            retrace(back)  # a directed route's answer retraces its steps
        elif slid and dest is not src:
            arrived = self._lid_route(dest, slid, mclass == _SMI)[0]
            if arrived is None or arrived.node is not src.node:
                return self._timeout(cl, pkt, view)
        pkt[offset:end] = data  # handlers answer with exactly the attribute's bytes
        _turn_around(pkt, mclass, status, dlid, slid, dqp, sqp)
        stats.answered += 1
        try:
            cl.sock.send(view[:_REQ])
        except OSError:
            self._send(cl, view[:_REQ])  # retried there, with the error handling

    def _deliver_response(self, cl: Client, dest: SimPort | None, tid: int, view) -> None:
        """A client answers another client's request (the SM answering an SA query)."""
        target = self.clients.get(tid >> _TID_CLIENT_SHIFT)
        if dest is None or target is None or target.port.node is not dest.node:
            self.stats.dropped += 1
            log.debug("client %d: response with no requester at its destination dropped", cl.id)
            return
        self.stats.forwarded += 1
        self._send(target, view[:_REQ])

    def _forward_request(self, cl, dest: SimPort, pkt, view, mclass, method, attr, dqp) -> None:
        """A request no node agent implements: the subnet manager at ``dest`` gets QP0 and
        QP1 requests (SMInfo, SA queries); a client listening on another QP gets those."""
        if dqp <= 1:
            target = next((c for c in self.clients.values() if c.issm and c.port is dest), None)
        else:
            target = next((c for c in self.clients.values() if c.qp == dqp and c.port is dest),
                          None)
        if target is not None:
            self.stats.forwarded += 1
            self._send(target, view[:_REQ])
            return
        if method in (Method.GET, Method.SET):
            # nobody registered for it: the MAD layer answers "unsupported" (as the
            # kernel's does for a class no agent serves)
            dlid, slid, dqp_, sqp = _ADDR.unpack_from(pkt, 0)
            _turn_around(pkt, mclass, STATUS_METHOD_ATTR_UNSUPPORTED, dlid, slid, dqp_, sqp)
            self.stats.answered += 1
            self._send(cl, view[:_REQ])
            return
        log.debug("client %d: class 0x%x attribute 0x%x method 0x%x has no receiver at %s",
                  cl.id, mclass, attr, method, dest.ref())
        self._timeout(cl, pkt, view)

    # --- the fabric reacting to itself ------------------------------------------------

    def send_trap(self, port: SimPort, number: int) -> None:
        """A Notice (SubnTrap) from ``port``'s node to its master SM, if it has one and a
        route to it (14.2.5.1).  Switches raise traps from port 0."""
        src = port.node.ports[0] if port.node.is_switch else port
        if src is None or not src.lid or not src.smlid:
            return
        dest = self.router.lid_route(src, src.smlid, True)[0]
        if dest is None:
            return
        sm = next((c for c in self.clients.values() if c.issm and c.port is dest), None)
        if sm is None:
            return
        node = src.node
        values = {"NoticeIsGeneric": 1, "NoticeTrapNumber": number, "NoticeIssuerLID": src.lid,
                  "NoticeProducerType": NodeTypeCode.SWITCH if node.is_switch else NodeTypeCode.CA}
        if number == TRAP_LINK_STATE_CHANGE:
            values.update(NoticeType=1, NoticeDataLID=src.lid)  # urgent
        else:
            values.update(NoticeType=4, NoticeDataTrap144LID=src.lid,
                          NoticeDataTrap144CapMask=src.cap_mask)  # informational
        self._trap_tid = (self._trap_tid + 1) & 0xFFFF_FFFF
        hdr = MAD_HEADER.pack({"BaseVersion": 1, "MgmtClass": _SMI, "ClassVersion": 1,
                               "Method": Method.TRAP, "TransactionID": self._trap_tid,
                               "AttributeID": Attr.NOTICE})
        mad = hdr + bytes(SMP_DATA - len(hdr)) + NOTICE.pack(values) + bytes(128)
        self.stats.traps += 1
        self._send(sm, wire.REQUEST.pack(src.smlid, src.lid, 0, 0, 0, wire.MAD_SIZE, mad))

    def _link_changed(self, ports: list[SimPort]) -> None:
        self.router.forget(links=True)
        for p in ports:
            p.changed()
            if p.node.is_switch:
                p.node.sw.state_change = 1  # type: ignore[union-attr]
        for p in ports:
            if p.node.is_switch:
                self.send_trap(p, TRAP_LINK_STATE_CHANGE)

    def disable_port(self, p: SimPort) -> None:
        """PortPhysicalState Disabled: the link goes down at both ends."""
        peer = p.peer
        p.phys, p.state = PhysState.DISABLED, PortState.DOWN
        changed = [p]
        if peer is not None and peer.phys == PhysState.LINKUP:
            peer.phys, peer.state = PhysState.POLLING, PortState.DOWN
            peer.counters.add("LinkDownedCounter")
            changed.append(peer)
        if p.model.peer is not None:
            p.counters.add("LinkDownedCounter")
        self._link_changed(changed)

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
        self._link_changed(changed)

    def retrain_port(self, p: SimPort) -> None:
        """PortState Down (an SM resetting a port): the link retrains and both ends come
        back in INIT.  Nothing failed, so no error counter moves."""
        if not p.up:
            return
        for q in (p, p.peer):
            q.state = PortState.INIT  # type: ignore[union-attr]
        self._link_changed([p, p.peer])  # type: ignore[list-item]
