"""A recorded MAD stream played back against a running fabric server (fabriclab's or
ibsim), and what the server sends back to each step.

The recording (:mod:`..wire.record`) says what every tool sent, in the order the
server took it.  The replay attaches its own clients where the recording's were (the
ibsim control protocol, as libumad2sim speaks it: a control record CONNECT from the
client's own process, then the data socket), sends the same datagrams strictly one at a
time, performs the recorded admin requests at their points, and after each step collects
every datagram the server sends to any of its clients, waiting (bounded) for as many as
the recording saw.  One at a time, the server sees exactly the recorded order, so its
answers are comparable byte for byte: with the recording, and between two servers.

A client's CONNECT must come from a process whose pid is the client's key (the server
checks the sender's credentials), so each client is a small child process that binds
the two sockets, sends the CONNECT and hands the sockets over (SCM_RIGHTS), then waits
until the replay ends.
"""

from __future__ import annotations

import json
import select
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ...ib import simwire
from ..wire import record

# a client's process: binds <name>:ctl<pid> and <name>:in<pid>, sends the CONNECT record
# (hex, its key set to the pid) and passes both sockets to the replay, then waits
_CHILD = r"""
import os, socket, sys
name, raw, chan = sys.argv[1], bytearray.fromhex(sys.argv[2]), socket.socket(fileno=int(sys.argv[3]))
pid = os.getpid()
addr = lambda kind: b"\0" + f"{name}:{kind}".encode() + b"\0"
ctl = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
ctl.bind(addr(f"ctl{pid}"))
data = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
data.bind(addr(f"in{pid}"))
ctl.connect(addr("ctl"))
raw[16:20] = pid.to_bytes(4, "little")
ctl.send(raw)
socket.send_fds(chan, [b"s"], [ctl.fileno(), data.fileno()])
sys.stdin.read()
"""
_KEY_AT = 16  # sim_ctl's data: struct sim_client_info's id (the pid) comes first
_CLIENTID_AT = 4


@dataclass
class _Client:
    """One of the replay's clients: its process and sockets, and the server's id."""

    proc: subprocess.Popen
    ctl: socket.socket
    addr: int  # the recording's index of its control address
    data: socket.socket | None = None
    id: int = -1  # the server's id for it
    recorded: int = -1  # the recording's id for it


@dataclass
class Outcome:
    """What a replay got back: per step, the datagrams each client received, as
    (kind, the recording's client, bytes) (kind: :data:`record.CTL_OUT`,
    :data:`record.MAD_OUT`, or :data:`record.ADMIN` for an admin request's result);
    how many the recording saw that did not come (within the wait), the MADs sent, and
    the seconds the replay took."""

    steps: list[list[tuple[int, int, bytes]]] = field(default_factory=list)
    missing: int = 0
    mads: int = 0
    seconds: float = 0.0

    def received(self, kind: int = record.MAD_OUT) -> list[tuple[int, bytes]]:
        """Every datagram of ``kind`` received, in order, with its client."""
        return [(c, b) for step in self.steps for k, c, b in step if k == kind]


def expected(records: Iterable[record.Record]) -> list[list[tuple[int, int, bytes]]]:
    """What the recording's server sent after each input step, as :class:`Outcome`'s
    steps hold it (admin results are not recorded: none)."""
    steps: list[list[tuple[int, int, bytes]]] = []
    for r in records:
        if r.kind in record.INPUTS:
            steps.append([])
        elif r.kind == record.MAD_OUT and steps:
            steps[-1].append((r.kind, r.client, r.data))
        elif r.kind == record.CTL_OUT and steps:
            steps[-1].append((r.kind, r.client, r.data))
    return steps


