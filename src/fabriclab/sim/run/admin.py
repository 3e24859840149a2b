"""The running fabric's admin endpoint: a Unix stream socket in the state directory
(``<name>.admin``) speaking JSON lines, served in the fabric server's own epoll loop,
through which ``fabriclab fault|scenario|clock|traffic`` reach the live fabric
(:mod:`..live.api`).  Not to be confused with :mod:`..wire.control`, the ibsim protocol's control
channel the tools attach through.

Each request is one line ``{"op": ..., ...}``; each answer one line, ``{"ok": true,
"result": ...}`` or ``{"ok": false, "where": ..., "what": ...}``.  A malformed request
gets that error and changes nothing.  Bounds: a request line of at most
:data:`LINE_MAX` bytes, nested at most :data:`DEPTH_MAX` deep (checked before it is
parsed), at most :data:`CLIENTS_MAX` connections at once (the oldest goes when another
comes); answers are never waited for: a client that leaves more than :data:`OUT_MAX`
bytes of them unread, or takes none for :data:`STALL_MAX` seconds, is closed.  Only the server's own user may connect: the socket is 0600
in the 0700 state directory, and the peer's uid (``SO_PEERCRED``) is checked too.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import stat
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...errors import FabriclabError, InputError, Problem
from ...inputs import json_bounds
from ...statedir import state_dir
from .records import Instance

log = logging.getLogger("fabriclab.sim")

LINE_MAX = 1 << 20  # a request line (a scenario file travels in one)
CLIENTS_MAX = 16
DEPTH_MAX = 32  # a request nests 3 deep (options.gpus[0])
DIGITS_MAX = 100  # every number a request holds fits 64 bits (20 digits)
OUT_MAX = 2 * LINE_MAX  # answers a client may leave unread before it is closed
STALL_MAX = 10.0  # seconds answers may wait with no byte taken before the client is closed
_UCRED = struct.Struct("iII")  # struct ucred (unix(7))
_SUN_PATH_MAX = 107  # sockaddr_un.sun_path is 108 bytes with its NUL (unix(7))


def admin_path(state: Path, name: str) -> Path:
    """Where fabric ``name``'s admin socket is."""
    return state / f"{name}.admin"


class _Conn:
    __slots__ = ("buf", "ended", "moved", "out", "pid", "since", "sock", "writing")

    def __init__(self, sock: socket.socket, pid: int):
        self.sock = sock
        self.pid = pid
        self.buf = bytearray()  # what came in, not yet a whole line
        self.out = bytearray()  # answers not yet taken by the client
        self.since = self.moved = time.monotonic()  # connected; last answer bytes taken
        self.writing = False  # the loop watches for the socket to be writable
        self.ended = False  # the client sent all it will (shut its end): answers remain


