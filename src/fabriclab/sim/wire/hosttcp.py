"""The host protocol over TCP (``up --host-listen``): tools on a tray in another network
namespace, container or machine reach the fabric's host link (:mod:`.hostlink`).

Each packet of the unix socket's protocol travels framed, a 4-byte little-endian length
then the packet (:mod:`fabriclab.ib.hostwire`).  A connection from outside the
``--allow`` networks is answered EACCES at accept, before anything is read; the others
wait (:class:`.hostgate.Pending`, a few per address) for their first packet, the
fabric's token, compared in constant time, and then their HELLO, which goes to
:meth:`.hostlink.HostLink.greet` exactly as a unix connection's does.  A connection that
becomes an open umad file is a :class:`TcpUmadSocket`: the same :class:`.UmadSocket`
with each packet framed, so a MAD takes the one path every client takes.  TREE is
answered with the tray's tree as an archive (:mod:`fabriclab.ib.treearchive`), since a
path on the server means nothing to the tool.
"""

from __future__ import annotations

import errno
import functools
import hmac
import ipaddress
import os
import secrets
import select
import socket
import time
import zlib
from pathlib import Path

from ...errors import InputError, Problem
from ...ib import hostwire, treearchive
from ...inputs import parse_host_port
from ...statedir import open_state_file
from .hostgate import Peer, Pending, accepted
from .hostlink import HostLink
from .umadsock import UmadSocket

_LEN = hostwire.LENGTH
_SEND_WAIT = 2.0  # seconds a tool may take to make room for the rest of a packet or tree
_JOIN_MAX = 4096  # bytes of a packet sent joined to its length (_send_framed)
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
LOOPBACK: tuple[Network, ...] = (
    ipaddress.ip_network("127.0.0.0/8"),
    ipaddress.ip_network("::1/128"),
)


class _Reader:
    """A TCP stream's packets read one at a time, exactly: never a byte of the next
    one, so a packet left unread keeps the socket readable (the loop's epoll is
    level-triggered)."""

    def __init__(self) -> None:
        self.head = bytearray(_LEN.size)
        self.have_head = 0
        self.have = 0

    def read(self, sock: socket.socket, frame) -> int:
        """The next packet into ``frame`` (a writable buffer of FRAME_MAX bytes): its
        length; 0 when the peer closed; BlockingIOError until it has all come;
        ConnectionAbortedError for a length outside 1..FRAME_MAX."""
        recv_into = socket.socket.recv_into
        head = self.head
        while self.have_head < _LEN.size:  # (no view made unless it came in parts)
            at = self.have_head
            k = recv_into(sock, memoryview(head)[at:] if at else head, _LEN.size - at)
            if k == 0:
                return 0
            self.have_head += k
        (n,) = _LEN.unpack(head)
        if not 1 <= n <= hostwire.FRAME_MAX:
            raise ConnectionAbortedError(f"a packet of {n} bytes")
        while self.have < n:
            at = self.have
            k = recv_into(sock, memoryview(frame)[at:] if at else frame, n - at)
            if k == 0:
                return 0
            self.have += k
        self.have_head = self.have = 0
        return n


def _send_framed(sock: socket.socket, data) -> int:
    """Send one packet framed; BlockingIOError when none of it went (as a full unix
    socket would say).  A packet half sent is finished within _SEND_WAIT seconds, or
    the connection is shut (the stream would be garbage past it).  A packet of a MAD or
    two goes joined to its length in one send (0.3 to 0.7 us less a packet than
    sendmsg of the two on loopback); a longer one as sendmsg of the two, uncopied."""
    n = len(data)
    head = _LEN.pack(n)
    if n <= _JOIN_MAX:
        sent = socket.socket.send(sock, head + data)
    else:
        sent = socket.socket.sendmsg(sock, [head, data])
    if sent < n + _LEN.size:
        rest = (head + bytes(data))[sent:]
        if not _finish(sock, rest):
            sock.shutdown(socket.SHUT_RDWR)  # the loop sees it gone and detaches it
    return n


def _finish(sock: socket.socket, rest: bytes) -> bool:
    """Send ``rest`` within _SEND_WAIT seconds; whether it all went."""
    deadline = time.monotonic() + _SEND_WAIT
    view = memoryview(rest)
    while view:
        try:
            view = view[socket.socket.send(sock, view) :]
            continue
        except BlockingIOError:
            pass
        except OSError:
            return False
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        select.select([], [sock], [], left)
    return True


