"""The fabric server's sockets and the clients attached through them.

One thread, one epoll loop over the control socket and a data socket per client;
datagrams are handled in arrival order (libibnetdisc's discovery order depends on
answers coming back in the order they were asked).  Every datagram from a client is
received into one buffer (:attr:`Transport.buf`), where it is answered in place.

The registry of attached clients lives here too: who they are, where they sit, and when
they are gone.  A client that vanished is detached the first time a datagram to it
fails, and by a periodic sweep for clients whose process or socket is gone.  What the
control records and the MADs mean is for the handlers the server sets
(:attr:`Transport.on_control`, :attr:`Transport.on_mad`, ...).
"""

from __future__ import annotations

import errno
import gc
import logging
import os
import resource
import select
import signal
import socket
import struct
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from ...ib import simwire
from . import procfs
from .admission import FD_RESERVE, Policy
from .client import Client
from .ratelog import RateLimitedLog
from .sockfacts import close_passed_fds, last_datagram, pid_exists, show_address
from .stats import Stats

log = logging.getLogger("fabriclab.sim")

_NONE = object()
_SWEEP_INTERVAL = 2.0
MADS_PER_WAKEUP = 8  # datagrams read from one client per readiness event
_CTL_BURST = 64  # control records read per wake-up, so a flood cannot starve the MADs
_CTL_RECV = 4096  # more than a record: a longer datagram is seen as too long, not cut
_CRED = struct.Struct("iII")  # struct ucred { pid_t pid; uid_t uid; gid_t gid; } (unix(7))
_ANC_SIZE = socket.CMSG_SPACE(_CRED.size)  # room for the credentials and no descriptors
_BUFFER = 4096  # more than a sim_request: a longer datagram is seen as too long, not cut


def _ignore(*_args) -> None:
    pass