class AdminServer:
    """Serves ``handle(request) -> result`` on the socket at ``path`` inside
    ``transport``'s loop (its :meth:`~..wire.transport.Transport.watch`), never blocking
    it: answers wait in a bounded buffer per client until the client takes them."""

    def __init__(self, path: Path, handle: Callable[[Any], object], transport):
        self.path = path
        self.handle = handle
        self.transport = transport
        self.sock: socket.socket | None = None
        self.conns: dict[int, _Conn] = {}

    def bind(self) -> None:
        """Listen at ``path`` (a stale socket left by a killed server is replaced; any
        other file there is refused)."""
        if len(os.fsencode(self.path)) > _SUN_PATH_MAX:
            raise InputError(
                [
                    Problem(
                        str(self.path), "path too long for a Unix socket (set FABRICLAB_STATE_DIR)"
                    )
                ]
            )
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            st = None
        if st is not None:
            if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.geteuid():
                raise InputError([Problem(str(self.path), "exists and is not our socket")])
            os.unlink(self.path)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # the socket is born 0600
        try:
            s.bind(os.fspath(self.path))
        finally:
            os.umask(old)
        s.listen(CLIENTS_MAX)
        s.setblocking(False)
        self.sock = s
        self.transport.watch(s.fileno(), self._accept)
        self.transport.on_tick.append(self._sweep)

    def close(self) -> None:
        """Close every connection and the socket, and remove it."""
        for c in list(self.conns.values()):
            self._drop(c)
        if self.sock is not None:
            self.transport.unwatch(self.sock.fileno())
            self.sock.close()
            self.sock = None
            try:
                os.unlink(self.path)
            except OSError:
                pass

    def _accept(self) -> None:
        assert self.sock is not None
        try:
            conn, _ = self.sock.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            log.warning("admin socket: accept failed: %s", e)
            return
        pid, uid, _gid = _UCRED.unpack(
            conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
        )
        if uid != os.geteuid():
            log.warning("admin socket: refused pid %d of uid %d", pid, uid)
            conn.close()
            return
        if len(self.conns) >= CLIENTS_MAX:
            self._drop(min(self.conns.values(), key=lambda c: c.since))
        conn.setblocking(False)
        c = _Conn(conn, pid)
        self.conns[conn.fileno()] = c
        self.transport.watch(conn.fileno(), lambda: self._serve(c))

    def _drop(self, c: _Conn) -> None:
        fd = c.sock.fileno()
        if self.conns.pop(fd, None) is None:
            return
        self.transport.unwatch(fd)
        c.sock.close()

    def _serve(self, c: _Conn) -> None:
        """:meth:`_ready`, where a bug costs the connection, never the server's loop."""
        try:
            self._ready(c)
        except Exception:
            log.exception("admin socket: closed pid %d", c.pid)
            self._drop(c)

    def _ready(self, c: _Conn) -> None:
        """The client's socket is readable or writable: send what waits, then read."""
        if c.out and not self._flush(c):
            return
        if c.ended:
            if not c.out:
                self._drop(c)
            return
        try:
            data = c.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(c)
            return
        if not data:  # the client has sent all: it still gets the answers it asked for
            if not c.out:
                self._drop(c)
                return
            c.ended = True
            self.transport.want(c.sock.fileno(), readable=False, writable=True)
            return
        c.buf += data
        while c.sock.fileno() in self.conns:
            nl = c.buf.find(b"\n")
            if nl < 0 and len(c.buf) <= LINE_MAX:
                break
            if nl < 0 or nl > LINE_MAX:  # the client is told once, and closed
                self._queue(c, _error("request", f"longer than {LINE_MAX} bytes"))
                self._flush(c)
                self._drop(c)
                return
            line = bytes(c.buf[:nl])
            del c.buf[: nl + 1]
            self._queue(c, self._answer(line))
        if c.sock.fileno() in self.conns and c.out:
            self._flush(c)

    def _queue(self, c: _Conn, answer: dict) -> None:
        """Put an answer after those waiting; a client with more than OUT_MAX bytes of
        answers unread is not reading, and is closed."""
        if len(c.out) > OUT_MAX:
            log.warning(
                "admin socket: closed pid %d: %d bytes of answers unread", c.pid, len(c.out)
            )
            self._drop(c)
            return
        try:
            text = json.dumps(answer)
        except (TypeError, ValueError) as e:  # a result that is not JSON: a bug
            text = json.dumps(_error("internal", f"{type(e).__name__}: {e}"))
        if not c.out:
            c.moved = time.monotonic()
        c.out += (text + "\n").encode()

    def _flush(self, c: _Conn) -> bool:
        """Send what the socket takes now, without waiting; watch for it to be writable
        while answers wait.  False: the client has gone (and is dropped)."""
        if c.sock.fileno() not in self.conns:
            return False
        try:
            n = c.sock.send(c.out)
        except (BlockingIOError, InterruptedError):
            n = 0
        except OSError:
            self._drop(c)
            return False
        if n:
            del c.out[:n]
            c.moved = time.monotonic()
        if c.ended and not c.out:
            self._drop(c)
            return False
        if c.writing != bool(c.out) and not c.ended:
            c.writing = bool(c.out)
            self.transport.want(c.sock.fileno(), writable=c.writing)
        return True

    def _sweep(self) -> None:
        """Close the clients whose answers have waited STALL_MAX seconds without a byte
        taken."""
        now = time.monotonic()
        for c in list(self.conns.values()):
            if c.out and now - c.moved > STALL_MAX:
                log.warning(
                    "admin socket: closed pid %d: no answer taken in %g s", c.pid, STALL_MAX
                )
                self._drop(c)

    def _answer(self, line: bytes) -> dict:
        """The answer to one request line: JSON within bounds, checked, then handled."""
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as e:
            return _error("request", f"not JSON: not UTF-8 (byte {e.start})")
        problem = json_bounds(text, DEPTH_MAX, DIGITS_MAX)
        if problem is not None:
            return _error("request", problem)
        try:
            req = json.loads(text, parse_constant=_no_constant)
        except ValueError as e:
            return _error("request", f"not JSON: {e}")
        try:
            return {"ok": True, "result": self.handle(req)}
        except FabriclabError as e:
            p = e.problems[0] if e.problems else Problem("", str(e))
            return _error(p.where, p.what)
        except Exception as e:  # a bug must cost one request, not the fabric
            op = req.get("op") if isinstance(req, dict) else None
            log.exception("admin request %.40r failed", op)
            return _error("internal", f"{type(e).__name__}: {e}")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _error(where: str, what: str) -> dict:
    return {"ok": False, "where": where, "what": what}


def call(path: Path, request: dict, timeout: float = 600.0):
    """Send one request to the admin socket at ``path``; its result, or the error it
    answered as an InputError."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        try:
            s.connect(os.fspath(path))
        except OSError as e:
            raise InputError(
                [Problem(str(path), f"cannot reach the fabric's admin socket: {e.strerror}")]
            ) from None
        buf = bytearray()
        try:
            s.sendall((json.dumps(request) + "\n").encode())
            while b"\n" not in buf:
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
        except TimeoutError:
            raise InputError(
                [Problem(str(path), f"no answer from the fabric in {timeout:g} s")]
            ) from None
        except OSError:  # reset or broken pipe: the fabric went away mid-request
            buf.clear()
    finally:
        s.close()
    try:
        answer = json.loads(bytes(buf).split(b"\n", 1)[0])
    except ValueError:
        raise InputError([Problem(str(path), "the fabric closed the connection")]) from None
    if not answer.get("ok"):
        raise InputError([Problem(answer.get("where", ""), answer.get("what", "failed"))])
    return answer.get("result")


def request(name: str, req: dict, timeout: float = 600.0):
    """One request to the running fabric ``name`` (NotRunning when it is not up)."""
    Instance.load(name)
    return call(admin_path(state_dir(), name), req, timeout)
