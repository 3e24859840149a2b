"""An open umad file of a tool run through fabriclab's host library, as the fabric
server's transport sees a client's data socket (:class:`UmadSocket`): the kernel's
``ib_user_mad`` frames the library sends (:mod:`fabriclab.ib.hostwire`) made into the
server's sim_request and back, a message longer than a MAD (an RMPP table) in pieces
and whole, and the kernel's timeout read; and what the open umad files of a fabric share
as the kernel's MAD layer does (:class:`MadLayer`: which agent takes a request, which
requests wait for an answer, and until when).  The connections themselves, and what the
server learns from them, are :mod:`.hostlink`'s.
"""

from __future__ import annotations

import functools
import heapq
import mmap
import select
import socket
import struct
import time

from ...ib import hostwire, simwire, umad
from ...ib.mad.view import MAD_SIZE
from .agents import OUI_AT
from .client import Client
from .hostgate import privileged
from .transport import Transport

# The longest message taken from a tool or sent to one (hostwire.MESSAGE_MAX: neither
# the kernel nor libibumad bounds it; the host library fails a device sent more).
_MESSAGE_MAX = hostwire.MESSAGE_MAX
# What every tool's unfinished messages may hold together, and how long one may stay
# unfinished (the host library sends a message's pieces back to back).
UNFINISHED_MAX = 64 << 20
UNFINISHED_WAIT = 10.0
_LONG_SEND_WAIT = 2.0  # seconds a tool may take to make room for the rest of a message
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

    def setup(self, mads: MadLayer) -> None:
        self.mads = mads
        self.client: Client | None = None
        self.frame = bytearray(hostwire.FRAME_MAX)
        self.frame_mad = memoryview(self.frame)[umad.HDR_SIZE : umad.HDR_SIZE + MAD_SIZE]
        # a long message coming in pieces: mapped memory of its length (given back to
        # the system whole when it is done or the tool goes), and how much came
        self.partial: mmap.mmap | None = None
        self.want = self.have = 0
        self.started = 0.0
        self.out = bytearray(umad.HDR_SIZE + MAD_SIZE)
        self.out_mad = memoryview(self.out)[umad.HDR_SIZE :]
        # bound once: these run per MAD (a TCP connection's, .hosttcp, frame each packet)
        self._recv = functools.partial(socket.socket.recv_into, self)
        self._send = functools.partial(socket.socket.send, self)
        self._tbuf = mads.transport.buf

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
            self.mads.last = (self.client, MAD_SIZE, b"", timeout_ms, retries)
            return simwire.REQUEST_SIZE
        if n == 0:
            raise ConnectionResetError("the tool closed it")
        part = self.partial
        if part is not None:
            take = min(n, self.want - self.have)
            part[self.have : self.have + take] = frame[:take]
            self.have += take
            if self.have < self.want:
                raise BlockingIOError
            try:
                with memoryview(part) as msg:
                    return self._take(buf, msg)
            finally:
                self.drop_partial()
        if n >= umad.MIN_WRITE:
            status = int.from_bytes(frame[umad.STATUS_AT : umad.STATUS_AT + 4], "little")
            if status & hostwire.MORE:
                want = int.from_bytes(frame[umad.LENGTH_AT : umad.LENGTH_AT + 4], "little")
                if not n < want <= _MESSAGE_MAX:
                    return n  # not a message: dropped as malformed
                self._start(frame, n, want)
                raise BlockingIOError
        if n < umad.MIN_WRITE:
            return n  # shorter than the kernel takes: dropped as malformed
        return self._take(buf, memoryview(frame)[:n])

    def _start(self, frame: bytearray, n: int, want: int) -> None:
        """A message of ``want`` bytes begins with ``frame[:n]``; one past what
        unfinished messages may hold together closes the connection (its pieces would
        be read as messages of their own)."""
        mads = self.mads
        if mads.unfinished + want > UNFINISHED_MAX:
            mads.make_room(self.client, want)
        if mads.unfinished + want > UNFINISHED_MAX:
            why = (
                f"a message of {want} bytes would take the unfinished messages of every "
                f"tool past {UNFINISHED_MAX >> 20} MiB"
            )
            cid = self.client.id if self.client is not None else -1
            mads.transport.rlog.warning(
                "long messages refused", "client %d: %s; connection closed", cid, why
            )
            raise ConnectionAbortedError(why)
        part = mmap.mmap(-1, want)
        part[:n] = frame[:n]
        self.partial, self.want, self.have = part, want, n
        self.started = time.monotonic()
        mads.unfinished += want
        mads.partials.add(self)

    def drop_partial(self) -> None:
        """Give back the unfinished message's memory (if any)."""
        part = self.partial
        if part is not None:
            self.partial = None
            self.mads.unfinished -= self.want
            self.mads.partials.discard(self)
            self.want = self.have = 0
            part.close()

    def close(self) -> None:
        if getattr(self, "partial", None) is not None:
            self.drop_partial()
        super().close()

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
        self.mads.last = (self.client, n, tail, timeout_ms, retries)
        return simwire.REQUEST_SIZE

    # --- to the tool ------------------------------------------------------------------

    def send(self, data, flags=0) -> int:
        slid, sqp, status = _SIM_ADDR_UNPACK(data)
        method = data[_METHOD_AT]
        if not status and (method & 0x80 or method == _TRAP_REPRESS):
            # a response: to the agent named in its TransactionID (bits 32-47)
            ours = type(data) is memoryview and data.obj is self._tbuf
            mads = self.mads
            if not ours or mads.last[1] == MAD_SIZE:  # nothing longer than a MAD
                if mads.waiting:
                    tid = _TID.unpack_from(data, _MAD_AT + _TID_AT)[0]
                    mads.answered(self.client, tid, data[_CLASS_SIM])
                out = self.out
                _OUT_HEAD_PACK(out, 0, data[_AGENT_AT] << 8 | data[_AGENT_AT + 1], 0, 0, 0,
                               _FRAME_ONE, sqp, slid)  # fmt: skip
                self.out_mad[:] = data[_MAD_AT:_SIM_END]
                return self._send(out)
        return self._send_other(data, slid, sqp, status)

    def _send_other(self, data, slid: bytes, sqp: bytes, status: int) -> int:
        """A request, a timeout, or a message longer than a MAD, to the tool."""
        mads = self.mads
        mad = memoryview(data)[_MAD_AT : _MAD_AT + MAD_SIZE]
        last = mads.last
        ours = isinstance(data, memoryview) and data.obj is self._tbuf
        tid = _TID.unpack_from(mad, _TID_AT)[0]
        cl = self.client
        if status:  # the request went nowhere: the kernel's timeout read, if one was asked
            if ours and last[0] is cl and last[3] == 0:
                return len(data)
            return self.send_timeout((tid >> 32) & 0xFFFF, bytes(mad[: umad.MAD_HDR]))
        tail = last[2] if ours else b""
        length = last[1] if ours else MAD_SIZE
        if _is_response(mad):
            agent = (tid >> 32) & 0xFFFF
            mads.answered(cl, tid, mad[1])
        else:
            agent = mads.agent_for(cl, mad)
            if ours and last[0] is not None and last[3]:
                mads.expect(last, tid, bytes(mad[: umad.MAD_HDR]))
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

    def send_timeout(self, agent: int, head: bytes) -> int:
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
        return self._send(frame)

    def _send_long(self, body: bytes) -> int:
        """A message in pieces of at most FRAME_MAX bytes (hostwire), the first marked."""
        step = hostwire.FRAME_MAX
        if len(body) > _MESSAGE_MAX:
            cid = self.client.id if self.client is not None else -1
            self.mads.transport.rlog.warning(
                "long messages refused",
                "client %d: a message of %d bytes is longer than the %d the host protocol "
                "carries; not sent",
                cid,
                len(body),
                _MESSAGE_MAX,
            )
            return len(body)
        if len(body) <= step:
            return self._send(body)
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
                    self._send(f)
                    break
                except BlockingIOError:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        if self.client is not None:
                            self.mads.transport.detach(self.client, "not reading a long message")
                        return
                    select.select([], [self], [], left)


