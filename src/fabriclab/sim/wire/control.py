"""The fabric server's control channel: what each ibsim control record asks (connect,
disconnect, a node's NodeInfo, PortInfo, P_Keys, GUID, set IsSM) and its answer.

Every well-formed control record from an address that can be answered gets one answer:
libumad2sim waits for it with a blocking read (sim_ctl() in umad2sim/sim_client.c), so
an unanswered request hangs the tool for good.  A request that is refused, or whose
handling fails, is answered SIM_CTL_ERROR, on which the tool gives up cleanly.
Malformed records are not answered (nothing there is waiting for them, and in remote
mode an answer to a forged sender would be a reflection).  Who may attach, and how
many, is :mod:`.admission`'s policy, applied here at connect.
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import time
from collections.abc import Callable

from ...ib import simwire
from ...ib.mad.layouts import PORT_INFO
from ..fabric.state import SimFabric, SimPort
from . import procfs
from .admission import Addresses
from .client import Client
from .sockfacts import show_address
from .stats import Stats
from .transport import Transport

log = logging.getLogger("fabriclab.sim")

_RECLAIM_INTERVAL = 1.0
_REFUSAL_MEMORY = 1.0
_REFUSALS_KEPT = 4096


class Refused(Exception):
    """A control request the server answers with an error (the reason is logged, unless
    ``quiet``: said once already)."""

    def __init__(self, why: str, quiet: bool = False):
        super().__init__(why)
        self.quiet = quiet


def _show_sender(sender: tuple) -> str:
    return f"{sender[0]} {sender[1]}"


class Control:
    """Answers the control records ``transport`` receives.  ``resolve`` maps a client's
    SIM_HOST to a model port (returning (port, problem)); ``default_port`` is where a
    client without one goes; ``set_issm(client, on)`` makes a client the subnet manager
    at its port, or no longer."""

    def __init__(
        self,
        transport: Transport,
        sim: SimFabric,
        stats: Stats,
        *,
        resolve=None,
        default_port=None,
        set_issm: Callable[[Client, bool], None],
    ):
        self.transport = transport
        self.sim = sim
        self.stats = stats
        self.policy = transport.policy
        self.resolve = resolve
        self.default_port = default_port
        self.set_issm = set_issm
        self.addresses = Addresses(self.policy.networks)
        self._warn = transport.rlog.warning
        self._at_limit: set = set()  # the limits reached (and said so) since a client left
        self._refusals: dict = {}  # remote mode: control address -> refused until
        self._next_reclaim = 0.0

    def handle(self, raw: bytes, creds: tuple | None, addr) -> None:
        """One control datagram (with the sender's credentials, in local mode).  Never
        raises: one bad record must not stop the server (or the OpenSM attached to it)."""
        remote = self.transport.remote
        if remote:
            if not self.addresses.allowed(addr[0]):
                self.stats.outsiders += 1
                self._warn(
                    "datagrams from outside the allowed networks",
                    "control datagram from %s:%d dropped: not in the allowed networks (up --allow)",
                    addr[0],
                    addr[1],
                )
                return
        elif not addr:
            self.stats.malformed += 1
            self._warn(
                "control records from unbound sockets",
                "control record from an unbound socket dropped (no address to answer)",
            )
            return
        try:
            ctl = simwire.Ctl.decode(raw)
        except ValueError as e:
            self.stats.malformed += 1
            self._warn(
                "malformed control records",
                "control record from %s dropped: %s",
                show_address(addr),
                e,
            )
            return
        try:
            reply = self._answer(ctl, addr, creds)
        except Refused as e:
            self.stats.refused += 1
            if not e.quiet:
                self._warn(
                    "refused control requests",
                    "%s from %s refused: %s",
                    simwire.CTL_NAMES.get(ctl.type, f"control type {ctl.type}"),
                    show_address(addr),
                    e,
                )
            if remote and ctl.type == simwire.CTL_CONNECT:
                self._remember_refusal(addr)
            reply = ctl.error()
        except Exception as e:  # a bug: answered with an error, and the server goes on
            self.stats.failed += 1
            self._warn(
                "failed control requests",
                "%s for client %d failed (answered with an error): %s: %s",
                simwire.CTL_NAMES.get(ctl.type, ctl.type),
                ctl.clientid,
                type(e).__name__,
                e,
                exc_info=True,
            )
            reply = ctl.error()
        self.transport.reply(reply.encode(), addr)

    def client_left(self) -> None:
        """A client detached: the limits may be said again when reached."""
        self._at_limit.clear()

    def _answer(self, ctl: simwire.Ctl, addr, creds) -> simwire.Ctl:
        if ctl.type == simwire.CTL_CONNECT:
            return self._connect(ctl, addr, creds)
        cl = self.transport.clients.get(ctl.clientid)
        if cl is None:
            if ctl.type == simwire.CTL_DISCONNECT:
                return ctl
            raise Refused(f"no client {ctl.clientid}")
        if addr != cl.addr:  # another process must not detach it, or speak for it
            raise Refused(f"client {cl.id} attached from {show_address(cl.addr)}")
        port = cl.port
        node = port.node
        t = ctl.type
        if t == simwire.CTL_DISCONNECT:
            self.transport.detach(cl, "disconnected")
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
            data = PORT_INFO.pack({"LocalPort": 0 if node.is_switch else p.num}, base=p.port_info())
        elif t == simwire.CTL_GET_PKEYS:
            data = bytes(port.pkeys[: simwire.CTL_DATA])
        elif t == simwire.CTL_SET_ISSM:
            self.set_issm(cl, int.from_bytes(ctl.data[:4], "little") != 0)
            data = ctl.data
        elif t == simwire.CTL_GET_PORT:
            data = simwire.SIM_PORT.pack(port.lid, port.state)
        elif t == simwire.CTL_GET_GID:
            # the GID prefix as PortInfo carries it (network order), then the node GUID
            # in host byte order, as ibsim copies it (the field is unused by umad2sim)
            prefix = PORT_INFO.get(port.port_info(), "GidPrefix")
            data = prefix.to_bytes(8, "big") + simwire.host_guid(node.fabric_node.guid)
        elif t == simwire.CTL_GET_GUID:
            data = simwire.host_guid(node.fabric_node.guid)
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
        transport = self.transport
        clients = transport.clients
        key, qp, issm, raw_nodeid = simwire.CLIENT_INFO.unpack(ctl.data[: simwire.CLIENT_INFO.size])
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
        host = addr[0] if transport.remote else ""
        # The same control socket attaching again is the same client starting over.  A
        # client holding the id this one claims (its pid, its data port) makes way only
        # when it is gone: locally that is certain, since the sender holds the control
        # socket <name>:ctl<pid>, which a live client would still hold.
        replaced = [c for c in clients.values() if c.addr == addr]
        for c in clients.values():
            if c.key == key and c.host == host and c not in replaced:
                if not self._gone(c, inode):
                    raise Refused(
                        f"client {c.id} with the same {transport.key_name} {key} is still there"
                    )
                replaced.append(c)
        if issm and any(c.issm and c.port is port for c in clients.values() if c not in replaced):
            raise Refused(f"an SM is already attached at {port.ref()}")
        self._check_limits(sender, replaced)
        for old in replaced:
            transport.detach(old, "replaced by a new client with the same id")
        cid, sock = self._data_socket(host, key)
        cl = Client(cid, key, port, qp, bool(issm), nodeid, sock, addr, host, sender, pid, inode)
        transport.attach(cl)
        if cl.issm:
            self.set_issm(cl, True)
        log.info("client %d (%s %d) attached at %s", cid, transport.key_name, key, port.ref())
        reply_id = nodeid if nodeid else port.node.fabric_node.label
        data = simwire.CLIENT_INFO.pack(cid, qp, issm, reply_id.encode()[:31])
        return simwire.Ctl(ctl.clientid, simwire.CTL_CONNECT, ctl.length, data)

    def _data_socket(self, host: str, key: int):
        """The first free client id whose data socket can be had, and that socket.  An
        id whose abstract name ``<name>:out<id>`` another process took first is passed
        over (any local user can bind one), so a squatted name costs an id, not every
        attach."""
        transport = self.transport
        for cid in range(transport.capacity):
            if cid in transport.clients:
                continue
            try:
                return cid, transport.open_data_socket(cid, host, key)
            except OSError as e:  # out of descriptors, or the client's socket is not there
                if e.errno == errno.EADDRINUSE and not transport.remote:
                    transport.rlog.warning(
                        "data socket names taken",
                        "%s:out%d is held by another process: client id %d passed over",
                        transport.name,
                        cid,
                        cid,
                    )
                    continue
                raise Refused(f"cannot open its data socket: {e.strerror}") from None
        raise Refused("every data socket name the server may use is taken")

    def _identify(self, key: int, addr, creds) -> tuple[tuple, int, int]:
        """Who is attaching: (its quota's sender, its pid, its data socket's inode), or
        Refused.  Locally the kernel's credentials say who sent the record; in remote
        mode a sender on this host is known by the sockets it holds (/proc/net/udp), one
        elsewhere only by its address."""
        uids = self.policy.uids
        name = self.transport.name
        if not self.transport.remote:
            if addr != simwire.sockname(name, f"ctl{key}"):
                raise Refused(f"its control socket is not {name}:ctl{key}")
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
            socks = self.transport.udp_sockets()
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

    def _gone(self, cl: Client, inode: int) -> bool:
        """Whether ``cl``, whose id a new client claims, has vanished."""
        if not self.transport.remote:
            return True  # see _connect
        if cl.inode:  # on this host: the port is held by another socket than before
            return cl.inode != inode
        return self.transport.idle(cl) > self.policy.idle_after

    def _check_limits(self, sender: tuple, leaving: list[Client]) -> None:
        transport = self.transport

        def counts() -> tuple[int, int]:
            staying = [c for c in transport.clients.values() if c not in leaving]
            return len(staying), sum(1 for c in staying if c.sender == sender)

        total, mine = counts()
        if total < transport.capacity and mine < transport.per_sender:
            return
        self._reclaim(sender if mine >= transport.per_sender else None)
        total, mine = counts()
        # said once, until a client leaves: the refusals themselves are counted
        if total >= transport.capacity:
            quiet = "all" in self._at_limit
            self._at_limit.add("all")
            raise Refused(
                f"the server holds its limit of {transport.capacity} clients; more "
                "are refused until one leaves",
                quiet,
            )
        if mine >= transport.per_sender:
            quiet = sender in self._at_limit
            self._at_limit.add(sender)
            raise Refused(
                f"{_show_sender(sender)} holds its limit of {transport.per_sender} "
                "clients; more are refused until one leaves",
                quiet,
            )

    def _reclaim(self, sender: tuple | None) -> None:
        """Make room: detach clients that are gone and, in remote mode, the longest silent
        client of another host (``sender``'s own, when it is that sender's limit) that
        has been silent for long.  At most once a second: a flood of refused requests
        must not make the server read the socket tables for each."""
        now = time.monotonic()
        if now < self._next_reclaim:
            return
        self._next_reclaim = now + _RECLAIM_INTERVAL
        transport = self.transport
        transport.sweep()
        if not transport.remote:
            return
        idle = [
            (transport.idle(c), c)
            for c in transport.clients.values()
            if c.sender[0] == "host" and not c.issm and (sender is None or c.sender == sender)
        ]
        if idle:
            secs, cl = max(idle, key=lambda x: x[0])
            if secs > self.policy.idle_after:
                transport.detach(cl, f"silent for {secs:.0f} s, and its place is needed")

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
