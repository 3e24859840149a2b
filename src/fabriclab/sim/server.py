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

Malformed datagrams are dropped, counted and logged (a few per kind and interval, then
how many more there were).  Who may attach, and how many, is :mod:`.admission`'s; a
client that vanished is disconnected the first time a datagram to it fails, and by a
periodic sweep for clients whose process or socket is gone.
"""

from __future__ import annotations

import errno
import fcntl
import gc
import ipaddress
import logging
import os
import resource
import select
import signal
import socket
import struct
import time
from dataclasses import dataclass, field

from ..model.fabric import Fabric
from . import procfs
from ..ib import simwire
from .admission import Addresses, Policy
from ..ib.caps import CAP_IS_CAP_MASK_NOTICE, CAP_IS_NOTICE, CAP_IS_SM, CAP_IS_TRAP
from ..ib.ids import PERMISSIVE_LID
from ..ib.simwire import SIM_STATUS_TIMEOUT
from ..ib.mad.consts import (
    Attr,
    Method,
    MgmtClass,
    STATUS_METHOD_ATTR_UNSUPPORTED,
    TRAP_CAPABILITY_MASK_CHANGE,
    TRAP_LINK_STATE_CHANGE,
)
from ..ib.enums import NodeType, PhysState, PortState
from ..ib.mad.layouts import (
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
from .ratelog import RateLimitedLog
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
# Byte positions in a sim_request (see simwire.REQUEST): the addresses, the status, the MAD.
_ADDR = struct.Struct(">H2xH2xII")  # dlid, slid, dqp, sqp
_LID = struct.Struct(">H")
_STATUS = struct.Struct(">I")
_STATUS16 = struct.Struct(">H")
_TID_HI = struct.Struct(">H")
_REQ = simwire.REQUEST_SIZE
_MAD = simwire.REQUEST_SIZE - simwire.MAD_SIZE
_SMP_DATA, _GMP_DATA = _MAD + SMP_DATA, _MAD + GMP_DATA
_SMP_END = _SMP_DATA + SMP_DATA_SIZE
_GET_RESPONSE = int(Method.GET_RESPONSE)
_IPATH, _RPATH = _MAD + DR_INITIAL_PATH, _MAD + DR_RETURN_PATH
_SWEEP_INTERVAL = 2.0
_RECLAIM_INTERVAL = 1.0
_REFUSAL_MEMORY = 1.0
_REFUSALS_KEPT = 4096
_CTL_BURST = 64  # control records read per wake-up, so a flood cannot starve the MADs
_CTL_RECV = 4096  # more than a record: a longer datagram is seen as too long, not cut
_CRED = struct.Struct("iII")  # struct ucred { pid_t pid; uid_t uid; gid_t gid; } (unix(7))
_ANC_SIZE = socket.CMSG_SPACE(_CRED.size)  # room for the credentials and no descriptors
_FD_RESERVE = 64  # descriptors kept free of clients (logging, /proc, OpenSM's pipes)
_SIOCGSTAMP = 0x8906  # linux/sockios.h: the time the last datagram read arrived
_TIMEVAL = struct.Struct("@ll")  # struct timeval


def _show(addr) -> str:
    if isinstance(addr, bytes):
        return addr.strip(b"\0").decode(errors="replace") or "(unbound)"
    if isinstance(addr, tuple):
        return f"{addr[0]}:{addr[1]}"
    return repr(addr)


def _show_sender(sender: tuple) -> str:
    return f"{sender[0]} {sender[1]}"


def _close_passed_fds(data: bytes) -> None:
    n = len(data) - len(data) % 4
    for fd in struct.unpack(f"{n // 4}i", data[:n]):
        try:
            os.close(fd)
        except OSError:
            pass


def _last_datagram(sock: socket.socket) -> float:
    """When the last datagram read from ``sock`` arrived (the first call turns the
    kernel's timestamps on; 0.0: none yet)."""
    try:
        sec, usec = _TIMEVAL.unpack(fcntl.ioctl(sock.fileno(), _SIOCGSTAMP, bytes(_TIMEVAL.size)))
    except OSError:
        return 0.0
    return sec + usec / 1e6


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


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
    addr: object = None  # its control socket's address: its requests come from there
    host: str = ""  # remote mode: the client's IP address
    sender: tuple = ()  # ("uid", uid) or, another host, ("host", ip): whose quota it uses
    pid: int = 0  # local mode: its process, as the kernel named it to us
    inode: int = 0  # remote mode, a client on this host: its data socket's inode
    since: float = field(default_factory=time.time)


@dataclass
class Stats:
    mads: int = 0
    answered: int = 0
    forwarded: int = 0
    dropped: int = 0
    malformed: int = 0
    traps: int = 0
    refused: int = 0  # control requests refused (who sent them, or a limit)
    outsiders: int = 0  # remote mode: datagrams from outside the allowed networks
    failed: int = 0  # control requests whose handling failed (answered with an error)
    started: float = field(default_factory=time.monotonic)


class Refused(Exception):
    """A control request the server answers with an error (the reason is logged, unless
    ``quiet``: said once already)."""

    def __init__(self, why: str, quiet: bool = False):
        super().__init__(why)
        self.quiet = quiet


class FabricServer:
    """Serve ``fabric`` under ``name`` (abstract sockets), or on UDP ``listen`` =
    (host, port) in remote mode.  ``resolve`` maps a client's SIM_HOST to a model port
    (returning (port, problem)); ``default_port`` is where a client without one goes;
    ``policy`` says who may attach and how many (:mod:`.admission`)."""

    def __init__(self, fabric: Fabric, name: str = simwire.DEFAULT_NAME, *,
                 listen: tuple[str, int] | None = None, resolve=None, default_port=None,
                 policy: Policy | None = None):
        self.name = name
        self.listen = listen
        self.policy = policy or Policy()
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
        self.rlog = RateLimitedLog(log)
        self._warn = self.rlog.warning
        self.addresses = Addresses(self.policy.networks)
        self.capacity = self.per_sender = 0  # set by bind()
        # epoll directly: at tens of thousands of MADs a second the selectors module's
        # bookkeeping shows up in the profile
        self._epoll = select.epoll()
        self._fds: dict[int, Client | None] = {}  # fd -> client (None: the control socket)
        self._ctl: socket.socket | None = None
        self._proc: list[procfs.ProcFile] = []  # the socket tables the sweep reads
        self._running = False
        self._next_sweep = 0.0
        self._next_reclaim = 0.0
        self._at_limit: set = set()  # the limits reached (and said so) since a client left
        self._refusals: dict = {}  # remote mode: control address -> refused until
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
        return simwire.sockname(self.name, kind)

    def bind(self) -> None:
        """Bind the control socket; OSError (address in use ...) goes to the caller."""
        self._ctl = self._socket()
        try:
            if not self.remote:  # the kernel tells us each sender's pid and uid
                self._ctl.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
            self._ctl.bind(self._addr("ctl"))
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
            target = hard if hard != resource.RLIM_INFINITY else \
                max(soft, procfs.open_fds() + want + _FD_RESERVE)
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
                soft = target
            except (ValueError, OSError):
                pass
        if soft != resource.RLIM_INFINITY:
            want = min(want, soft - procfs.open_fds() - _FD_RESERVE)
        self.capacity = max(1, want)
        self.per_sender = self.policy.per_sender(self.capacity, self.remote)

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
        for f in self._proc:
            f.close()
        self._proc = []
        self._epoll.close()
        self.rlog.flush(everything=True)

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
                self.rlog.flush()
                for tick in self.on_tick:
                    tick()
                self._next_sweep = now + _SWEEP_INTERVAL

    def stop(self, *_args) -> None:
        self._running = False

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)

    # --- control channel --------------------------------------------------------------
    #
    # Every well-formed control record from an address that can be answered gets one
    # answer: libumad2sim waits for it with a blocking read (sim_ctl() in
    # umad2sim/sim_client.c), so an unanswered request hangs the tool for good.  A
    # request that is refused, or whose handling fails, is answered SIM_CTL_ERROR, on
    # which the tool gives up cleanly.  Malformed records are not answered (nothing
    # there is waiting for them, and in remote mode an answer to a forged sender would
    # be a reflection).

    def _on_ctl(self) -> None:
        assert self._ctl is not None
        recvmsg = self._ctl.recvmsg
        for _ in range(_CTL_BURST):  # then the data sockets get their turn
            try:
                raw, anc, _flags, addr = recvmsg(_CTL_RECV, _ANC_SIZE)
            except BlockingIOError:
                return
            except OSError as e:
                self._warn("control socket errors", "control socket: %s", e)
                return
            self._control(raw, anc, addr)

    def _control(self, raw: bytes, anc: list, addr) -> None:
        """One control datagram.  Never raises: one bad record must not stop the server
        (or the OpenSM attached to it)."""
        creds = None
        for level, kind, data in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                creds = _CRED.unpack_from(data)
            elif level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                _close_passed_fds(data)  # nobody hands the server descriptors
        if self.remote:
            if not self.addresses.allowed(addr[0]):
                self.stats.outsiders += 1
                self._warn("datagrams from outside the allowed networks",
                           "control datagram from %s:%d dropped: not in the allowed networks "
                           "(up --allow)", addr[0], addr[1])
                return
        elif not addr:
            self.stats.malformed += 1
            self._warn("control records from unbound sockets",
                       "control record from an unbound socket dropped (no address to answer)")
            return
        try:
            ctl = simwire.Ctl.decode(raw)
        except ValueError as e:
            self.stats.malformed += 1
            self._warn("malformed control records", "control record from %s dropped: %s",
                       _show(addr), e)
            return
        try:
            reply = self._handle_ctl(ctl, addr, creds)
        except Refused as e:
            self.stats.refused += 1
            if not e.quiet:
                self._warn("refused control requests", "%s from %s refused: %s",
                           simwire.CTL_NAMES.get(ctl.type, f"control type {ctl.type}"), _show(addr), e)
            if self.remote and ctl.type == simwire.CTL_CONNECT:
                self._remember_refusal(addr)
            reply = ctl.error()
        except Exception as e:  # a bug: answered with an error, and the server goes on
            self.stats.failed += 1
            self._warn("failed control requests", "%s for client %d failed (answered with "
                       "an error): %s: %s", simwire.CTL_NAMES.get(ctl.type, ctl.type), ctl.clientid,
                       type(e).__name__, e, exc_info=True)
            reply = ctl.error()
        try:
            self._ctl.sendto(reply.encode(), addr)  # type: ignore[union-attr]
        except OSError as e:
            self._warn("control replies that failed", "control reply to %s failed: %s",
                       _show(addr), e)

    def _handle_ctl(self, ctl: simwire.Ctl, addr, creds) -> simwire.Ctl:
        if ctl.type == simwire.CTL_CONNECT:
            return self._connect(ctl, addr, creds)
        cl = self.clients.get(ctl.clientid)
        if cl is None:
            if ctl.type == simwire.CTL_DISCONNECT:
                return ctl
            raise Refused(f"no client {ctl.clientid}")
        if addr != cl.addr:  # another process must not detach it, or speak for it
            raise Refused(f"client {cl.id} attached from {_show(cl.addr)}")
        port = cl.port
        node = port.node
        t = ctl.type
        if t == simwire.CTL_DISCONNECT:
            self._drop_client(cl, "disconnected")
            return ctl
        if t == simwire.CTL_GET_VENDOR:
            m = node.fabric_node
            data = simwire.VENDOR.pack(m.vendid, m.devid, m.revision, 1)
        elif t == simwire.CTL_GET_NODEINFO:
            data = node.node_info(port.num)
        elif t == simwire.CTL_GET_PORTINFO:
            num = ctl.data[0]
            p = (node.port(num) if num and num <= node.fabric_node.nports else None) or port
            # LocalPortNum names the port the client sits on (umad2sim's sysfs port dir)
            data = PORT_INFO.pack({"LocalPort": 0 if node.is_switch else p.num},
                                  base=p.port_info())
        elif t == simwire.CTL_GET_PKEYS:
            data = bytes(port.pkeys[:simwire.CTL_DATA])
        elif t == simwire.CTL_SET_ISSM:
            self._set_issm(cl, int.from_bytes(ctl.data[:4], "little") != 0)
            data = ctl.data
        elif t == simwire.CTL_GET_PORT:
            data = simwire.SIM_PORT.pack(port.lid, port.state)
        elif t == simwire.CTL_GET_GID:
            # ibsim copies the GUID in host byte order here; the field is unused by umad2sim
            data = port.port_info()[8:16] + node.fabric_node.guid.to_bytes(8, "little")
        elif t == simwire.CTL_GET_GUID:
            data = node.fabric_node.guid.to_bytes(8, "little")
        else:
            raise Refused(f"unknown control type {t}")
        return simwire.Ctl(ctl.clientid, t, ctl.length, data)

    def _remember_refusal(self, addr) -> None:
        now = time.monotonic()
        if len(self._refusals) >= _REFUSALS_KEPT:
            self._refusals = {a: t for a, t in self._refusals.items() if t > now}
            if len(self._refusals) >= _REFUSALS_KEPT:
                self._refusals.clear()
        self._refusals[addr] = now + _REFUSAL_MEMORY

    def _connect(self, ctl: simwire.Ctl, addr, creds) -> simwire.Ctl:
        key, qp, issm, raw_nodeid = simwire.CLIENT_INFO.unpack(ctl.data[:simwire.CLIENT_INFO.size])
        nodeid = simwire.cstring(raw_nodeid)
        # A refused tool gives up (libumad2sim panics), so a control address that keeps
        # asking is a flood: it is not looked at again for a moment (a look at a sender
        # on this host reads the kernel's UDP table, about half a millisecond).
        if self._refusals and self._refusals.get(addr, 0.0) > time.monotonic():
            raise Refused("refused a moment ago", quiet=True)
        sender, pid, inode = self._identify(key, addr, creds)
        port, problem = self._attach_port(nodeid)
        if port is None:
            raise Refused(problem)
        host = addr[0] if self.remote else ""
        # The same control socket attaching again is the same client starting over.  A
        # client holding the id this one claims (its pid, its data port) makes way only
        # when it is gone: locally that is certain, since the sender holds the control
        # socket <name>:ctl<pid>, which a live client would still hold.
        replaced = [c for c in self.clients.values() if c.addr == addr]
        for c in self.clients.values():
            if c.key == key and c.host == host and c not in replaced:
                if not self._gone(c, inode):
                    raise Refused(f"client {c.id} with the same {self._key_name} {key} is "
                                  "still there")
                replaced.append(c)
        if issm and any(c.issm and c.port is port for c in self.clients.values()
                        if c not in replaced):
            raise Refused(f"an SM is already attached at {port.ref()}")
        self._check_limits(sender, replaced)
        for old in replaced:
            self._drop_client(old, "replaced by a new client with the same id")
        cid = next(i for i in range(self.capacity) if i not in self.clients)
        try:
            sock = self._socket()
        except OSError as e:  # out of descriptors
            raise Refused(f"cannot open its data socket: {e.strerror}") from None
        try:
            sock.bind(self._addr(f"out{cid}", cid + 1))
            if self.remote:
                sock.connect((host, key))
                _last_datagram(sock)  # from now on the kernel stamps what arrives
            else:
                sock.connect(simwire.sockname(self.name, f"in{key}"))
        except OSError as e:
            sock.close()
            raise Refused(f"cannot open its data socket: {e.strerror}") from None
        cl = Client(cid, key, port, qp, bool(issm), nodeid, sock, addr, host, sender, pid, inode)
        self.clients[cid] = cl
        self._watch(sock, cl)
        if cl.issm:
            self._set_issm(cl, True)
        log.info("client %d (%s %d) attached at %s", cid, self._key_name, key, port.ref())
        reply_id = nodeid if nodeid else port.node.fabric_node.label
        data = simwire.CLIENT_INFO.pack(cid, qp, issm, reply_id.encode()[:31])
        return simwire.Ctl(ctl.clientid, simwire.CTL_CONNECT, ctl.length, data)

    @property
    def _key_name(self) -> str:
        return "port" if self.remote else "pid"

    def _identify(self, key: int, addr, creds) -> tuple[tuple, int, int]:
        """Who is attaching: (its quota's sender, its pid, its data socket's inode), or
        Refused.  Locally the kernel's credentials say who sent the record; in remote
        mode a sender on this host is known by the sockets it holds (/proc/net/udp), one
        elsewhere only by its address."""
        uids = self.policy.uids
        if not self.remote:
            if addr != simwire.sockname(self.name, f"ctl{key}"):
                raise Refused(f"its control socket is not {self.name}:ctl{key}")
            if creds is None:
                raise Refused("the kernel gave no credentials")
            pid, uid, _gid = creds
            if uid not in uids:
                raise Refused(f"uid {uid} may not attach (up --allow-user)")
            # the pid it names is its own, or (in a container) its own in its namespace
            if pid != key and procfs.nspids(pid)[-1:] != [key]:
                raise Refused(f"it claims pid {key} but is pid {pid}")
            return ("uid", uid), pid, 0
        host, sport = addr
        if not 0 < key < 65536:
            raise Refused(f"no UDP port {key}")
        try:
            if not self.addresses.local(host):
                return ("host", host), 0, 0
            socks = self._udp_sockets()
        except OSError as e:  # out of descriptors: nothing can be decided
            raise Refused(f"cannot look at its sockets: {e.strerror}") from None
        ip = ipaddress.IPv4Address(host)
        ctl_sock = next((s for s in socks if s.port == sport and s.covers(ip)), None)
        data_sock = next((s for s in socks if s.port == key and s.covers(ip)), None)
        if ctl_sock is None:
            raise Refused("its control socket is not bound on this host")
        if ctl_sock.uid not in uids:
            raise Refused(f"uid {ctl_sock.uid} may not attach (up --allow-user)")
        if data_sock is None or data_sock.uid != ctl_sock.uid:
            raise Refused(f"it holds no UDP port {key}")
        return ("uid", ctl_sock.uid), 0, data_sock.inode

    def _udp_sockets(self) -> list[procfs.UdpSocket]:
        out = []
        for f in self._proc:
            out += procfs.udp_sockets(f.read(), v6=f.path.endswith("6"))
        return out

    def _gone(self, cl: Client, inode: int) -> bool:
        """Whether ``cl``, whose id a new client claims, has vanished."""
        if not self.remote:
            return True  # see _connect
        if cl.inode:  # on this host: the port is held by another socket than before
            return cl.inode != inode
        return self._idle(cl) > self.policy.idle_after

    def _idle(self, cl: Client) -> float:
        """Seconds since a remote client last sent a datagram (or attached)."""
        return time.time() - max(cl.since, _last_datagram(cl.sock))

    def _check_limits(self, sender: tuple, leaving: list[Client]) -> None:
        def counts() -> tuple[int, int]:
            staying = [c for c in self.clients.values() if c not in leaving]
            return len(staying), sum(1 for c in staying if c.sender == sender)

        total, mine = counts()
        if total < self.capacity and mine < self.per_sender:
            return
        self._reclaim(sender if mine >= self.per_sender else None)
        total, mine = counts()
        # said once, until a client leaves: the refusals themselves are counted
        if total >= self.capacity:
            quiet = "all" in self._at_limit
            self._at_limit.add("all")
            raise Refused(f"the server holds its limit of {self.capacity} clients; more are "
                          "refused until one leaves", quiet)
        if mine >= self.per_sender:
            quiet = sender in self._at_limit
            self._at_limit.add(sender)
            raise Refused(f"{_show_sender(sender)} holds its limit of {self.per_sender} "
                          "clients; more are refused until one leaves", quiet)

    def _reclaim(self, sender: tuple | None) -> None:
        """Make room: drop clients that are gone and, in remote mode, the longest silent
        client of another host (``sender``'s own, when it is that sender's limit) that
        has been silent for long.  At most once a second: a flood of refused requests
        must not make the server read the socket tables for each."""
        now = time.monotonic()
        if now < self._next_reclaim:
            return
        self._next_reclaim = now + _RECLAIM_INTERVAL
        self._sweep()
        if not self.remote:
            return
        idle = [(self._idle(c), c) for c in self.clients.values()
                if c.sender[0] == "host" and not c.issm and (sender is None or c.sender == sender)]
        if idle:
            secs, cl = max(idle, key=lambda x: x[0])
            if secs > self.policy.idle_after:
                self._drop_client(cl, f"silent for {secs:.0f} s, and its place is needed")

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
        self._at_limit.clear()
        self._unwatch(cl.sock)
        cl.sock.close()
        if cl.issm:
            self._set_issm(cl, False)
        log.info("client %d detached (%s)", cl.id, why)

    def _sweep(self) -> None:
        """Clients that are gone are disconnected: locally, those whose process or data
        socket is gone (the abstract socket namespace belongs to the network namespace,
        so the socket check works for clients in other PID namespaces too); in remote
        mode, those on this host whose data socket is gone.  The socket tables are read
        through descriptors kept open, so this works when descriptors run out."""
        if not self.clients:
            return
        try:
            if self.remote:
                live = {s.inode for s in self._udp_sockets()}
                for cl in list(self.clients.values()):
                    if cl.inode and cl.inode not in live:
                        self._drop_client(cl, "its data socket is gone")
                return
            for cl in list(self.clients.values()):
                if cl.pid and not _exists(cl.pid):
                    self._drop_client(cl, f"its process {cl.pid} is gone")
            bound = procfs.unix_names(self._proc[0].read())
        except OSError as e:
            self._warn("socket table errors", "reading the socket table failed: %s", e)
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
                self._warn("failed MADs", "client %d: MAD processing failed", cl.id, exc_info=True)
                if n == _REQ:  # and the tool sees a timeout rather than waiting forever
                    self._timeout(cl, buf, view)
            if self.clients.get(cl.id) is not cl:
                return

    def _send(self, cl: Client, pkt) -> bool:
        try:
            cl.sock.send(pkt)
            return True
        except BlockingIOError:
            self._warn("MADs to clients not reading", "client %d is not reading; MAD dropped", cl.id)
        except OSError as e:
            if e.errno in (errno.ECONNREFUSED, errno.ENOTCONN, errno.ENOENT):
                self._drop_client(cl, "gone")
            else:
                self._warn("failed sends", "send to client %d failed: %s", cl.id, e)
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
            self._warn("malformed datagrams", "client %d: datagram of %d bytes dropped (want %d)",
                       cl.id, n, _REQ)
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
            self._warn("malformed datagrams", "client %d: MAD base version %d dropped", cl.id, base)
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
                self._warn("malformed datagrams",
                           "client %d: malformed directed-route SMP (D=%d hop %d/%d) dropped",
                           cl.id, d, hop_ptr, hops)
                return
            if dr_slid != PERMISSIVE_LID or dr_dlid != PERMISSIVE_LID:
                self._warn("unsupported MADs", "client %d: directed route with a LID-routed part is "
                           "not supported", cl.id)
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
                  "NoticeProducerType": NodeType.SWITCH if node.is_switch else NodeType.CA}
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
        self._send(sm, simwire.REQUEST.pack(src.smlid, src.lid, 0, 0, 0, simwire.MAD_SIZE, mad))

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
        if p.fabric_port.peer is not None:
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
