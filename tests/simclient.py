"""A small ibsim-protocol client, for tests that need to send MADs (or garbage) by hand.

It speaks what libumad2sim.so speaks (see fabriclab.ib.simwire): bind ``<name>:ctl<pid>``
and ``<name>:in<pid>``, CONNECT, then exchange 288-byte sim_requests.  A test process
can open one client (the pid is the key); ``key`` makes up another.
"""

from __future__ import annotations

import os
import random
import socket

from fabriclab.ib import simwire
from fabriclab.ib.mad.layouts import DR_SMP_HEADER, MAD_HEADER


class SimClient:
    def __init__(
        self, name: str, nodeid: str = "", *, key: int | None = None, timeout: float = 5.0
    ):
        self.name = name
        self.key = key if key is not None else os.getpid()
        self.ctl = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.ctl.settimeout(timeout)
        self.ctl.bind(simwire.sockname(name, f"ctl{self.key}"))
        self.ctl.connect(simwire.sockname(name, "ctl"))
        self.data = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.data.settimeout(timeout)
        self.data.bind(simwire.sockname(name, f"in{self.key}"))
        info = simwire.CLIENT_INFO.pack(self.key, 0, 0, nodeid.encode())
        reply = self.control(simwire.CTL_CONNECT, info, clientid=0)
        if reply.type == simwire.CTL_ERROR:
            self.close()
            raise ConnectionError(f"server refused {nodeid!r}")
        self.id, _qp, _issm, attached = simwire.CLIENT_INFO.unpack(
            reply.data[: simwire.CLIENT_INFO.size]
        )
        self.attached = simwire.cstring(attached)
        self.data.connect(simwire.sockname(name, f"out{self.id}"))

    def control(self, type_: int, data: bytes = b"", clientid: int | None = None) -> simwire.Ctl:
        cid = self.id if clientid is None else clientid
        self.ctl.send(simwire.Ctl(cid, type_, len(data), data).encode())
        return simwire.Ctl.decode(self.ctl.recv(4096))

    def send_raw(self, raw: bytes) -> None:
        self.data.send(raw)

    def recv_raw(self) -> bytes:
        return self.data.recv(4096)

    def request(self, mad: bytes, dlid: int = 0xFFFF, dqp: int = 0) -> tuple[int, bytes]:
        """Send one MAD; the answer's sim status and MAD."""
        self.send_raw(simwire.REQUEST.pack(dlid, 0, dqp, 0, 0, len(mad), mad.ljust(256, b"\0")))
        _dlid, _slid, _dqp, _sqp, status, _len, reply = simwire.REQUEST.unpack(self.recv_raw())
        return status, reply

    def close(self) -> None:
        try:
            if hasattr(self, "id"):
                self.control(simwire.CTL_DISCONNECT)
        except OSError:
            pass
        self.ctl.close()
        self.data.close()

    def __enter__(self) -> SimClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class UdpSimClient(SimClient):
    """The same in remote mode: control and data sockets are UDP sockets on ``host``, and
    the client's key is its data port (``key`` claims another)."""

    def __init__(
        self,
        server: tuple[str, int],
        nodeid: str = "",
        *,
        host: str = "127.0.0.1",
        key: int | None = None,
        timeout: float = 5.0,
    ):
        self.ctl = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.ctl.settimeout(timeout)
        self.ctl.bind((host, 0))
        self.ctl.connect(server)
        self.data = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.data.settimeout(timeout)
        self.data.bind((host, 0))
        self.key = key if key is not None else self.data.getsockname()[1]
        info = simwire.CLIENT_INFO.pack(self.key, 0, 0, nodeid.encode())
        reply = self.control(simwire.CTL_CONNECT, info, clientid=0)
        if reply.type == simwire.CTL_ERROR:
            self.close()
            raise ConnectionError(f"server refused {nodeid!r}")
        self.id, _qp, _issm, attached = simwire.CLIENT_INFO.unpack(
            reply.data[: simwire.CLIENT_INFO.size]
        )
        self.attached = simwire.cstring(attached)
        self.data.connect((server[0], server[1] + 1 + self.id))


def dr_smp(
    attr: int, path: list[int], *, method: int = 1, mod: int = 0, tid: int = 1, data: bytes = b""
) -> bytes:
    """A directed-route SMP along ``path`` (egress ports, the first being the CA's own)."""
    hdr = DR_SMP_HEADER.pack(
        {
            "BaseVersion": 1,
            "MgmtClass": 0x81,
            "ClassVersion": 1,
            "R": method >> 7,
            "Method": method & 0x7F,
            "D": method >> 7,
            "HopCount": len(path),
            "TransactionID": tid,
            "AttributeID": attr,
            "AttributeModifier": mod,
            "DrSLID": 0xFFFF,
            "DrDLID": 0xFFFF,
        }
    )
    initial = bytes([0, *path]).ljust(64, b"\0")
    return hdr + data.ljust(64, b"\0")[:64] + initial + bytes(64)


def lid_mad(
    mclass: int,
    attr: int,
    *,
    method: int = 1,
    mod: int = 0,
    tid: int = 1,
    data: bytes = b"",
    class_version: int = 1,
) -> bytes:
    """A LID-routed SMP (class 1) or GMP (PMA class 4 ...), data at byte 64."""
    hdr = MAD_HEADER.pack(
        {
            "BaseVersion": 1,
            "MgmtClass": mclass,
            "ClassVersion": class_version,
            "Method": method,
            "TransactionID": tid,
            "AttributeID": attr,
            "AttributeModifier": mod,
        }
    )
    return hdr + bytes(40) + data.ljust(192, b"\0")[:192]


def fuzz_requests(rng: random.Random, n: int) -> list[bytes]:
    """Datagrams a broken client might send: wrong sizes, random bytes, MADs with bad
    versions, impossible directed routes, unknown classes and attributes.  (No Sets:
    a valid Set would change the fabric, which is not what this is about.)"""
    out = []
    for i in range(n):
        k = rng.randrange(8)
        if k == 0:
            out.append(rng.randbytes(rng.randrange(0, 600)))
        elif k == 1:
            out.append(rng.randbytes(simwire.REQUEST_SIZE))
        else:
            path = [rng.randrange(0, 70) for _ in range(rng.randrange(0, 70))][:63]
            mad = bytearray(
                dr_smp(
                    rng.choice(
                        [0x10, 0x11, 0x15, 0x19, 0x1B, 0x20, 0x2, 0xFF90, rng.randrange(65536)]
                    ),
                    path or [1],
                    method=rng.choice([1, 3, 5, 7, 0x81]),
                    mod=rng.randrange(1 << 32),
                    tid=i,
                )
            )
            if k == 3:
                mad[0] = rng.randrange(256)  # base version
            if k == 4:
                mad[1] = rng.randrange(256)  # class
            if k == 5:
                mad[4:8] = rng.randbytes(4)  # D bit, hop pointer and count
            dlid = rng.choice([0xFFFF, 0, rng.randrange(65536)])
            out.append(simwire.REQUEST.pack(dlid, 0, rng.randrange(3), 0, 0, 256, bytes(mad)))
    return out