class Replay:
    """Plays recordings against the server named ``name`` (abstract sockets);
    ``admin(request)`` performs an admin request (None: they are skipped); ``wait``:
    the most seconds a step waits for what the recording saw come back."""

    def __init__(self, name: str, admin: Callable[[dict], object] | None = None, wait: float = 5.0):
        self.name = name
        self.admin = admin
        self.wait = wait
        self.by_addr: dict[int, _Client] = {}  # the recording's control address -> client
        self.by_id: dict[int, _Client] = {}  # the recording's client id -> client
        self.poll = select.poll()
        self.fds: dict[int, tuple[int, _Client]] = {}  # fd -> (kind, client)

    def run(self, records: list[record.Record]) -> Outcome:
        """Play ``records``; what came back."""
        out = Outcome()
        t0 = time.perf_counter()
        try:
            self._run(records, out)
        finally:
            self.close()
        out.seconds = time.perf_counter() - t0
        return out

    def _run(self, records: list[record.Record], out: Outcome) -> None:
        n = len(records)
        i = 0
        while i < n:
            r = records[i]
            i += 1
            if r.kind not in record.INPUTS:
                continue
            want = 0  # what the recording's server sent back to this step
            leaving: list[int] = []  # clients it detached meanwhile, not asked to
            attached: list[int] = []  # the client a CONNECT attached, by its recorded id
            j = i
            while j < n and records[j].kind not in record.INPUTS:
                k = records[j].kind
                if k in (record.CTL_OUT, record.MAD_OUT):
                    want += 1
                elif k == record.ATTACH:
                    attached.append(records[j].client)
                elif k == record.DETACH and r.kind != record.CTL_IN:
                    # (one a control record brings, the replay's server does as well:
                    # a DISCONNECT, or a CONNECT replacing a client with the same key)
                    leaving.append(records[j].client)
                j += 1
            i = j
            step: list[tuple[int, int, bytes]] = []
            if r.kind == record.MAD_IN:
                cl = self.by_id.get(r.client)
                if cl is not None and cl.data is not None:
                    cl.data.send(r.data)
                    out.mads += 1
            elif r.kind == record.CTL_IN:
                self._control(r)
            elif self.admin is not None:
                step.append((record.ADMIN, -1, _admin_result(self.admin, r.json())))
            self._collect(step, want)
            out.missing += max(0, want - sum(1 for k, _c, _b in step if k != record.ADMIN))
            out.steps.append(step)
            if r.kind == record.CTL_IN:
                cl = self.by_addr.get(r.client)
                if cl is not None and attached:
                    self._attached(cl, attached[0], step)
                elif cl is not None and _disconnects(r):
                    self._end(cl)
            for cid in leaving:
                self._leave(cid)

    def _control(self, r: record.Record) -> None:
        """A control record: a CONNECT starts a client; the others go from its socket
        with the server's id for it."""
        cl = self.by_addr.get(r.client)
        try:
            ctl = simwire.Ctl.decode(r.data)
        except ValueError:  # a malformed one, sent as it was (from a client's socket)
            ctl = None
        if ctl is not None and ctl.type == simwire.CTL_CONNECT and cl is None:
            self.by_addr[r.client] = self._start(r.data, r.client)
            return
        if cl is None:
            return
        raw = bytearray(r.data)
        if ctl is not None and ctl.type == simwire.CTL_CONNECT:  # the client starting over
            raw[_KEY_AT : _KEY_AT + 4] = cl.proc.pid.to_bytes(4, "little")
        elif ctl is not None and cl.id >= 0:
            raw[_CLIENTID_AT : _CLIENTID_AT + 4] = cl.id.to_bytes(4, "little")
        cl.ctl.send(raw)

    def _start(self, raw: bytes, addr: int) -> _Client:
        """A client process sending the CONNECT ``raw``; its sockets, here."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        proc = subprocess.Popen(
            [sys.executable, "-c", _CHILD, self.name, raw.hex(), str(theirs.fileno())],
            stdin=subprocess.PIPE,
            pass_fds=[theirs.fileno()],
        )
        theirs.close()
        mine.settimeout(30)
        try:
            _msg, fds, _flags, _addr = socket.recv_fds(mine, 16, 2)
        finally:
            mine.close()
        ctl = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM, fileno=fds[0])
        data = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM, fileno=fds[1])
        cl = _Client(proc, ctl, addr)
        cl.data = data  # connected once the server names its data socket
        self._watch(ctl, record.CTL_OUT, cl)
        return cl

    def _attached(self, cl: _Client, recorded: int, step: list) -> None:
        """The server answered ``cl``'s CONNECT (the recording's client ``recorded``):
        the client's id, and its data socket joined to the server's."""
        cl.recorded = recorded
        self.by_id[recorded] = cl
        for kind, _c, raw in step:
            if kind != record.CTL_OUT:
                continue
            reply = simwire.Ctl.decode(raw)
            if reply.type != simwire.CTL_CONNECT:
                return
            cl.id = int.from_bytes(reply.data[:4], "little")
            assert cl.data is not None
            cl.data.connect(simwire.sockname(self.name, f"out{cl.id}"))
            self._watch(cl.data, record.MAD_OUT, cl)
            return

    def _watch(self, sock: socket.socket, kind: int, cl: _Client) -> None:
        sock.setblocking(False)
        self.fds[sock.fileno()] = (kind, cl)
        self.poll.register(sock.fileno(), select.POLLIN)

    def _collect(self, step: list, want: int) -> None:
        """What the server sends back: ``want`` datagrams or the wait's end, then what
        else is there already."""
        got = sum(1 for k, _c, _b in step if k != record.ADMIN)
        deadline = time.monotonic() + self.wait
        while True:
            left = deadline - time.monotonic()
            timeout = 0 if got >= want else max(0, int(left * 1000))
            events = self.poll.poll(timeout)
            if not events:
                if got >= want or left <= 0:
                    return
                continue
            for fd, _ev in events:
                kind, cl = self.fds[fd]
                sock = cl.ctl if kind == record.CTL_OUT else cl.data
                assert sock is not None
                while True:
                    try:
                        raw = sock.recv(4096)
                    except (BlockingIOError, ConnectionRefusedError):
                        break
                    step.append((kind, cl.addr if kind == record.CTL_OUT else cl.recorded, raw))
                    got += 1

    def _leave(self, recorded: int) -> None:
        """The recording's server detached this client (its process ended): the replay's
        says so with a DISCONNECT (answer not kept) and goes."""
        cl = self.by_id.get(recorded)
        if cl is None or cl.id < 0:
            return
        self._unwatch(cl)
        cl.ctl.setblocking(True)
        cl.ctl.settimeout(self.wait)
        cl.ctl.send(simwire.Ctl(cl.id, simwire.CTL_DISCONNECT, 0, b"").encode())
        try:
            cl.ctl.recv(4096)
        except OSError:
            pass
        self._end(cl)

    def _unwatch(self, cl: _Client) -> None:
        for sock in (cl.ctl, cl.data):
            if sock is not None and sock.fileno() in self.fds:
                self.poll.unregister(sock.fileno())
                del self.fds[sock.fileno()]

    def _end(self, cl: _Client) -> None:
        self._unwatch(cl)
        for sock in (cl.ctl, cl.data):
            if sock is not None:
                sock.close()
        if cl.proc.stdin is not None:
            cl.proc.stdin.close()
        try:
            cl.proc.wait(10)
        except subprocess.TimeoutExpired:
            cl.proc.kill()
            cl.proc.wait()

    def close(self) -> None:
        """End every client the replay started."""
        for cl in list(self.by_addr.values()):
            if cl.ctl.fileno() >= 0:
                self._end(cl)
        self.by_addr.clear()
        self.by_id.clear()


def _disconnects(r: record.Record) -> bool:
    """Whether input ``r`` is a DISCONNECT control record."""
    if r.kind != record.CTL_IN:
        return False
    try:
        return simwire.Ctl.decode(r.data).type == simwire.CTL_DISCONNECT
    except ValueError:
        return False


def _admin_result(admin: Callable[[dict], object], request: dict) -> bytes:
    """An admin request's result (or its error), without the clock's readings."""
    try:
        result = admin(request)
    except Exception as e:  # the server's answer to it, as the recording's got
        return f"error: {e}".encode()
    return json.dumps(_timeless(result), sort_keys=True).encode()


def _timeless(v):
    if isinstance(v, dict):
        return {k: _timeless(x) for k, x in v.items() if k not in ("since", "now", "next")}
    if isinstance(v, list):
        return [_timeless(x) for x in v]
    return v


def replay_file(path: Path, name: str, **kw) -> Outcome:
    """Play the recording at ``path`` against the server ``name``."""
    return Replay(name, **kw).run(list(record.read(path)))
