"""A small ibsim-protocol client, for tests that need to send MADs (or garbage) by hand.

It speaks what libumad2sim.so speaks (see fabriclab.sim.wire): bind ``<name>:ctl<pid>``
and ``<name>:in<pid>``, CONNECT, then exchange 288-byte sim_requests.  A test process
can open one client (the pid is the key); ``key`` makes up another.
"""

from __future__ import annotations

import os
import socket

from fabriclab.sim import wire
from fabriclab.sim.mad.layouts import DR_SMP_HEADER, MAD_HEADER


class SimClient:
    def __init__(self, name: str, nodeid: str = "", *, key: int | None = None,
                 timeout: float = 5.0):
        self.name = name
        self.key = key if key is not None else os.getpid()
        self.ctl = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.ctl.settimeout(timeout)
        self.ctl.bind(wire.sockname(name, f"ctl{self.key}"))
        self.ctl.connect(wire.sockname(name, "ctl"))
        self.data = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.data.settimeout(timeout)
        self.data.bind(wire.sockname(name, f"in{self.key}"))
        info = wire.CLIENT_INFO.pack(self.key, 0, 0, nodeid.encode())
        reply = self.control(wire.CTL_CONNECT, info, clientid=0)
        if reply.type == wire.CTL_ERROR:
            self.close()
            raise ConnectionError(f"server refused {nodeid!r}")
        self.id, _qp, _issm, attached = wire.CLIENT_INFO.unpack(reply.data[:wire.CLIENT_INFO.size])
        self.attached = wire.cstring(attached)
        self.data.connect(wire.sockname(name, f"out{self.id}"))

    def control(self, type_: int, data: bytes = b"", clientid: int | None = None) -> wire.Ctl:
        cid = self.id if clientid is None else clientid
        self.ctl.send(wire.Ctl(cid, type_, len(data), data).encode())
        return wire.Ctl.decode(self.ctl.recv(4096))

    def send_raw(self, raw: bytes) -> None:
        self.data.send(raw)

    def recv_raw(self) -> bytes:
        return self.data.recv(4096)

    def request(self, mad: bytes, dlid: int = 0xFFFF, dqp: int = 0) -> tuple[int, bytes]:
        """Send one MAD; the answer's sim status and MAD."""
        self.send_raw(wire.REQUEST.pack(dlid, 0, dqp, 0, 0, len(mad), mad.ljust(256, b"\0")))
        _dlid, _slid, _dqp, _sqp, status, _len, reply = wire.REQUEST.unpack(self.recv_raw())
        return status, reply

    def close(self) -> None:
        try:
            if hasattr(self, "id"):
                self.control(wire.CTL_DISCONNECT)
        except OSError:
            pass
        self.ctl.close()
        self.data.close()

    def __enter__(self) -> "SimClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def dr_smp(attr: int, path: list[int], *, method: int = 1, mod: int = 0, tid: int = 1,
           data: bytes = b"") -> bytes:
    """A directed-route SMP along ``path`` (egress ports, the first being the CA's own)."""
    hdr = DR_SMP_HEADER.pack({"BaseVersion": 1, "MgmtClass": 0x81, "ClassVersion": 1,
                              "R": method >> 7, "Method": method & 0x7F, "D": method >> 7,
                              "HopCount": len(path), "TransactionID": tid,
                              "AttributeID": attr, "AttributeModifier": mod,
                              "DrSLID": 0xFFFF, "DrDLID": 0xFFFF})
    initial = bytes([0, *path]).ljust(64, b"\0")
    return hdr + data.ljust(64, b"\0")[:64] + initial + bytes(64)


def lid_mad(mclass: int, attr: int, *, method: int = 1, mod: int = 0, tid: int = 1,
            data: bytes = b"", class_version: int = 1) -> bytes:
    """A LID-routed SMP (class 1) or GMP (PMA class 4 ...), data at byte 64."""
    hdr = MAD_HEADER.pack({"BaseVersion": 1, "MgmtClass": mclass, "ClassVersion": class_version,
                           "Method": method, "TransactionID": tid, "AttributeID": attr,
                           "AttributeModifier": mod})
    return hdr + bytes(40) + data.ljust(192, b"\0")[:192]
