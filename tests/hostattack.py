"""Raw clients of the host protocol that misbehave, for the hardening tests: each runs
as its own process (``python hostattack.py KIND ...``), another uid's when started
through setpriv, and needs nothing but the standard library (another uid may not read
the project's tree).  The frame layouts are fabriclab.ib.hostwire's and umad's.

- ``silent ADDRESS N``: hold N connections that never say HELLO, opening a new one for
  each the server closes, until standard input closes; prints ``ready K`` once K of
  them are open, or ``refused ENAME`` when the kernel refuses the connect itself (a
  socket file out of reach: EACCES, ENOENT) and goes on trying; at the end prints
  ``held at most K``.
- ``quiet ADDRESS``: one connection that says nothing; prints one JSON line: the
  connect's error name (or null), what the server sent unasked (error and text) and
  whether it then hung up.
- ``hijack ADDRESS TRAY``: open a umad connection on TRAY's first port, try to remove
  every agent of connections 0..63 and to take the SA class (0x03, version 2) on that
  port, one method at a time; prints one JSON line (what the server granted) and holds
  the connection until standard input closes.
- ``umads ADDRESS TRAY N``: open up to N umad connections on TRAY's first port; prints
  how many the server granted and holds them until standard input closes.
"""

from __future__ import annotations

import errno
import json
import os
import select
import socket
import struct
import sys
import time

MAGIC, VERSION = 0x31484C46, 1
UMAD, REGISTER, UNREGISTER = 1, 4, 5
HELLO = struct.Struct("<IHHIIII64s")
REPLY = struct.Struct("<IiII")
REG_REQ2 = struct.Struct("<IIBBHI16sIB3x")  # struct ib_user_mad_reg_req2
SA_CLASS, SA_VERSION = 0x03, 2
LIMIT = 120.0  # seconds an attack lasts at most


def _address(text: str) -> str | bytes:
    return bytes.fromhex(text[1:]) if text.startswith("@") else text


def _hello(addr, kind: int, tray: str = "", index: int = 0, token: int = 0, extra=b""):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(10)
    s.connect(addr)
    s.send(HELLO.pack(MAGIC, VERSION, kind, os.getpid(), index, token, 0, tray.encode()) + extra)
    r = s.recv(8192)
    if len(r) < REPLY.size:
        s.close()
        return None, -1, 0
    _m, err, tok, _v = REPLY.unpack_from(r)
    return s, err, tok


def _stdin_closed(timeout: float) -> bool:
    r, _, _ = select.select([sys.stdin], [], [], timeout)
    return bool(r) and not sys.stdin.buffer.read1(1)


def silent(addr, n: int) -> None:
    conns: list[socket.socket] = []
    said = False
    most = 0
    end = time.monotonic() + LIMIT
    while time.monotonic() < end:
        for c in select.select(conns, [], [], 0)[0] if conns else []:
            conns.remove(c)  # the server answered or hung up: another takes its place
            c.close()
        while len(conns) < n:
            c = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_NONBLOCK)
            try:
                c.connect(addr)
            except (PermissionError, FileNotFoundError) as e:  # the kernel said no
                c.close()
                if not said:
                    print(f"refused {errno.errorcode[e.errno]}", flush=True)
                    said = True
                break
            except (BlockingIOError, ConnectionRefusedError, OSError):
                c.close()
                break
            conns.append(c)
        most = max(most, len(conns))
        if not said and len(conns) >= n:
            print(f"ready {len(conns)}", flush=True)
            said = True
        if _stdin_closed(0.05):
            break
    if not said:
        print(f"ready {len(conns)}", flush=True)
    print(f"held at most {most}", flush=True)
    for c in conns:
        c.close()


def quiet(addr) -> None:
    got: dict = {"connect": None, "reply": None, "closed": False}
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(10)
    try:
        s.connect(addr)
    except OSError as e:
        got["connect"] = errno.errorcode.get(e.errno or 0, str(e))
    else:
        try:
            r = s.recv(8192)
            if len(r) >= REPLY.size:
                got["reply"] = [REPLY.unpack_from(r)[1], r[REPLY.size :].decode(errors="replace")]
                r = s.recv(16)
            got["closed"] = r == b""
        except TimeoutError:
            pass
        except ConnectionResetError:
            got["closed"] = True
    s.close()
    print(json.dumps(got), flush=True)


def _hold() -> None:
    end = time.monotonic() + LIMIT
    while time.monotonic() < end and not _stdin_closed(0.5):
        pass


def umads(addr, tray: str, n: int) -> None:
    held = []
    for _ in range(n):
        s, err, _t = _hello(addr, UMAD, tray, 0)
        if s is not None and err == 0:
            held.append(s)
        elif s is not None:
            s.close()
    print(f"granted {len(held)}", flush=True)
    _hold()
    for s in held:
        s.close()


def hijack(addr, tray: str) -> None:
    mine, err, token = _hello(addr, UMAD, tray, 0)
    got: dict = {"umad": err, "unregistered": [], "registered": []}
    if mine is not None and err == 0:
        for tok in range(64):
            for aid in range(32):
                s, e, _t = _hello(addr, UNREGISTER, index=aid, token=tok)
                if s is not None:
                    s.close()
                if e == 0:
                    got["unregistered"].append([tok, aid])
        for aid, method in enumerate(range(1, 32)):
            mask = (1 << method).to_bytes(16, "little")
            req = REG_REQ2.pack(aid, 1, SA_CLASS, SA_VERSION, 0, 0, mask, 0, 1)
            s, e, _t = _hello(addr, REGISTER, token=token, extra=req)
            if s is not None:
                s.close()
            if e == 0:
                got["registered"].append(method)
    print(json.dumps(got), flush=True)
    _hold()
    if mine is not None:
        mine.close()


if __name__ == "__main__":
    what, where = sys.argv[1], _address(sys.argv[2])
    if what == "silent":
        silent(where, int(sys.argv[3]))
    elif what == "quiet":
        quiet(where)
    elif what == "umads":
        umads(where, sys.argv[3], int(sys.argv[4]))
    else:
        hijack(where, sys.argv[3])
