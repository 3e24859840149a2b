"""The fabric server's end of fabriclab's host protocol (:mod:`fabriclab.ib.hostwire`):
tools on a tray, through the host library, see the tray's HCAs as a host does.

A listening SOCK_SEQPACKET socket ``<name>:host`` takes one connection per open umad or
issm file of a tool, and short ones for its registrations and for the tray's /sys tree.
An open umad file becomes a :class:`~.transport.Client` at its HCA port whose socket
(:class:`UmadSocket`) turns the kernel's ``ib_user_mad`` frames into the server's
sim_request and back, so the MAD path (:mod:`.dispatch`) is the one every client takes.
What a kernel does that ibsim's protocol never carried is done here: requests go to the
agents registered for them (:mod:`.agents`); a message longer than a MAD (an RMPP table)
is delivered whole; a request whose answer does not come within its timeout comes back
as the kernel's 88-byte ETIMEDOUT read.
"""

from __future__ import annotations

import errno
import functools
import heapq
import logging
import select
import shutil
import socket
import struct
import time
from pathlib import Path

from ..errors import FabriclabError
from ..ib import hostwire, simwire, umad
from ..ib.mad.view import MAD_SIZE
from ..model.cluster import Cluster
from . import hostview, sysfs
from .agents import OUI_AT, Agent, in_use
from .state import SimFabric, SimPort
from .transport import Client, Transport

log = logging.getLogger("fabriclab.sim")

_HELLO_WAIT = 5.0  # seconds a connection may take to say what it is
_PENDING_MAX = 256  # connections that have not said yet
_TREE_LIVE = 30.0  # seconds a tray's tree is kept fresh after it was last asked for
_MESSAGE_MAX = 16 << 20  # the longest message taken (an SA table of a large fabric)
_LONG_SEND_WAIT = 2.0  # seconds a tool may take to make room for the rest of a message
_SNDBUF = 1 << 20  # each umad connection's send buffer: an SM keeps many MADs in flight
_CRED = struct.Struct("iII")  # struct ucred (unix(7))
_TID = struct.Struct(">Q")
_TID_AT = 8  # TransactionID in a MAD (13.4.2)
# A sim_request before its MAD: dlid, slid, dqp, sqp, status, length (simwire.REQUEST),
# with the LID and QP as the network-order bytes both headers carry.
_SIM_PREFIX = struct.Struct(">2s2xH2x4sII4xQ")
# The ib_user_mad header (umad.HDR) fields a write is sent with: timeout_ms and retries
# (host order), the destination QP and LID (network-order bytes) ...
_IN_HEAD = struct.Struct("=8xII4x4s4x2s")
# ... and those a read is given: id, status, timeout_ms, retries, length, then the
# source QP and LID (the rest of the 64 bytes stay zero)
_OUT_HEAD = struct.Struct("=IIIII4s4x2s")
_SIM_ADDR = struct.Struct(">4x2s6x4sI")  # a sim_request's slid, sqp (network order), status
_MAD_AT = simwire.REQUEST_MAD
_SIM_END = _MAD_AT + MAD_SIZE
_FRAME_ONE = umad.HDR_SIZE + MAD_SIZE  # a frame of one 256-byte MAD
_MORE_BYTE = umad.STATUS_AT + 3  # the status's top byte (little-endian): MORE's bit
_CLASS_AT = umad.HDR_SIZE + 1  # MgmtClass in a frame
_CLASS_SIM = _MAD_AT + 1  # ... in a sim_request
_METHOD_AT = _MAD_AT + 3  # Method in a sim_request
_AGENT_AT = _MAD_AT + 10  # TransactionID bits 32-47 (big-endian) in a sim_request
_TRAP_REPRESS = 0x07
_IN_HEAD_UNPACK = _IN_HEAD.unpack_from
_SIM_PREFIX_PACK = _SIM_PREFIX.pack_into
_OUT_HEAD_PACK = _OUT_HEAD.pack_into
_SIM_ADDR_UNPACK = _SIM_ADDR.unpack_from
_SMI_CLASSES = (0x01, 0x81)


