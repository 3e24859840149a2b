"""The MAD stream recorder: every datagram the fabric server receives and sends, in order.

Set ``FABRICLAB_MAD_RECORD=PATH`` when a fabric comes up (``fabriclab up``) and the
server writes, to ``PATH`` (gzip), one record per event in the order its loop saw them:
each control record received and the answer sent back, each client attached (its port:
node GUID and port number, its QP, whether it is the SM) and detached, each MAD datagram
received from a client and each one sent to a client (answers, forwarded MADs, traps),
and the admin requests that changed the fabric in between (a fault set or cleared).
:mod:`..run.replay` plays such a stream back against a fresh server (fabriclab's or
ibsim) and collects what it answers.

The file: the line ``fabriclab-mad-record 1``, then records of a header (kind, client,
length; little-endian ``<BiI``) and ``length`` bytes.  The client is the server's client
id for MADs, attach and detach; for control records, the index of the control address
in the order first seen (a tool's control socket, before it has an id).  Attach and
admin payloads are JSON; the others the datagram as it went.

The recorder hooks the server's handlers (:attr:`.transport.Transport.on_control`,
``on_mad``, ``on_detach``, ``reply``, ``close``) and its clients' data sockets, so it sees what
either MAD core is handed; the host library's frames (:mod:`.hostlink`) are not
recorded.
"""

from __future__ import annotations

import gzip
import json
import socket
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import InputError, Problem
from .client import Client

MAGIC = b"fabriclab-mad-record 1\n"
HEADER = struct.Struct("<BiI")  # kind, client, length
ENV = "FABRICLAB_MAD_RECORD"

# the kinds of record
CTL_IN, CTL_OUT, ATTACH, DETACH, MAD_IN, MAD_OUT, ADMIN = range(1, 8)
KIND_NAMES = {
    CTL_IN: "ctl-in",
    CTL_OUT: "ctl-out",
    ATTACH: "attach",
    DETACH: "detach",
    MAD_IN: "mad-in",
    MAD_OUT: "mad-out",
    ADMIN: "admin",
}
INPUTS = (CTL_IN, MAD_IN, ADMIN)  # what a replay does; the others are what it gets back
# the admin requests that change what the fabric answers (the others only read it)
CHANGES = {"fault", "clear", "scenario", "advance", "traffic"}


@dataclass(frozen=True)
class Record:
    """One event of a recorded stream."""

    kind: int
    client: int
    data: bytes

    def json(self):
        """An attach or admin record's payload."""
        return json.loads(self.data)


class _RecordingSocket(socket.socket):
    """A client's data socket that also records what the server sends on it."""

    recorder: Recorder
    cid: int

    def send(self, data, flags: int = 0) -> int:
        n = super().send(data, flags)
        self.recorder.write(MAD_OUT, self.cid, bytes(data))
        return n


class Recorder:
    """Records what ``server`` (a :class:`.server.FabricServer`) receives and sends to
    ``path``."""

    def __init__(self, server, path: Path):
        self._out = gzip.open(path, "wb", compresslevel=6)
        self._out.write(MAGIC)
        self._addrs: dict[object, int] = {}
        t = self.transport = server.transport
        on_control, on_mad, on_detach = t.on_control, t.on_mad, t.on_detach
        reply, open_data, close = t.reply, t.open_data_socket, t.close
        buf = t.buf
        pending: list[int] = []  # the control address being answered

        def control(raw: bytes, creds, addr) -> None:
            i = self._addrs.setdefault(addr, len(self._addrs))
            self.write(CTL_IN, i, raw)
            pending.append(i)
            before = set(t.clients)
            try:
                on_control(raw, creds, addr)
            finally:
                pending.pop()
            for cid in set(t.clients) - before:
                self._attached(t.clients[cid])

        def answer(data: bytes, addr) -> None:
            self.write(CTL_OUT, pending[-1] if pending else -1, data)
            reply(data, addr)

        def mad(cl: Client, n: int) -> None:
            self.write(MAD_IN, cl.id, bytes(buf[:n]))
            on_mad(cl, n)

        def detached(cl: Client) -> None:
            self.write(DETACH, cl.id, b"")
            on_detach(cl)

        def data_socket(cid: int, host: str, key: int) -> socket.socket:
            sock = open_data(cid, host, key)
            rec = _RecordingSocket(sock.family, sock.type, fileno=sock.detach())
            rec.recorder, rec.cid = self, cid
            return rec

        def closing() -> None:
            close()
            self.close()

        t.on_control, t.on_mad, t.on_detach = control, mad, detached
        t.reply, t.open_data_socket, t.close = answer, data_socket, closing

    def write(self, kind: int, client: int, data: bytes) -> None:
        """Append one record."""
        self._out.write(HEADER.pack(kind, client, len(data)))
        self._out.write(data)

    def _attached(self, cl: Client) -> None:
        p = cl.port
        doc = {
            "id": cl.id,
            "key": cl.key,
            "guid": f"0x{p.node.fabric_node.guid:016x}",
            "port": p.num,
            "qp": cl.qp,
            "issm": cl.issm,
            "nodeid": cl.nodeid,
        }
        self.write(ATTACH, cl.id, json.dumps(doc).encode())

    def close(self) -> None:
        """Finish the file (when the server closes)."""
        self._out.close()


def admin(recorder: Recorder | None, answer: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """The admin socket's ``answer(request)``, recording first (when there is a
    ``recorder``) the requests that change the fabric."""
    if recorder is None:
        return answer

    def recorded(request):
        if isinstance(request, dict) and request.get("op") in CHANGES:
            recorder.write(ADMIN, -1, json.dumps(request, sort_keys=True).encode())
        return answer(request)

    return recorded


def from_env(server, environ) -> Recorder | None:
    """The recorder ``FABRICLAB_MAD_RECORD`` in ``environ`` asks for on ``server``, if it
    does; InputError when its file cannot be written."""
    path = environ.get(ENV)
    if not path:
        return None
    try:
        return Recorder(server, Path(path))
    except OSError as e:
        raise InputError([Problem(ENV, f"cannot write {path}: {e.strerror}")]) from None


def read(path: Path) -> Iterator[Record]:
    """The records of the stream at ``path``; ValueError when it is not one."""
    with gzip.open(path, "rb") as f:
        if f.read(len(MAGIC)) != MAGIC:
            raise ValueError(f"{path}: not a MAD stream recording")
        while True:
            head = f.read(HEADER.size)
            if not head:
                return
            if len(head) != HEADER.size:
                raise ValueError(f"{path}: cut short")
            kind, client, n = HEADER.unpack(head)
            data = f.read(n)
            if len(data) != n or kind not in KIND_NAMES:
                raise ValueError(f"{path}: cut short or not a record")
            yield Record(kind, client, data)
