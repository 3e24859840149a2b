"""A small server end of fabriclab's host protocol over TCP (ib/hostwire.py: each packet
behind its length, AUTH before the HELLO, TREE's archive) on 127.0.0.1, for the tests of
the host library's TCP way in (test_hostlib_remote.py); it can be made to lie."""

from __future__ import annotations

import errno
import itertools
import os
import secrets
import socket
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from test_hostlib import TRAY, Conn

from fabriclab.ib import hostwire, simwire
from fabriclab.sim.host.hostlib import library_path

_names = itertools.count()
LENGTH = hostwire.LENGTH


def entry(kind: int, path: str, data: bytes = b"") -> bytes:
    p = path.encode()
    return hostwire.ENTRY.pack(kind, 0, len(p), len(data)) + p + data


def archive(root: Path) -> bytes:
    """A directory as TREE's archive: directories before what they hold."""
    out = bytearray()
    for top, dirs, files in os.walk(root):
        dirs.sort()
        rel = Path(top).relative_to(root)
        for name in [*dirs, *sorted(files)]:
            path, full = (rel / name).as_posix(), Path(top) / name
            if full.is_symlink():
                out += entry(hostwire.ENTRY_SYMLINK, path, os.readlink(full).encode())
            elif full.is_dir():
                out += entry(hostwire.ENTRY_DIR, path)
            else:
                out += entry(hostwire.ENTRY_FILE, path, full.read_bytes())
    return bytes(out)


def recv_exact(s: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        got = s.recv(n - len(data))
        if not got:
            raise ConnectionError("closed")
        data += got
    return data


def recv_packet(s: socket.socket) -> bytes:
    (n,) = LENGTH.unpack(recv_exact(s, LENGTH.size))
    assert 1 <= n <= hostwire.FRAME_MAX
    return recv_exact(s, n)


def send_packet(s: socket.socket, data: bytes) -> None:
    s.sendall(LENGTH.pack(len(data)) + data)


class TcpStub:
    """The server end of the host protocol over TCP for one tray, on ``host`` (127.0.0.1
    unless given): AUTH
    checked against its token; TREE sends ``tree`` (the archive of ``root`` unless
    given) with ``announce`` as its size (the archive's unless given); ``reply`` (raw
    bytes) is sent instead of any REPLY when given; a UMAD connection's messages go to
    ``answer``, whose packets are sent back (``lie``: a length beyond a frame instead)."""

    def __init__(self, root: Path | None, answer: Callable | None = None, **kw):
        self.name = f"flhr{os.getpid()}x{next(_names)}"
        self.root, self.answer = root, answer
        self.tree: bytes | None = kw.get("tree")
        self.announce: int | None = kw.get("announce")
        self.reply: bytes | None = kw.get("reply")
        self.lie = kw.get("lie", False)
        self.token = secrets.token_hex(32)
        self.conns: list[Conn] = []
        self.tree_pids: list[int] = []  # who asked for a TREE
        self.issm_open = threading.Event()
        self.issm_closed = threading.Event()
        self.socks: list[socket.socket] = []
        self.dir = Path(tempfile.mkdtemp(prefix="flhr"))
        self.tmp = self.dir / "tmp"  # the tools' TMPDIR: where their private trees go
        self.tmp.mkdir()
        self.token_file = self.dir / "token"
        self.token_file.write_text(self.token + "\n")
        self.token_file.chmod(0o600)
        self.host = kw.get("host", "127.0.0.1")
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        self.lsock = socket.create_server((self.host, 0), family=family)
        self.port = self.lsock.getsockname()[1]
        self.addr = f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"
        threading.Thread(target=self._accept, daemon=True).start()

    def env(self, tray: str = TRAY, **more: str) -> dict[str, str]:
        env = {
            **os.environ,
            "LD_PRELOAD": library_path(),
            "FABRICLAB_SOCKNAME": self.name,
            "FABRICLAB_HOST_ADDR": self.addr,
            "FABRICLAB_HOST_TOKEN_FILE": str(self.token_file),
            "FABRICLAB_TRAY": tray,
            "TMPDIR": str(self.tmp),
            **more,
        }
        env.pop("FABRICLAB_HOST_SOCKET", None)
        return env

    def close(self) -> None:
        """The server goes: every connection and the listening socket close."""
        for s in [self.lsock, *self.socks]:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            self.socks.append(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _reply(self, c: socket.socket, err: int = 0, token: int = 0, text: str = "", value=0):
        send_packet(c, hostwire.REPLY.pack(hostwire.MAGIC, err, token, value) + text.encode())

    def _serve(self, c: socket.socket) -> None:
        try:
            auth, hello = recv_packet(c), recv_packet(c)
            self._answer(c, auth, hello)
        except (OSError, ConnectionError):
            pass
        c.close()

    def _answer(self, c: socket.socket, auth: bytes, raw: bytes) -> None:
        magic, version, kind, pid, index, _token, _r, tray = hostwire.HELLO.unpack_from(raw)
        assert magic == hostwire.MAGIC and version == hostwire.VERSION
        if self.reply is not None:
            c.sendall(self.reply)
        elif auth != self.token.encode():
            self._reply(c, errno.EACCES, text=f"wrong token for fabric '{self.name}'")
        elif simwire.cstring(tray) != TRAY:
            self._reply(c, errno.ENODEV, text=f"{simwire.cstring(tray)}: no such tray")
        elif kind == hostwire.KIND_TREE:
            self.tree_pids.append(pid)
            data = self.tree if self.tree is not None else archive(self.root)
            self._reply(c, value=len(data) if self.announce is None else self.announce)
            for at in range(0, len(data), hostwire.FRAME_MAX):
                send_packet(c, data[at : at + hostwire.FRAME_MAX])
        elif kind in (hostwire.KIND_REGISTER, hostwire.KIND_UNREGISTER):
            self._reply(c)
        elif kind == hostwire.KIND_ISSM:
            self._reply(c)
            self.issm_open.set()
            c.recv(1)  # until it closes
            self.issm_closed.set()
        elif kind == hostwire.KIND_UMAD:
            conn = Conn(c, len(self.conns) + 1, index)
            self.conns.append(conn)
            self._reply(c, token=conn.token)
            while True:
                msg = recv_packet(c)
                conn.got.append(msg)
                for out in self.answer(conn, msg) if self.answer else []:
                    if self.lie:
                        c.sendall(LENGTH.pack(hostwire.FRAME_MAX + 1) + out)
                    else:
                        send_packet(c, out)