def _is_response(mad) -> bool:
    """The kernel's ib_response_mad: the R bit, or TrapRepress (BM's attribute bit is
    not modelled: nothing here speaks BM)."""
    method = mad[3]
    return bool(method & 0x80) or method == 0x07


class UmadSocket(socket.socket):
    """An open umad file's connection, as the server's transport sees a client's data
    socket: ``recv_into`` gives a sim_request made of the tool's ``ib_user_mad`` write,
    ``send`` delivers a sim_request as the kernel's read would give it."""

    def setup(self, link: HostLink) -> None:
        self.link = link
        self.client: Client | None = None
        self.frame = bytearray(hostwire.FRAME_MAX)
        self.frame_mad = memoryview(self.frame)[umad.HDR_SIZE : umad.HDR_SIZE + MAD_SIZE]
        self.partial: bytearray | None = None  # a long message coming in pieces
        self.want = 0
        self.out = bytearray(umad.HDR_SIZE + MAD_SIZE)
        self.out_mad = memoryview(self.out)[umad.HDR_SIZE :]
        # bound once: these run per MAD
        self._recv = functools.partial(socket.socket.recv_into, self)
        self._send = functools.partial(socket.socket.send, self)
        self._tbuf = link.transport.buf

    # --- from the tool ----------------------------------------------------------------

    def recv_into(self, buf, nbytes=0, flags=0) -> int:
        frame = self.frame
        n = self._recv(frame)
        if n == _FRAME_ONE and self.partial is None and not frame[_MORE_BYTE] & 0x80:
            # the common case, one whole 256-byte MAD: as in _take, in fewer steps
            timeout_ms, retries, qpn, lid = _IN_HEAD_UNPACK(frame)
            sqp = 0 if frame[_CLASS_AT] in _SMI_CLASSES else 1
            _SIM_PREFIX_PACK(buf, 0, lid, 0, qpn, sqp, 0, MAD_SIZE)
            buf[_MAD_AT:_SIM_END] = self.frame_mad
            self.link.last = (self.client, MAD_SIZE, b"", timeout_ms, retries)
            return simwire.REQUEST_SIZE
        if n == 0:
            raise ConnectionResetError("the tool closed it")
        if self.partial is not None:
            self.partial += frame[:n]
            if len(self.partial) < self.want:
                raise BlockingIOError
            msg = memoryview(self.partial)[: self.want]
            self.partial = None
            return self._take(buf, msg)
        if n >= umad.MIN_WRITE:
            status = int.from_bytes(frame[umad.STATUS_AT : umad.STATUS_AT + 4], "little")
            if status & hostwire.MORE:
                want = int.from_bytes(frame[umad.LENGTH_AT : umad.LENGTH_AT + 4], "little")
                if n < want <= _MESSAGE_MAX:
                    self.partial, self.want = bytearray(frame[:n]), want
                    raise BlockingIOError
                return n  # not a message: dropped as malformed
        if n < umad.MIN_WRITE:
            return n  # shorter than the kernel takes: dropped as malformed
        return self._take(buf, memoryview(frame)[:n])

    def _take(self, buf, msg) -> int:
        """The message ``msg`` (header and MAD) as a sim_request in ``buf``."""
        timeout_ms, retries, qpn, lid = _IN_HEAD.unpack_from(msg)
        n = len(msg) - umad.HDR_SIZE
        mclass = msg[umad.HDR_SIZE + 1]
        _SIM_PREFIX.pack_into(buf, 0, lid, 0, qpn, 0 if mclass in _SMI_CLASSES else 1, 0, MAD_SIZE)
        if n >= MAD_SIZE:
            buf[_MAD_AT : _MAD_AT + MAD_SIZE] = msg[umad.HDR_SIZE : umad.HDR_SIZE + MAD_SIZE]
        else:  # the kernel sends a short MAD padded to its 256 bytes
            buf[_MAD_AT : _MAD_AT + n] = msg[umad.HDR_SIZE :]
            buf[_MAD_AT + n : _MAD_AT + MAD_SIZE] = bytes(MAD_SIZE - n)
        tail = bytes(msg[umad.HDR_SIZE + MAD_SIZE :]) if n > MAD_SIZE else b""
        self.link.last = (self.client, n, tail, timeout_ms, retries)
        return simwire.REQUEST_SIZE

    # --- to the tool ------------------------------------------------------------------

    def send(self, data, flags=0) -> int:
        slid, sqp, status = _SIM_ADDR_UNPACK(data)
        method = data[_METHOD_AT]
        if not status and (method & 0x80 or method == _TRAP_REPRESS):
            # a response: to the agent named in its TransactionID (bits 32-47)
            ours = type(data) is memoryview and data.obj is self._tbuf
            if not ours or self.link.last[1] == MAD_SIZE:  # nothing longer than a MAD
                if self.link._waiting:
                    self.link.answered(self.client, data, data[_CLASS_SIM])
                out = self.out
                _OUT_HEAD_PACK(out, 0, data[_AGENT_AT] << 8 | data[_AGENT_AT + 1], 0, 0, 0,
                               _FRAME_ONE, sqp, slid)  # fmt: skip
                self.out_mad[:] = data[_MAD_AT:_SIM_END]
                return self._send(out)
        return self._send_other(data, slid, sqp, status)

    def _send_other(self, data, slid: bytes, sqp: bytes, status: int) -> int:
        """A request, a timeout, or a message longer than a MAD, to the tool."""
        link = self.link
        mad = memoryview(data)[_MAD_AT : _MAD_AT + MAD_SIZE]
        last = link.last
        ours = isinstance(data, memoryview) and data.obj is self._tbuf
        tid = _TID.unpack_from(mad, _TID_AT)[0]
        cl = self.client
        if status:  # the request went nowhere: the kernel's timeout read, if one was asked
            if ours and last[0] is cl and last[3] == 0:
                return len(data)
            return self._send_timeout((tid >> 32) & 0xFFFF, bytes(mad[: umad.MAD_HDR]))
        tail = last[2] if ours else b""
        length = last[1] if ours else MAD_SIZE
        if _is_response(mad):
            agent = (tid >> 32) & 0xFFFF
            link.answered(cl, data, mad[1])
        else:
            agent = link.agent_for(cl, mad)
            if ours and last[0] is not None and last[3]:
                link.expect(last, tid, bytes(mad[: umad.MAD_HDR]))
        rmpp = (
            length != MAD_SIZE
            and mad[1] in umad.RMPP_CLASSES
            and mad[umad.RMPP_FLAGS_AT] & umad.RMPP_ACTIVE
        )
        total = umad.HDR_SIZE + (length if rmpp else MAD_SIZE)
        out = self.out
        _OUT_HEAD.pack_into(out, 0, agent, 0, 0, 0, total, sqp, slid)
        out[umad.HDR_SIZE :] = mad
        if not tail and not rmpp:
            return self._send(out)
        body = bytes(out) + tail
        body = body[:total].ljust(total, b"\0")
        if rmpp:
            body = _first_segment(bytearray(body))
        return self._send_long(body)

    def _send_timeout(self, agent: int, head: bytes) -> int:
        """The kernel's read for a send whose response never came (user_mad.c)."""
        frame = bytearray(umad.TIMEOUT_SIZE)
        umad.HDR.pack_into(
            frame,
            0,
            agent,
            umad.ETIMEDOUT,
            0,
            0,
            umad.TIMEOUT_SIZE,
            b"",
            b"",
            b"",
            *[0] * 6,
            b"",
            b"",
            0,
        )
        frame[umad.HDR_SIZE :] = head
        return socket.socket.send(self, frame)

    def _send_long(self, body: bytes) -> int:
        """A message in pieces of at most FRAME_MAX bytes (hostwire), the first marked."""
        step = hostwire.FRAME_MAX
        if len(body) <= step:
            return socket.socket.send(self, body)
        first = bytearray(body[:step])
        status = int.from_bytes(first[umad.STATUS_AT : umad.STATUS_AT + 4], "little")
        first[umad.STATUS_AT : umad.STATUS_AT + 4] = (status | hostwire.MORE).to_bytes(4, "little")
        self.sendall_frames(
            [bytes(first)] + [body[i : i + step] for i in range(step, len(body), step)]
        )
        return len(body)

    def sendall_frames(self, frames: list[bytes]) -> None:
        """Send every frame, waiting for room: a long message is not dropped half-way.  A
        tool that takes none of it for a while is detached (its reads would otherwise
        take the next message for the rest of this one)."""
        deadline = time.monotonic() + _LONG_SEND_WAIT
        for f in frames:
            while True:
                try:
                    socket.socket.send(self, f)
                    break
                except BlockingIOError:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        if self.client is not None:
                            self.link.transport.detach(self.client, "not reading a long message")
                        return
                    select.select([], [self], [], left)