class MadLayer:
    """What the open umad files of one fabric share, as the kernel's MAD layer keeps it
    for the tools of a host: the MAD just received from one of them, the agent a
    request is for, and the requests handed to another client that wait for their
    answer until their send's timeout (then the requester reads the kernel's timeout)."""

    def __init__(self, transport: Transport):
        self.transport = transport
        # what the MAD just received from a host-library client carries beyond the sim
        # request made of it: (client, MAD length, bytes past the first 256 (an RMPP
        # message), its send's timeout_ms, retries); set by the socket that read it,
        # read by the one the MAD is sent to next (the loop handles one at a time)
        self.last: tuple = (None, MAD_SIZE, b"", 0, 0)
        # requests forwarded to another client and waiting for their answer:
        # (requester id, TID, class) -> (deadline, agent, head); and the deadlines in order
        self.waiting: dict[tuple[int, int, int], tuple[float, int, bytes]] = {}
        self._deadlines: list[tuple[float, tuple[int, int, int]]] = []
        # the sockets with an unfinished message, and the bytes those messages reserve
        self.partials: set[UmadSocket] = set()
        self.unfinished = 0

    def make_room(self, cl: Client | None, want: int) -> None:
        """The fabric owner's or root's message needs ``want`` bytes: other users' tools
        with unfinished messages are closed, the oldest first, until it fits."""
        if cl is None or not cl.sender or not privileged(cl.sender[1]):
            return
        others = [s for s in self.partials if s.client is not None and s.client.sender
                  and not privileged(s.client.sender[1])]  # fmt: skip
        for sock in sorted(others, key=lambda s: s.started):
            if self.unfinished + want <= UNFINISHED_MAX:
                return
            victim = sock.client
            assert victim is not None
            self.transport.rlog.warning(
                "long messages refused",
                "client %d: its unfinished message makes room for the owner's; connection closed",
                victim.id,
            )
            self.transport.detach(victim, "unfinished message closed for the owner's")

    def stalled(self, now: float) -> None:
        """Tools whose message stayed unfinished too long are detached (its memory goes
        back)."""
        for sock in [s for s in self.partials if now - s.started > UNFINISHED_WAIT]:
            cl = sock.client
            sock.drop_partial()
            if cl is not None:
                self.transport.detach(
                    cl, f"a message unfinished after {UNFINISHED_WAIT:g} s: connection closed"
                )

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
        self.waiting[key] = (deadline, (tid >> 32) & 0xFFFF, head)
        heapq.heappush(self._deadlines, (deadline, key))

    def answered(self, cl: Client | None, tid: int, mclass: int) -> None:
        """A response (TransactionID ``tid``) reached ``cl``: its request waits no more."""
        if self.waiting and cl is not None:
            self.waiting.pop((cl.id, tid & 0xFFFF_FFFF, mclass), None)

    def wake(self) -> float:
        """Requests whose answer did not come are timed out; seconds until the next."""
        now = time.monotonic()
        dl = self._deadlines
        while dl and dl[0][0] <= now:
            deadline, key = heapq.heappop(dl)
            got = self.waiting.get(key)
            if got is None or got[0] != deadline:
                continue
            del self.waiting[key]
            cl = self.transport.clients.get(key[0])
            if cl is not None and isinstance(cl.sock, UmadSocket):
                try:
                    cl.sock.send_timeout(got[1], got[2])
                except OSError:
                    pass
        return dl[0][0] - now if dl else 3600.0

    def client_left(self, cl: Client) -> None:
        """Forget what waited for ``cl``."""
        if self.waiting:
            for key in [k for k in self.waiting if k[0] == cl.id]:
                del self.waiting[key]


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