class TcpUmadSocket(UmadSocket):
    """An open umad file over TCP: :class:`.UmadSocket` reading and writing framed
    packets."""

    def setup(self, mads) -> None:
        super().setup(mads)
        self._reader = _Reader()
        self._recv = functools.partial(self._reader.read, self)
        self._send = functools.partial(_send_framed, self)

    def send_packet(self, data) -> int:
        """One packet (the REPLY to its HELLO) to the tool."""
        return _send_framed(self, data)


class TcpConn(socket.socket):
    """A TCP connection until it has said what it is: its token, then its HELLO."""

    def setup(self, addr: str) -> None:
        self.addr = addr
        self.reader = _Reader()
        self.frame = bytearray(hostwire.FRAME_MAX)
        self.authed = False

    def send_packet(self, data) -> int:
        """One packet (a REPLY) to the tool."""
        return _send_framed(self, data)

    def umad_socket(self) -> TcpUmadSocket:
        """This connection as an open umad file's (this object is left detached)."""
        return TcpUmadSocket(fileno=self.detach())

    def send_tree(self, root: Path, live_ms: int = 0) -> None:
        """The tree at ``root`` as an archive: a REPLY with its size (and in its token
        the time the tool may use it before asking again), then the archive in packets
        (the tool has a few seconds to take it all)."""
        try:
            data = treearchive.pack(root)
        except (OSError, treearchive.TreeError) as e:
            self.send_packet(_reply(errno.EIO, 0, f"the tray's tree cannot be sent: {e}"))
            return
        out = [_reply(0, len(data), "", live_ms)]
        step = hostwire.FRAME_MAX
        out += [data[i : i + step] for i in range(0, len(data), step)]
        _finish(self, b"".join(_LEN.pack(len(p)) + p for p in out))


def _reply(err: int, value: int, text: str, token: int = 0) -> bytes:
    head = hostwire.REPLY.pack(hostwire.MAGIC, err, token, value)
    return head + text.encode()[: hostwire.TEXT_MAX]