class Transport:
    """The sockets of a fabric server named ``name`` (abstract sockets), or on UDP
    ``listen`` = (host, port) in remote mode, the epoll loop over them, and the
    registry of attached clients (``clients``, by id)."""

    def __init__(
        self,
        name: str,
        listen: tuple[str, int] | None,
        policy: Policy,
        stats: Stats,
        rlog: RateLimitedLog,
    ):
        self.name = name
        self.listen = listen
        self.policy = policy
        self.stats = stats
        self.rlog = rlog
        self._warn = rlog.warning
        self.clients: dict[int, Client] = {}
        self.capacity = self.per_sender = 0  # set by bind()
        # epoll directly: at tens of thousands of MADs a second the selectors module's
        # bookkeeping shows up in the profile
        self._epoll = select.epoll()
        self._fds: dict[int, Client | None] = {}  # fd -> client (None: the control socket)
        self._ctl: socket.socket | None = None
        self._proc: list[procfs.ProcFile] = []  # the socket tables the sweep reads
        self._running = False
        self._next_sweep = 0.0
        self.buf = bytearray(_BUFFER)  # every client datagram is received here
        # Set by the server: a control record (raw, credentials or None, sender's
        # address); a datagram of n bytes from a client, in ``buf``; the same when its
        # handling raised; a client detached.
        self.on_control: Callable[[bytes, tuple | None, object], None] = _ignore
        self.on_mad: Callable[[Client, int], None] = _ignore
        self.on_mad_error: Callable[[Client, int], None] = _ignore
        # set with the native MAD core: receives, answers and sends what it can of a
        # client's waiting datagrams on a plain socket (:func:`.native.pump`)
        self.pump: Callable[[Client], None] | None = None
        # the loop's wait through the native core (:class:`.native.Loop`), which serves
        # the clients on plain sockets itself
        self.native_loop: Any = None
        # work for the loop when nothing is waiting, a step per call (False: all done)
        self.spare_time: Callable[[], bool] | None = None
        self.on_detach: Callable[[Client], None] = _ignore
        self.on_tick: list = []  # called every couple of seconds from the loop
        # called after every wake-up of the loop: seconds until it wants to be called again
        self.on_wake: Callable[[], float] = lambda: _SWEEP_INTERVAL
        self._extra: dict[int, Callable[[], None]] = {}  # other descriptors the loop serves

    def watch(self, fd: int, ready: Callable[[], None]) -> None:
        """Serve descriptor ``fd`` in the loop: ``ready()`` when it is readable."""
        self._extra[fd] = ready
        self._epoll.register(fd, select.EPOLLIN)

    def want(self, fd: int, readable: bool = True, writable: bool = False) -> None:
        """Call descriptor ``fd``'s ``ready()`` (see :meth:`watch`) when it is readable,
        writable, or either."""
        if fd in self._extra:
            mask = (select.EPOLLIN if readable else 0) | (select.EPOLLOUT if writable else 0)
            self._epoll.modify(fd, mask)

    def unwatch(self, fd: int) -> None:
        """Stop serving descriptor ``fd`` (one given to :meth:`watch`)."""
        if self._extra.pop(fd, None) is not None:
            self._epoll.unregister(fd)

    # --- sockets ----------------------------------------------------------------------

    @property
    def remote(self) -> bool:
        """Whether the server speaks UDP (``up --listen``)."""
        return self.listen is not None

    @property
    def key_name(self) -> str:
        """What a client's key is, for the log."""
        return "port" if self.remote else "pid"

    def _socket(self) -> socket.socket:
        fam = socket.AF_INET if self.remote else socket.AF_UNIX
        s = socket.socket(fam, socket.SOCK_DGRAM)
        s.setblocking(False)
        return s

    def _address(self, kind: str, port_offset: int = 0):
        if self.remote:
            assert self.listen is not None
            return (self.listen[0], self.listen[1] + port_offset)
        return simwire.sockname(self.name, kind)

    def bind(self) -> None:
        """Bind the control socket; OSError (address in use ...) goes to the caller."""
        self._ctl = self._socket()
        try:
            if not self.remote:  # the kernel tells us each sender's pid and uid
                self._ctl.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
            self._ctl.bind(self._address("ctl"))
            tables = ["/proc/net/udp", "/proc/net/udp6"] if self.remote else ["/proc/net/unix"]
            for path in tables:
                if path == tables[0] or os.path.exists(path):  # udp6: if IPv6 is there
                    self._proc.append(procfs.ProcFile(path))
        except OSError:
            self._ctl.close()
            self._ctl = None
            for f in self._proc:
                f.close()
            self._proc = []
            raise
        self._watch(self._ctl, None)
        self._plan_capacity()

    def _plan_capacity(self) -> None:
        """How many clients the server takes: the policy's limit, within the descriptors
        it may open (one per client, after raising the soft limit to the hard one, and
        keeping a reserve) and, in remote mode, the UDP ports above the control port
        (client i's data socket is port P+1+i)."""
        want = self.policy.max_clients
        if self.remote:
            assert self.listen is not None
            want = min(want, 65535 - self.listen[1])
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
            target = (
                hard
                if hard != resource.RLIM_INFINITY
                else max(soft, procfs.open_fds() + want + FD_RESERVE)
            )
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
                soft = target
            except (ValueError, OSError):
                pass
        if soft != resource.RLIM_INFINITY:
            want = min(want, soft - procfs.open_fds() - FD_RESERVE)
        self.capacity = max(1, want)
        self.per_sender = self.policy.per_sender(self.capacity, self.remote)

    def _watch(self, sock: socket.socket, cl: Client | None) -> None:
        self._fds[sock.fileno()] = cl
        self._epoll.register(sock.fileno(), select.EPOLLIN)
        if cl is not None and self.native_loop is not None and type(sock) is socket.socket:
            self.native_loop.watch(sock.fileno(), cl)

    def _unwatch(self, sock: socket.socket) -> None:
        fd = sock.fileno()
        if self._fds.pop(fd, 0) != 0:
            self._epoll.unregister(fd)
            if self.native_loop is not None:
                self.native_loop.unwatch(fd)

    def client_at(self, fd: int) -> Client | None:
        """The client whose data socket is descriptor ``fd``, if any."""
        cl = self._fds.get(fd)
        return cl if isinstance(cl, Client) else None

    def close(self) -> None:
        """Detach every client and close every socket."""
        for cl in list(self.clients.values()):
            self.detach(cl, "server stopping")
        if self._ctl is not None:
            self._unwatch(self._ctl)
            self._ctl.close()
            self._ctl = None
        for f in self._proc:
            f.close()
        self._proc = []
        self._epoll.close()
        self.rlog.flush(everything=True)

    # --- main loop --------------------------------------------------------------------

    def serve_forever(self, ready=None) -> None:
        """Run the loop until :meth:`stop` (binding first if need be); ``ready`` is
        called once it runs."""
        if self._ctl is None:
            self.bind()
        # The fabric's objects live as long as the server: keep the cyclic garbage
        # collector from walking them again and again while MADs allocate.
        gc.collect()
        gc.freeze()
        self._running = True
        if ready is not None:
            ready()
        poll, fds, receive, extra = self._epoll.poll, self._fds, self.receive, self._extra
        if self.native_loop is not None:
            poll = partial(self.native_loop.poll, self._epoll.fileno())
        wait = _SWEEP_INTERVAL
        while self._running:
            try:
                events = poll(wait if self.spare_time is None else 0.0)
            except InterruptedError:
                continue
            if not events and self.spare_time is not None:
                try:
                    if not self.spare_time():
                        self.spare_time = None
                except Exception:  # a bug there must cost that work, not the fabric
                    log.exception("work in the loop's spare time failed; left undone")
                    self.spare_time = None
            for fd, _ in events:
                cl = fds.get(fd, _NONE)
                if cl is None:
                    self.read_control()
                elif isinstance(cl, Client):
                    receive(cl)
                elif fd in extra:
                    extra[fd]()
            wait = min(_SWEEP_INTERVAL, max(0.0, self.on_wake()))
            now = time.monotonic()
            if now >= self._next_sweep:
                self.sweep()
                self.rlog.flush()
                for tick in self.on_tick:
                    tick()
                self._next_sweep = now + _SWEEP_INTERVAL

    def stop(self, *_args) -> None:
        """End the loop (a signal handler too)."""
        self._running = False

    def install_signal_handlers(self) -> None:
        """SIGTERM and SIGINT end the loop."""
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)

    # --- the control socket -----------------------------------------------------------

    def read_control(self) -> None:
        """Hand the control records waiting on the control socket to ``on_control``, a
        burst at a time, with the sender's credentials (local mode)."""
        assert self._ctl is not None
        recvmsg, handle = self._ctl.recvmsg, self.on_control
        for _ in range(_CTL_BURST):  # then the data sockets get their turn
            try:
                raw, anc, _flags, addr = recvmsg(_CTL_RECV, _ANC_SIZE)
            except BlockingIOError:
                return
            except OSError as e:
                self._warn("control socket errors", "control socket: %s", e)
                return
            creds = None
            for level, kind, data in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                    creds = _CRED.unpack_from(data)
                elif level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    close_passed_fds(data)  # nobody hands the server descriptors
            handle(raw, creds, addr)

    def reply(self, data: bytes, addr) -> None:
        """Answer a control record."""
        try:
            self._ctl.sendto(data, addr)  # type: ignore[union-attr]
        except OSError as e:
            self._warn(
                "control replies that failed",
                "control reply to %s failed: %s",
                show_address(addr),
                e,
            )

    # --- the registry ---------------------------------------------------------------------

    def open_data_socket(self, cid: int, host: str, key: int) -> socket.socket:
        """Client ``cid``'s data socket, connected to the client's (``key``: its pid, or
        in remote mode its UDP port on ``host``); OSError when it cannot be had."""
        sock = self._socket()
        try:
            sock.bind(self._address(f"out{cid}", cid + 1))
            if self.remote:
                sock.connect((host, key))
                last_datagram(sock)  # from now on the kernel stamps what arrives
            else:
                sock.connect(simwire.sockname(self.name, f"in{key}"))
        except OSError:
            sock.close()
            raise
        return sock

    def attach(self, cl: Client) -> None:
        """Register a client whose data socket is open."""
        self.clients[cl.id] = cl
        self._watch(cl.sock, cl)

    def detach(self, cl: Client, why: str) -> None:
        """Forget a client and close its data socket (once)."""
        if self.clients.get(cl.id) is not cl:
            return
        del self.clients[cl.id]
        self._unwatch(cl.sock)
        cl.sock.close()
        self.on_detach(cl)
        log.info("client %d detached (%s)", cl.id, why)

    def idle(self, cl: Client) -> float:
        """Seconds since a remote client last sent a datagram (or attached)."""
        return time.time() - max(cl.since, last_datagram(cl.sock))

    def udp_sockets(self) -> list[procfs.UdpSocket]:
        """Remote mode: the UDP sockets bound on this host now."""
        out = []
        for f in self._proc:
            out += procfs.udp_sockets(f.read(), v6=f.path.endswith("6"))
        return out

    def sweep(self) -> None:
        """Clients that are gone are detached: locally, those whose process or data
        socket is gone (the abstract socket namespace belongs to the network namespace,
        so the socket check works for clients in other PID namespaces too); in remote
        mode, those on this host whose data socket is gone.  The socket tables are read
        through descriptors kept open, so this works when descriptors run out."""
        if not self.clients:
            return
        try:
            if self.remote:
                live = {s.inode for s in self.udp_sockets()}
                for cl in list(self.clients.values()):
                    if cl.inode and cl.inode not in live:
                        self.detach(cl, "its data socket is gone")
                return
            for cl in list(self.clients.values()):  # (a TCP client's pid is not ours)
                if cl.pid and not cl.host and not pid_exists(cl.pid):
                    self.detach(cl, f"its process {cl.pid} is gone")
            bound = procfs.abstract_names(self._proc[0].read())
        except OSError as e:
            self._warn("socket table errors", "reading the socket table failed: %s", e)
            return
        for cl in list(self.clients.values()):
            if cl.agents is not None:
                continue  # the host library's: its connection closing says it is gone
            if not procfs.abstract_bound(simwire.sockname(self.name, f"in{cl.key}"), bound):
                self.detach(cl, f"its socket {self.name}:in{cl.key} is gone")

    # --- the data sockets -----------------------------------------------------------------

    def receive(self, cl: Client) -> None:
        """Hand ``cl``'s waiting datagrams to ``on_mad``.  A few per readiness event: an
        SM keeps several MADs in flight, and reading the next one straight away saves an
        epoll round; epoll is level-triggered, so whatever is left brings us back."""
        buf, sock, on_mad = self.buf, cl.sock, self.on_mad
        if self.pump is not None and type(sock) is socket.socket:
            return self.pump(cl)
        for _ in range(MADS_PER_WAKEUP):
            try:
                n = sock.recv_into(buf)
            except BlockingIOError:
                return
            except OSError as e:
                self.detach(cl, f"receive failed: {e}")
                return
            try:
                on_mad(cl, n)
            except Exception:  # a bug must cost one MAD, not the fabric
                self.on_mad_error(cl, n)
            if self.clients.get(cl.id) is not cl:
                return

    def send(self, cl: Client, data) -> bool:
        """Send a datagram to a client; whether it went (a client that is gone is
        detached)."""
        try:
            cl.sock.send(data)
            return True
        except BlockingIOError:
            self._warn(
                "MADs to clients not reading", "client %d is not reading; MAD dropped", cl.id
            )
        except OSError as e:
            if e.errno in (errno.ECONNREFUSED, errno.ENOTCONN, errno.ENOENT):
                self.detach(cl, "gone")
            else:
                self._warn("failed sends", "send to client %d failed: %s", cl.id, e)
        self.stats.unsent += 1
        return False
