"""The fabric server's end of fabriclab's host protocol (:mod:`fabriclab.ib.hostwire`):
tools on a tray, through the host library, see the tray's HCAs as a host does.

A listening SOCK_SEQPACKET socket, the file ``<name>.host`` in the 0700 state directory
(:func:`host_socket`: not an abstract name, which anyone could bind first), takes one
connection per open umad or issm file of a tool, and short ones for its registrations
and for the tray's /sys tree.
An open umad file becomes a :class:`~.transport.Client` at its HCA port whose socket
(:class:`.umadsock.UmadSocket`) turns the kernel's ``ib_user_mad`` frames into the server's
sim_request and back, so the MAD path (:mod:`.dispatch`) is the one every client takes.
What a kernel does that ibsim's protocol never carried is done here: requests go to the
agents registered for them (:mod:`.agents`); a message longer than a MAD (an RMPP table)
is delivered whole; a request whose answer does not come within its timeout comes back
as the kernel's 88-byte ETIMEDOUT read.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import shutil
import socket
import time
from pathlib import Path

from ...errors import FabriclabError
from ...ib import hostwire, simwire, umad
from ...model.cluster import Cluster
from ...statedir import bind_socket
from ..fabric.state import SimFabric, SimPort
from ..host import hostview, sysfs
from . import procfs
from .agents import Agent, in_use, sm_holds
from .client import Client
from .hostgate import Peer, Pending, accepted, peer_of, privileged
from .transport import Transport
from .umadsock import MadLayer, UmadSocket

log = logging.getLogger("fabriclab.sim")

_TREE_LIVE = 30.0  # seconds a tray's tree is kept fresh after it was last asked for


def tree_live() -> float:
    """Seconds a tray's tree is kept fresh after an ask: ``FABRICLAB_TREE_LIVE`` (a
    shorter time lets a test see a tree go stale), else 30.  The host library asks again
    after half of it (the TREE REPLY's ``value`` says it, in ms), so a process reading
    its tree now and then never reads a frozen one."""
    try:
        v = float(os.environ.get("FABRICLAB_TREE_LIVE", _TREE_LIVE))
    except ValueError:
        return _TREE_LIVE
    return v if 0.1 <= v <= 3600 else _TREE_LIVE


_SNDBUF = 1 << 20  # each umad connection's send buffer: an SM keeps many MADs in flight


class HostLink:
    """The host protocol's listening socket and connections, for the server ``srv``'s
    ``transport`` and ``sim`` of ``cluster``, with the trays' /sys trees under
    ``trees``; ``set_issm(client, on)`` marks a port's subnet manager.  The socket is
    ``path``, by default ``<name>.host`` beside ``trees``."""

    def __init__(
        self,
        transport: Transport,
        sim: SimFabric,
        cluster: Cluster,
        trees: Path,
        set_issm,
        path: Path | None = None,
    ):
        self.path = path or trees.with_name(f"{transport.name}.{hostwire.SOCKET_KIND}")
        self.transport = transport
        self.sim = sim
        self.cluster = cluster
        self.trees_dir = trees
        self.set_issm = set_issm
        # the MAD layer the tray's open umad files share (requests, answers, timeouts)
        self.mads = MadLayer(transport)
        self._sock: socket.socket | None = None
        self._pending = Pending()
        self._ports: dict[str, list[SimPort]] = {}
        self._trees: dict[str, tuple[sysfs.Tree, float]] = {}
        self.tree_live = tree_live()
        self._issm: dict[SimPort, tuple[socket.socket, Client]] = {}
        self.said = 0

    # --- the listening socket ---------------------------------------------------------

    def bind(self) -> None:
        """Listen at :attr:`path`; OSError (InputError: a path too long, a file not ours)
        to the caller."""
        s = bind_socket(self.path, socket.SOCK_SEQPACKET | socket.SOCK_NONBLOCK)
        try:
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
        for fd, w in list(self._pending.by_fd.items()):
            self._pending.forget(fd)
            self.transport.unwatch(fd)
            w.sock.close()
        for c, _cl in list(self._issm.values()):
            self.transport.unwatch(c.fileno())
            c.close()
        self._issm.clear()
        if self._sock is not None:
            self.transport.unwatch(self._sock.fileno())
            self._sock.close()
            self._sock = None
            self.path.unlink(missing_ok=True)
        shutil.rmtree(self.trees_dir, ignore_errors=True)

    def _accept(self) -> None:
        assert self._sock is not None
        for c, _addr in accepted(self._sock, self.transport.rlog, "host link"):
            self._admit(c)

    def _admit(self, c: socket.socket) -> None:
        """A connection just accepted: a uid the server does not admit is told so and
        closed at once; the others wait for their HELLO, a few per uid (hostgate)."""
        rlog = self.transport.rlog
        try:
            peer = peer_of(c)
        except OSError as e:
            rlog.warning("host connections refused", "host link: %s", e)
            c.close()
            return
        if peer.uid not in self.transport.policy.uids:
            rlog.warning(
                "host connections of other users refused",
                "host link: uid %d (pid %d) may not attach (up --allow-user)",
                peer.uid,
                peer.pid,
            )
            self._reply(c, errno.EACCES, 0, 0, f"uid {peer.uid} may not attach (up --allow-user)")
            c.close()
            return
        ok, evicted = self._pending.admit(c, peer)
        if evicted is not None:
            self.transport.unwatch(evicted.sock.fileno())
            evicted.sock.close()
        if not ok:
            rlog.warning(
                "host connections refused for silence",
                "host link: uid %d holds %d connections that have not said what they are; "
                "one more refused",
                peer.uid,
                self._pending.of_uid(peer.uid),
            )
            c.close()
            return
        c.setblocking(False)
        self.transport.watch(c.fileno(), functools.partial(self._hello, c, peer))

    def tick(self) -> None:
        """Every couple of seconds: connections that never said what they are go; trees
        asked for lately are brought up to date."""
        now = time.monotonic()
        self.mads.stalled(now)
        for w in self._pending.silent(now):
            self._forget_pending(w.sock)
            w.sock.close()
        for tray, (tree, asked) in list(self._trees.items()):
            if now - asked < self.tree_live:
                try:
                    self._write_tree(tray, tree)
                except FabriclabError as e:  # the next ask claims the tree afresh
                    self.transport.rlog.warning("tree not written", "host link: %s", e)
                    del self._trees[tray]

    def _forget_pending(self, c: socket.socket) -> None:
        fd = c.fileno()
        if self._pending.forget(fd) is not None:
            self.transport.unwatch(fd)

    # --- a connection says what it is ---------------------------------------------------

    def _hello(self, c: socket.socket, peer: Peer) -> None:
        try:
            raw = c.recv(hostwire.HELLO.size + umad.REG_REQ2.size + 1)
        except BlockingIOError:
            return
        except OSError:
            raw = b""
        self._forget_pending(c)
        self.greet(c, peer, raw)

    def greet(self, c: socket.socket, peer: Peer, raw: bytes) -> None:
        """Answer the HELLO ``raw`` that ``c`` (from ``peer``) began with: the connection
        is kept (an open umad or issm file) or closed.  A TCP connection (:mod:`.hosttcp`)
        comes here too, once its token is checked: its packets are framed by ``c``."""
        keep = False
        try:
            if len(raw) < hostwire.HELLO.size:
                raise _Refusal(errno.EPROTO, "not a fabriclab host protocol greeting")
            magic, version, kind, pid, index, token, _r, tray_raw = hostwire.HELLO.unpack_from(raw)
            if magic != hostwire.MAGIC or version != hostwire.VERSION:
                raise _Refusal(errno.EPROTO, f"host protocol {magic:#x} v{version}, not v1")
            self._check_pid(peer, pid)
            tray = simwire.cstring(tray_raw)
            rest = raw[hostwire.HELLO.size :]
            if kind == hostwire.KIND_TREE:
                live_ms = int(self.tree_live * 1000)  # REPLY token: the keep-fresh time
                send_tree = getattr(c, "send_tree", None)
                if send_tree is not None:  # over TCP: the tree itself, not where it is
                    send_tree(self.tree(tray), live_ms)
                else:
                    self._reply(c, 0, live_ms, 0, str(self.tree(tray)))
            elif kind == hostwire.KIND_UMAD:
                cl = self._open_umad(c, tray, index, peer)
                keep = True
                self._reply(cl.sock, 0, cl.id, cl.port.lid, "")
            elif kind == hostwire.KIND_ISSM:
                self._open_issm(c, tray, index, peer)
                keep = True
                self._reply(c, 0, 0, 0, "")
            elif kind == hostwire.KIND_REGISTER:
                self._register(token, rest, peer)
                self._reply(c, 0, token, 0, "")
            elif kind == hostwire.KIND_UNREGISTER:
                self._unregister(token, index, peer)
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
            getattr(c, "send_packet", functools.partial(socket.socket.send, c))(data)
        except OSError:
            pass

    @staticmethod
    def _check_pid(peer: Peer, pid: int) -> None:
        """The pid a HELLO names is its sender's: as we see it, or (in a container) as
        its own PID namespace does.  Over TCP the token is the proof (its pid is its own)."""
        if peer.addr:
            return
        if pid != peer.pid and procfs.nspids(peer.pid)[-1:] != [pid]:
            raise _Refusal(errno.EPERM, f"it claims pid {pid} but is pid {peer.pid}")

    def ports(self, tray: str) -> list[SimPort]:
        """Tray ``tray``'s HCA ports in umad order (the order its tree lists them)."""
        got = self._ports.get(tray)
        if got is None:
            t = self.cluster.tray(tray)
            if t is None:
                p = self.cluster.no_tray(tray or "(no FABRICLAB_TRAY)")
                raise _Refusal(errno.ENODEV, str(p))
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

    def _open_umad(self, c: socket.socket, tray: str, index: int, peer: Peer) -> Client:
        port = self._port(tray, index)
        transport = self.transport
        clients = transport.clients
        if len(clients) >= transport.capacity:
            raise _Refusal(
                errno.EMFILE, f"the server holds its limit of {transport.capacity} clients"
            )
        sender = _sender(peer)
        most = transport.per_sender if not peer.addr else max(1, transport.capacity // 2)
        if not privileged(peer.uid) and most <= sum(
            1 for c in clients.values() if c.sender == sender
        ):
            who = peer.addr or f"uid {peer.uid}"
            raise _Refusal(errno.EMFILE, f"{who} holds its limit of {most} clients")
        cid = next(i for i in range(transport.capacity) if i not in clients)
        umad_socket = getattr(c, "umad_socket", None)  # a TCP connection's: framed
        sock = umad_socket() if umad_socket is not None else UmadSocket(fileno=c.detach())
        sock.setblocking(False)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _SNDBUF)
        except OSError:
            pass
        sock.setup(self.mads)
        pid = peer.pid
        cl = Client(cid, pid, port, 1, False, tray, sock, sender=sender, pid=pid, agents={})
        cl.host = f"tcp {peer.addr}" if peer.addr else ""
        sock.client = cl
        transport.attach(cl)
        log.info("client %d (host library, pid %d) attached at %s", cid, pid, port.ref())
        return cl

    def _open_issm(self, c: socket.socket, tray: str, index: int, peer: Peer) -> None:
        port = self._port(tray, index)
        if port in self._issm or any(
            cl.issm and cl.port is port for cl in self.transport.clients.values()
        ):
            raise _Refusal(errno.EBUSY, f"an SM holds issm{index} of {tray}")
        pid = peer.pid
        holder = Client(-1, pid, port, 0, False, tray, c, sender=_sender(peer), pid=pid)
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

    def _client(self, token: int, peer: Peer) -> Client:
        """The umad connection ``token``, when the process ``peer`` opened it: agents
        belong to the open file that registered them (user_mad.c keeps them per file),
        and only the process holding that file may change them."""
        cl = self.transport.clients.get(token)
        if cl is None or cl.agents is None:
            raise _Refusal(errno.EINVAL, f"no umad connection {token}")
        if cl.pid != peer.pid or cl.sender != _sender(peer):
            raise _Refusal(errno.EPERM, f"umad connection {token} is not pid {peer.pid}'s")
        return cl

    def _sm_pid(self, port: SimPort) -> int:
        """The process of the subnet manager holding ``port``'s issm (0: none)."""
        got = self._issm.get(port)
        if got is not None:
            return got[1].pid
        return next(
            (cl.pid for cl in self.transport.clients.values() if cl.issm and cl.port is port), 0
        )

    def _register(self, token: int, raw: bytes, peer: Peer) -> None:
        cl = self._client(token, peer)
        if len(raw) < umad.REG_REQ2.size:
            raise _Refusal(errno.EINVAL, "registration without its request")
        aid, _qpn, mclass, version, _res, _flags, mask, oui, rmpp = umad.REG_REQ2.unpack_from(raw)
        agent = Agent(aid, mclass, version, oui, int.from_bytes(mask, "little"), rmpp)
        assert cl.agents is not None
        if not 0 <= aid < umad.MAX_AGENTS or aid in cl.agents:
            raise _Refusal(errno.EINVAL, f"agent {aid} is not free")
        clients = self.transport.clients.values()
        if in_use(clients, cl.port, agent):
            raise _Refusal(errno.EINVAL, "a method is already in use on that port")
        sm = self._sm_pid(cl.port)
        if sm and sm != cl.pid and sm_holds(clients, cl.port, sm, agent):
            raise _Refusal(
                errno.EBUSY,
                f"class {agent.mclass:#04x} is the subnet manager's (pid {sm}) on that port",
            )
        cl.agents[aid] = agent

    def _unregister(self, token: int, aid: int, peer: Peer) -> None:
        cl = self._client(token, peer)
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

    def wake(self) -> float:
        """Requests whose answer did not come are timed out; seconds until the next."""
        return self.mads.wake()

    def client_left(self, cl: Client) -> None:
        """Forget what waited for ``cl``."""
        self.mads.client_left(cl)


def _sender(peer: Peer) -> tuple:
    """Whose quota a connection of ``peer`` uses: its uid's, or over TCP its address's."""
    return ("host", peer.addr) if peer.addr else ("uid", peer.uid)


class _Refusal(Exception):
    def __init__(self, err: int, text: str):
        super().__init__(text)
        self.err, self.text = err, text


def trees_dir(state: Path, name: str) -> Path:
    """Where fabric ``name``'s trays' trees are written."""
    return state / f"{name}.trees"


def host_socket(state: Path, name: str) -> Path:
    """Where fabric ``name``'s host library socket is (what the library is given as
    ``FABRICLAB_HOST_SOCKET``)."""
    return state / f"{name}.{hostwire.SOCKET_KIND}"