class HostTcp:
    """The TCP listener of fabric ``name``'s host link ``link`` at ``addr`` (host, port;
    port 0: one the kernel picks, then :attr:`addr` holds it), open to ``networks``,
    with ``token``."""

    def __init__(
        self, link: HostLink, name: str, addr: tuple[str, int], networks, token: str
    ) -> None:
        self.link = link
        self.transport = link.transport
        self.name = name
        self.addr = addr
        self.networks = tuple(networks)
        self._token = token.encode()
        self._sock: socket.socket | None = None
        self._pending = Pending(owner=-1)  # no address is privileged
        self.refused = 0

    def bind(self) -> None:
        """Listen (OSError to the caller)."""
        host, port = self.addr
        fam = socket.AF_INET6 if ":" in host else socket.AF_INET
        s = socket.socket(fam, socket.SOCK_STREAM | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC)
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if fam == socket.AF_INET6:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            s.bind((host, port))
            s.listen(128)
        except OSError:
            s.close()
            raise
        self._sock = s
        self.addr = (host, s.getsockname()[1])
        self.transport.watch(s.fileno(), self._accept)
        self.transport.on_tick.append(self.tick)

    def close(self) -> None:
        """Close the listener and every connection still saying what it is."""
        for fd, w in list(self._pending.by_fd.items()):
            self._forget(fd)
            w.sock.close()
        if self._sock is not None:
            self.transport.unwatch(self._sock.fileno())
            self._sock.close()
            self._sock = None

    def allowed(self, host: str) -> bool:
        """Whether address ``host`` is in the --allow networks."""
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            return False
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        return any(ip.version == n.version and ip in n for n in self.networks)

    def _accept(self) -> None:
        assert self._sock is not None
        for s, raddr in accepted(self._sock, self.transport.rlog, "host tcp"):
            c = TcpConn(fileno=s.detach())
            c.setup(raddr[0])
            self._admit(c)

    def _admit(self, c: TcpConn) -> None:
        rlog = self.transport.rlog
        if not self.allowed(c.addr):
            self.refused += 1
            text = f"{c.addr} is not allowed to attach to fabric '{self.name}' (up --allow)"
            rlog.warning("host connections from outside --allow refused", "host tcp: %s", text)
            self._refuse(c, text)
            return
        c.setblocking(False)
        try:
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        quota = Peer(0, 1 << 32 | zlib.crc32(c.addr.encode()), 0, c.addr)  # one per address
        ok, evicted = self._pending.admit(c, quota)
        if not ok and self._pending.of_uid(quota.uid):
            # its address's quota is full: its own oldest silent connection makes way (a
            # hung tool must not keep the next one of its tray out)
            evicted = min(
                (w for w in self._pending.by_fd.values() if w.peer.uid == quota.uid),
                key=lambda w: w.since,
            )
            self._forget(evicted.sock.fileno())
            ok, _none = self._pending.admit(c, quota)
        if evicted is not None:
            self._forget(evicted.sock.fileno())
            evicted.sock.close()
        if not ok:
            rlog.warning(
                "host connections refused for silence",
                "host tcp: %s holds %d connections that have not said what they are; "
                "one more refused",
                c.addr,
                self._pending.of_uid(quota.uid),
            )
            c.close()
            return
        self.transport.watch(c.fileno(), functools.partial(self._ready, c))

    def _refuse(self, c: TcpConn, text: str) -> None:
        try:
            c.setblocking(False)
            c.send_packet(_reply(errno.EACCES, 0, text))
        except OSError:
            pass
        c.close()

    def _forget(self, fd: int) -> None:
        if self._pending.forget(fd) is not None:
            self.transport.unwatch(fd)

    def _ready(self, c: TcpConn) -> None:
        """The token, then the HELLO, as they come."""
        for _ in range(2):
            try:
                n = c.reader.read(c, c.frame)
            except BlockingIOError:
                return
            except OSError:
                n = 0
            if n == 0:
                self._forget(c.fileno())
                c.close()
                return
            raw = bytes(c.frame[:n])
            if not c.authed:
                if not hmac.compare_digest(raw, self._token):
                    self.refused += 1
                    text = f"wrong token for fabric '{self.name}'"
                    self.transport.rlog.warning(
                        "host connections with a wrong token refused", "host tcp: %s: %s",
                        c.addr, text,
                    )  # fmt: skip
                    self._forget(c.fileno())
                    self._refuse(c, text)
                    return
                c.authed = True
                continue
            self._forget(c.fileno())
            pid = hostwire.HELLO.unpack_from(raw)[3] if n >= hostwire.HELLO.size else 0
            peer = Peer(pid, 1 << 32 | zlib.crc32(c.addr.encode()), 0, c.addr)
            self.link.greet(c, peer, raw)
            return

    def tick(self) -> None:
        """Connections that never said what they are go."""
        for w in self._pending.silent(time.monotonic()):
            self._forget(w.sock.fileno())
            w.sock.close()


# --- what up is given ---------------------------------------------------------------


def parse_host_listen(text: str) -> tuple[str, int]:
    """``--host-listen [HOST:]PORT`` (:func:`fabriclab.inputs.parse_host_port`)."""
    return parse_host_port(text, "--host-listen")


def parse_allow(texts: list[str] | None) -> tuple[Network, ...]:
    """``--allow CIDR[,CIDR…]`` (repeatable; IPv4 or IPv6): the networks whose tools may
    attach over TCP; loopback when none is named."""
    nets: list[Network] = []
    for text in texts or []:
        for item in filter(None, (t.strip() for t in text.split(","))):
            try:
                nets.append(ipaddress.ip_network(item, strict=False))
            except ValueError:
                raise InputError(
                    [Problem("--allow", f"{item!r}: want a network such as 10.0.0.0/24")]
                ) from None
    return tuple(nets) or LOOPBACK


def token_path(state: Path, name: str) -> Path:
    """Where fabric ``name``'s token is kept (0600)."""
    return state / f"{name}.token"


def make_token(path: Path) -> str:
    """A fresh token (secrets.token_hex(32)), written to ``path`` 0600."""
    token = secrets.token_hex(hostwire.TOKEN_SIZE // 2)
    path.unlink(missing_ok=True)
    fd = open_state_file(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token