def _first_segment(msg: bytearray) -> bytes:
    """A reassembled RMPP message as the kernel hands it over: segment 1's RMPP header
    (DATA, ACTIVE|FIRST, LAST when one segment, segment number 1, PayLen of the whole)
    before all the data (mad_rmpp.c, alloc_send_rmpp_list / copy_recv_mad)."""
    mad = memoryview(msg)[umad.HDR_SIZE :]
    data = len(mad) - umad.class_header(mad[1])
    seg = MAD_SIZE - umad.class_header(mad[1])
    count = max(1, -(-data // seg))
    pad = count * seg - data
    r = umad.RMPP_AT
    mad[r + 1] = umad.RMPP_TYPE_DATA
    flags = umad.RMPP_ACTIVE | umad.RMPP_FIRST | (umad.RMPP_LAST if count == 1 else 0)
    mad[r + 2] = (mad[r + 2] & 0xF8) | flags
    mad[r + 4 : r + 8] = (1).to_bytes(4, "big")
    mad[r + 8 : r + 12] = (count * umad.RMPP_SEGMENT - pad).to_bytes(4, "big")
    return bytes(msg)


class HostLink:
    """The host protocol's listening socket and connections, for the server ``srv``'s
    ``transport`` and ``sim`` of ``cluster``, with the trays' /sys trees under
    ``trees``; ``set_issm(client, on)`` marks a port's subnet manager."""

    def __init__(
        self, transport: Transport, sim: SimFabric, cluster: Cluster, trees: Path, set_issm
    ):
        self.transport = transport
        self.sim = sim
        self.cluster = cluster
        self.trees_dir = trees
        self.set_issm = set_issm
        # what the MAD just received from a host-library client carries beyond the sim
        # request made of it: (client, MAD length, bytes past the first 256 (an RMPP
        # message), its send's timeout_ms, retries)
        self.last: tuple = (None, MAD_SIZE, b"", 0, 0)
        self._sock: socket.socket | None = None
        self._pending: dict[int, tuple[socket.socket, float]] = {}
        self._ports: dict[str, list[SimPort]] = {}
        self._trees: dict[str, tuple[sysfs.Tree, float]] = {}
        self._issm: dict[SimPort, tuple[socket.socket, Client]] = {}
        # requests forwarded to another client and waiting for their answer:
        # (requester id, TID, class) -> deadline; and the deadlines in order
        self._waiting: dict[tuple[int, int, int], tuple[float, int, bytes]] = {}
        self._deadlines: list[tuple[float, tuple[int, int, int]]] = []
        self.said = 0

    # --- the listening socket ---------------------------------------------------------

    def bind(self) -> None:
        """Listen on ``<name>:host``; OSError to the caller."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_NONBLOCK)
        try:
            s.bind(simwire.sockname(self.transport.name, hostwire.SOCKET_KIND))
            s.listen(128)
        except OSError:
            s.close()
            raise
        self._sock = s
        transport = self.transport
        transport.watch(s.fileno(), self._accept)
        transport.on_tick.append(self.tick)
        # the loop's other hooks go on, ours beside them
        wake, left = transport.on_wake, transport.on_detach
        transport.on_wake = lambda: min(wake(), self.wake())

        def detached(cl: Client) -> None:
            left(cl)
            self.client_left(cl)

        transport.on_detach = detached

    def close(self) -> None:
        """Close every connection and the listening socket; the trees go."""
        for fd, (c, _) in list(self._pending.items()):
            self.transport.unwatch(fd)
            c.close()
        self._pending.clear()
        for c, _cl in list(self._issm.values()):
            self.transport.unwatch(c.fileno())
            c.close()
        self._issm.clear()
        if self._sock is not None:
            self.transport.unwatch(self._sock.fileno())
            self._sock.close()
            self._sock = None
        shutil.rmtree(self.trees_dir, ignore_errors=True)

    def _accept(self) -> None:
        assert self._sock is not None
        for _ in range(64):
            try:
                c, _addr = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:  # out of descriptors: the tool sees its connect hang up
                self.transport.rlog.warning("host connections refused", "host link: %s", e)
                return
            if len(self._pending) >= _PENDING_MAX:
                c.close()
                continue
            c.setblocking(False)
            fd = c.fileno()
            self._pending[fd] = (c, time.monotonic())
            self.transport.watch(fd, functools.partial(self._hello, c))

    def tick(self) -> None:
        """Every couple of seconds: connections that never said what they are go; trees
        asked for lately are brought up to date."""
        now = time.monotonic()
        for _fd, (c, since) in list(self._pending.items()):
            if now - since > _HELLO_WAIT:
                self._forget_pending(c)
                c.close()
        for tray, (tree, asked) in list(self._trees.items()):
            if now - asked < _TREE_LIVE:
                self._write_tree(tray, tree)

    def _forget_pending(self, c: socket.socket) -> None:
        fd = c.fileno()
        if self._pending.pop(fd, None) is not None:
            self.transport.unwatch(fd)

    # --- a connection says what it is ---------------------------------------------------

    def _hello(self, c: socket.socket) -> None:
        try:
            raw = c.recv(hostwire.HELLO.size + umad.REG_REQ2.size + 1)
        except BlockingIOError:
            return
        except OSError:
            raw = b""
        self._forget_pending(c)
        keep = False
        try:
            if len(raw) < hostwire.HELLO.size:
                raise _Refusal(errno.EPROTO, "not a fabriclab host protocol greeting")
            magic, version, kind, pid, index, token, _r, tray_raw = hostwire.HELLO.unpack_from(raw)
            if magic != hostwire.MAGIC or version != hostwire.VERSION:
                raise _Refusal(errno.EPROTO, f"host protocol {magic:#x} v{version}, not v1")
            self._check_peer(c)
            tray = simwire.cstring(tray_raw)
            rest = raw[hostwire.HELLO.size :]
            if kind == hostwire.KIND_TREE:
                self._reply(c, 0, 0, 0, str(self.tree(tray)))
            elif kind == hostwire.KIND_UMAD:
                cl = self._open_umad(c, tray, index, pid)
                keep = True
                self._reply(cl.sock, 0, cl.id, cl.port.lid, "")
            elif kind == hostwire.KIND_ISSM:
                self._open_issm(c, tray, index, pid)
                keep = True
                self._reply(c, 0, 0, 0, "")
            elif kind == hostwire.KIND_REGISTER:
                self._register(token, rest)
                self._reply(c, 0, token, 0, "")
            elif kind == hostwire.KIND_UNREGISTER:
                self._unregister(token, index)
                self._reply(c, 0, token, 0, "")
            else:
                raise _Refusal(errno.EPROTO, f"no connection kind {kind}")
        except _Refusal as r:
            self._reply(c, r.err, 0, 0, r.text)
        except FabriclabError as e:
            self._reply(c, errno.ENODEV, 0, 0, str(e).removeprefix("error: "))
        if not keep:
            c.close()

    def _reply(self, c: socket.socket, err: int, token: int, value: int, text: str) -> None:
        data = (
            hostwire.REPLY.pack(hostwire.MAGIC, err, token, value)
            + text.encode()[: hostwire.TEXT_MAX]
        )
        try:
            socket.socket.send(c, data)
        except OSError:
            pass

    def _check_peer(self, c: socket.socket) -> None:
        _pid, uid, _gid = _CRED.unpack(
            c.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size)
        )
        if uid not in self.transport.policy.uids:
            raise _Refusal(errno.EACCES, f"uid {uid} may not attach (up --allow-user)")

    def ports(self, tray: str) -> list[SimPort]:
        """Tray ``tray``'s HCA ports in umad order (the order its tree lists them)."""
        got = self._ports.get(tray)
        if got is None:
            t = self.cluster.tray(tray)
            if t is None:
                raise _Refusal(
                    errno.ENODEV, f"{tray or '(no FABRICLAB_TRAY)'}: no such tray in this fabric"
                )
            got = []
            for node in t.hcas[: hostview.HCAS_MAX]:
                sn = self.sim.node_of(node)
                got += [sp for sp in sn.ports if sp is not None and sp.num != 0]
            self._ports[tray] = got
        return got

    def _port(self, tray: str, index: int) -> SimPort:
        ports = self.ports(tray)
        if not 0 <= index < len(ports):
            raise _Refusal(errno.ENODEV, f"{tray} has no umad{index}")
        return ports[index]

    def _open_umad(self, c: socket.socket, tray: str, index: int, pid: int) -> Client:
        port = self._port(tray, index)
        transport = self.transport
        clients = transport.clients
        if len(clients) >= transport.capacity:
            raise _Refusal(
                errno.EMFILE, f"the server holds its limit of {transport.capacity} clients"
            )
        cid = next(i for i in range(transport.capacity) if i not in clients)
        sock = UmadSocket(fileno=c.detach())
        sock.setblocking(False)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _SNDBUF)
        except OSError:
            pass
        sock.setup(self)
        cl = Client(cid, pid, port, 1, False, tray, sock, pid=pid, agents={})
        sock.client = cl
        transport.attach(cl)
        log.info("client %d (host library, pid %d) attached at %s", cid, pid, port.ref())
        return cl

    def _open_issm(self, c: socket.socket, tray: str, index: int, pid: int) -> None:
        port = self._port(tray, index)
        if port in self._issm or any(
            cl.issm and cl.port is port for cl in self.transport.clients.values()
        ):
            raise _Refusal(errno.EBUSY, f"an SM holds issm{index} of {tray}")
        holder = Client(-1, pid, port, 0, False, tray, c, pid=pid)
        self._issm[port] = (c, holder)
        self.set_issm(holder, True)
        self.transport.watch(c.fileno(), lambda: self._issm_ready(port))

    def _issm_ready(self, port: SimPort) -> None:
        c, holder = self._issm[port]
        try:
            if c.recv(64):
                return  # nothing is said on it: ignored
        except BlockingIOError:
            return
        except OSError:
            pass
        del self._issm[port]
        self.transport.unwatch(c.fileno())
        c.close()
        holder.issm = True
        self.set_issm(holder, False)

    def _client(self, token: int) -> Client:
        cl = self.transport.clients.get(token)
        if cl is None or cl.agents is None:
            raise _Refusal(errno.EINVAL, f"no umad connection {token}")
        return cl

    def _register(self, token: int, raw: bytes) -> None:
        cl = self._client(token)
        if len(raw) < umad.REG_REQ2.size:
            raise _Refusal(errno.EINVAL, "registration without its request")
        aid, _qpn, mclass, version, _res, _flags, mask, oui, rmpp = umad.REG_REQ2.unpack_from(raw)
        agent = Agent(aid, mclass, version, oui, int.from_bytes(mask, "little"), rmpp)
        assert cl.agents is not None
        if not 0 <= aid < umad.MAX_AGENTS or aid in cl.agents:
            raise _Refusal(errno.EINVAL, f"agent {aid} is not free")
        if in_use(self.transport.clients.values(), cl.port, agent):
            raise _Refusal(errno.EINVAL, "a method is already in use on that port")
        cl.agents[aid] = agent

    def _unregister(self, token: int, aid: int) -> None:
        cl = self._client(token)
        assert cl.agents is not None
        if cl.agents.pop(aid, None) is None:
            raise _Refusal(errno.EINVAL, f"no agent {aid}")

    # --- trees ------------------------------------------------------------------------

    def tree(self, tray: str) -> Path:
        """Tray ``tray``'s /sys root, written fresh now."""
        self.ports(tray)  # the tray exists
        got = self._trees.get(tray)
        if got is None:
            tree = sysfs.Tree(self.trees_dir / tray)
            tree.claim()
        else:
            tree = got[0]
        self._write_tree(tray, tree)
        self._trees[tray] = (tree, time.monotonic())
        return tree.root

    def _write_tree(self, tray: str, tree: sysfs.Tree) -> None:
        tree.update(sysfs.render(hostview.tray_view(self.cluster, self.sim, tray)))

    # --- MADs -------------------------------------------------------------------------

    def agent_for(self, cl: Client | None, mad) -> int:
        """The id of ``cl``'s agent that takes request ``mad`` (0: none matched)."""
        if cl is None or not cl.agents:
            return 0
        mclass = mad[1]
        oui = int.from_bytes(mad[OUI_AT : OUI_AT + 3], "big") if 0x30 <= mclass < 0x50 else 0
        for a in cl.agents.values():
            if a.takes(mclass, mad[2], mad[3], oui):
                return a.id
        return 0

    def expect(self, last: tuple, tid: int, head: bytes) -> None:
        """The request just received (``last``) was handed to another client: if its
        answer does not come in time, the requester reads a timeout (as from the kernel)."""
        requester, _n, _tail, timeout_ms, retries = last
        wait = timeout_ms * (retries + 1) / 1000.0
        key = (requester.id, tid & 0xFFFF_FFFF, head[1])
        deadline = time.monotonic() + wait
        self._waiting[key] = (deadline, (tid >> 32) & 0xFFFF, head)
        heapq.heappush(self._deadlines, (deadline, key))

    def answered(self, cl: Client | None, data, mclass: int) -> None:
        """A response (the sim_request ``data``) reached ``cl``: its request waits no more."""
        if self._waiting and cl is not None:
            tid = _TID.unpack_from(data, _MAD_AT + _TID_AT)[0]
            self._waiting.pop((cl.id, tid & 0xFFFF_FFFF, mclass), None)

    def wake(self) -> float:
        """Requests whose answer did not come are timed out; seconds until the next."""
        now = time.monotonic()
        dl = self._deadlines
        while dl and dl[0][0] <= now:
            deadline, key = heapq.heappop(dl)
            got = self._waiting.get(key)
            if got is None or got[0] != deadline:
                continue
            del self._waiting[key]
            cl = self.transport.clients.get(key[0])
            if cl is not None and isinstance(cl.sock, UmadSocket):
                try:
                    cl.sock._send_timeout(got[1], got[2])
                except OSError:
                    pass
        return dl[0][0] - now if dl else 3600.0

    def client_left(self, cl: Client) -> None:
        """Forget what waited for ``cl``."""
        if self._waiting:
            for key in [k for k in self._waiting if k[0] == cl.id]:
                del self._waiting[key]


class _Refusal(Exception):
    def __init__(self, err: int, text: str):
        super().__init__(text)
        self.err, self.text = err, text


def trees_dir(state: Path, name: str) -> Path:
    """Where fabric ``name``'s trays' trees are written."""
    return state / f"{name}.trees"
