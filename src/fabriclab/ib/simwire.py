"""The ibsim wire protocol, as Debian's libumad2sim.so speaks it.

A tool run with ``LD_PRELOAD=libumad2sim.so`` talks to the fabric over datagram sockets
(ibsim's ``include/ibsim.h``, ``umad2sim/sim_client.c``):

- a control socket: the server binds ``<name>:ctl``, the client binds ``<name>:ctl<pid>``
  and exchanges fixed 80-byte ``sim_ctl`` records (connect, disconnect, read its node's
  NodeInfo/PortInfo/P_Keys, set IsSM);
- a data socket per client: the client binds ``<name>:in<pid>``; at connect the server
  gives it a client id and binds ``<name>:out<id>``, and the two connect to each other.
  Every MAD travels as one 288-byte ``sim_request``.

``<name>`` is ``$IBSIM_SOCKNAME`` (default ``sim``), in the Linux abstract socket
namespace.  In remote mode (``$IBSIM_SERVER_NAME``/``$IBSIM_SERVER_PORT``) the same
records go over UDP: the control socket is port P (default 7070), client *i*'s data
socket port P+1+i, and the client's own data port is its id.

Byte order is the clients': the control records are native (little-endian on every
machine fabriclab runs on), the request's LID and QP fields carry the network-order
values umad keeps (a LID is a big-endian 16-bit value in the first two bytes of its
32-bit slot), and the MAD length is big-endian.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import partial

from .mad.view import MAD_SIZE, MadView

DEFAULT_NAME = "sim"
DEFAULT_PORT = 7070
MAGIC = 0xDEADBEEF

# enum SIM_CTL_TYPES
(
    CTL_ERROR,
    CTL_CONNECT,
    CTL_DISCONNECT,
    CTL_GET_PORT,
    CTL_GET_VENDOR,
    CTL_GET_GID,
    CTL_GET_GUID,
    CTL_GET_NODEINFO,
    CTL_GET_PORTINFO,
    CTL_SET_ISSM,
    CTL_GET_PKEYS,
) = range(11)
CTL_NAMES = {
    CTL_ERROR: "error",
    CTL_CONNECT: "connect",
    CTL_DISCONNECT: "disconnect",
    CTL_GET_PORT: "get-port",
    CTL_GET_VENDOR: "get-vendor",
    CTL_GET_GID: "get-gid",
    CTL_GET_GUID: "get-guid",
    CTL_GET_NODEINFO: "get-nodeinfo",
    CTL_GET_PORTINFO: "get-portinfo",
    CTL_SET_ISSM: "set-issm",
    CTL_GET_PKEYS: "get-pkeys",
}

# What umad2sim puts in sim_request.status when a MAD went nowhere: ETIMEDOUT, so the
# tool sees its request time out at once instead of waiting for its retries.
SIM_STATUS_TIMEOUT = 110

CTL_DATA = 64
# struct sim_ctl { u32 magic, clientid, type, len; char data[64]; }
CTL = struct.Struct("<IIII64s")
# struct sim_client_info { u32 id (pid or UDP port), qp, issm; char nodeid[32]; }
CLIENT_INFO = struct.Struct("<III32s")
# struct sim_vendor { u32 vendor_id, vendor_part_id, hw_ver; u64 fw_ver; }
VENDOR = struct.Struct("<III4xQ")
# struct sim_port { u16 lid; u8 state; }
SIM_PORT = struct.Struct("<HB")
# struct sim_request { u32 dlid, slid, dqp, sqp, status; u64 length; char mad[256]; }
REQUEST = struct.Struct(">H2xH2xIII4xQ256s")
REQUEST_SIZE = REQUEST.size  # 288
REQUEST_MAD = REQUEST_SIZE - MAD_SIZE  # where the MAD starts
_ADDRESSES = struct.Struct(">H2xH2xII")  # dlid, slid, dqp, sqp
_SLID = struct.Struct(">H")
_STATUS = struct.Struct(">I")
_STATUS_AT, _SLID_AT = 16, 4


def request(dlid: int, slid: int, mad: bytes, dqp: int = 0, sqp: int = 0) -> bytes:
    """A sim_request carrying ``mad`` (256 bytes) from ``slid`` to ``dlid``."""
    return REQUEST.pack(dlid, slid, dqp, sqp, 0, MAD_SIZE, mad)


class RequestView:
    """The sim_request in ``buf`` (a bytearray the server receives every datagram into):
    its addresses and status, and its MAD (``mad``, a :class:`MadView`).  Like the MAD
    view, its readers and writers are struct functions bound to the buffer once."""

    __slots__ = (
        "_addresses",
        "_clear_status",
        "_turn_mad",
        "addresses",
        "mad",
        "mem",
        "set_slid",
        "set_status",
        "whole",
    )

    def __init__(self, buf: bytearray):
        self.mem = memoryview(buf)
        self.whole = self.mem[:REQUEST_SIZE]  # what is sent back
        self.mad = MadView(buf, REQUEST_MAD)
        # () -> (dlid, slid, dqp, sqp)
        self.addresses = partial(_ADDRESSES.unpack_from, buf, 0)
        # (slid) -> None: the source LID, for a request sent without one
        self.set_slid = partial(_SLID.pack_into, buf, _SLID_AT)
        # (status) -> None: SIM_STATUS_TIMEOUT when the MAD went nowhere
        self.set_status = partial(_STATUS.pack_into, buf, _STATUS_AT)
        self._addresses = partial(_ADDRESSES.pack_into, buf, 0)
        self._turn_mad = self.mad.turn_around
        self._clear_status = self.set_status

    def turn_around(
        self, status: int, directed: bool, dlid: int, slid: int, dqp: int, sqp: int
    ) -> None:
        """Make the request (whose addresses were ``dlid`` ... ``sqp``) its own response
        with MAD status ``status``: the MAD turned around, the addresses swapped and the
        delivery status cleared."""
        self._turn_mad(status, directed)
        self._addresses(slid, dlid, sqp, dqp)
        self._clear_status(0)


@dataclass
class Ctl:
    """A control record (``struct sim_ctl``)."""

    clientid: int
    type: int
    length: int
    data: bytes

    @classmethod
    def decode(cls, raw: bytes) -> Ctl:
        """A control record; ValueError when it is not one."""
        if len(raw) != CTL.size:
            raise ValueError(f"control record of {len(raw)} bytes (want {CTL.size})")
        magic, clientid, type_, length, data = CTL.unpack(raw)
        if magic != MAGIC:
            raise ValueError(f"bad magic 0x{magic:08x}")
        return cls(clientid, type_, length, data)

    def error(self) -> Ctl:
        """The answer refusing this request: libumad2sim's sim_ctl() fails on it, so the
        tool stops ("ctl error", then "cannot init umad2sim") instead of waiting."""
        return Ctl(self.clientid, CTL_ERROR, self.length, self.data)

    def encode(self) -> bytes:
        """The record's 80 bytes."""
        return CTL.pack(
            MAGIC,
            self.clientid,
            self.type,
            self.length,
            self.data[:CTL_DATA].ljust(CTL_DATA, b"\0"),
        )


def host_guid(guid: int) -> bytes:
    """A GUID as the control records carry it: in the host's byte order, as ibsim copies
    its u64 (little-endian on every machine fabriclab runs on)."""
    return guid.to_bytes(8, "little")


def sockname(name: str, kind: str) -> bytes:
    """An abstract-namespace address as ibsim's ``make_name`` builds it: a NUL, the name,
    and (its length arithmetic counts one byte more) the string's terminating NUL."""
    return b"\0" + f"{name}:{kind}".encode() + b"\0"


def cstring(raw: bytes) -> str:
    """A NUL-terminated C string field as text."""
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")
