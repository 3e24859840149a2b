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
import shutil
import socket
import struct
import time
from pathlib import Path

from ...errors import FabriclabError
from ...ib import hostwire, simwire, umad
from ...model.cluster import Cluster
from ...statedir import bind_socket
from ..fabric.state import SimFabric, SimPort
from ..host import hostview, sysfs
from .agents import Agent, in_use
from .client import Client
from .transport import Transport
from .umadsock import MadLayer, UmadSocket

log = logging.getLogger("fabriclab.sim")

_HELLO_WAIT = 5.0  # seconds a connection may take to say what it is
_PENDING_MAX = 256  # connections that have not said yet
_TREE_LIVE = 30.0  # seconds a tray's tree is kept fresh after it was last asked for
_SNDBUF = 1 << 20  # each umad connection's send buffer: an SM keeps many MADs in flight
_CRED = struct.Struct("iII")  # struct ucred (unix(7))


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
        self._pending: dict[int, tuple[socket.socket, float]] = {}
        self._ports: dict[str, list[SimPort]] = {}
        self._trees: dict[str, tuple[sysfs.Tree, float]] = {}
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
            self.path.unlink(missing_ok=True)
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
        sock.setup(self.mads)
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

    def wake(self) -> float:
        """Requests whose answer did not come are timed out; seconds until the next."""
        return self.mads.wake()

    def client_left(self, cl: Client) -> None:
        """Forget what waited for ``cl``."""
        self.mads.client_left(cl)


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
