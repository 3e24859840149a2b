"""A MAD read and edited where it lies, for a server that answers a request in the buffer
it received it in (as an agent turns a MAD around): the header fields a MAD is routed
by, the requester noted in the TransactionID, a directed route's two paths, the
attribute data, and the request turned into its response with a status.  And a trap (a
Notice) built whole.

Offsets are the layouts' (:mod:`.layouts`); the header reads the common MAD header and a
directed-route SMP's routing fields in one go (13.4.2, 14.2.1.2).
"""

from __future__ import annotations

import struct
from functools import partial

from .consts import TRAP_BAD_PKEY, TRAP_TYPES, Attr, Method, MgmtClass
from .layouts import (
    DR_INITIAL_PATH,
    DR_RETURN_PATH,
    DR_SMP_HEADER,
    GMP_DATA,
    GMP_DATA_SIZE,
    MAD_HEADER,
    NOTICE,
    NOTICE_BAD_PKEY,
    SMP_DATA,
    SMP_DATA_SIZE,
)

MAD_SIZE = 256
# What MadView.header() returns, in this order.  For a MAD that is not a directed-route
# SMP the last five mean other things and are to be ignored.
HEADER_FIELDS = (
    "BaseVersion",
    "MgmtClass",
    "R",
    "Method",
    "TransactionID",
    "AttributeID",
    "AttributeModifier",
    "D",
    "HopPointer",
    "HopCount",
    "DrSLID",
    "DrDLID",
)
# TransactionID bits 48-63 are the requester's own (ibsim notes its client id there, and
# the kernel's MAD layer its agent's): a response carries them back to it.
REQUESTER_SHIFT = 48
_U16 = struct.Struct(">H")
_DIRECTION = 0x8000  # a directed-route SMP's D bit, above its 15-bit status (14.2.1.2)
_GET_RESPONSE = int(Method.GET_RESPONSE)
_PATH_SIZE = 64


class MadView:
    """The MAD at ``offset`` of ``buf`` (a bytearray the caller reuses for every MAD).

    Its field readers and writers are bound to the buffer once (``functools.partial``
    over the codec's and ``struct``'s own functions), so a call costs what the bare
    struct call costs: the server's per-MAD path is made of them."""

    __slots__ = (
        "_method",
        "_status",
        "buf",
        "gmp_data",
        "header",
        "initial_path",
        "mem",
        "note_requester",
        "return_path",
        "smp_data",
    )

    def __init__(self, buf: bytearray, offset: int = 0):
        self.buf = buf
        self.mem = mem = memoryview(buf)
        # () -> the HEADER_FIELDS values, one integer conversion for all of them
        self.header = partial(DR_SMP_HEADER.getter(*HEADER_FIELDS, offset=offset), mem)
        # (client id) -> None: the requester, in TransactionID bits 48-63
        self.note_requester = partial(_U16.pack_into, buf, offset + 8)
        # Where the rest lies, as slices of the buffer (a subscript is cheaper than any
        # call): a directed route's initial and return paths, an SMP's attribute (64
        # bytes) and a GMP's (192 bytes).
        initial, back = offset + DR_INITIAL_PATH, offset + DR_RETURN_PATH
        self.initial_path = slice(initial, initial + _PATH_SIZE)
        self.return_path = slice(back, back + _PATH_SIZE)
        self.smp_data = slice(offset + SMP_DATA, offset + SMP_DATA + SMP_DATA_SIZE)
        self.gmp_data = slice(offset + GMP_DATA, offset + GMP_DATA + GMP_DATA_SIZE)
        self._method = offset + 3
        self._status = partial(_U16.pack_into, buf, offset + 4)

    def turn_around(self, status: int, directed: bool) -> None:
        """Make the request its own response: GetResp (the answer to a Get or a Set),
        with ``status`` (a directed-route SMP's with the D bit: it travels back)."""
        self.buf[self._method] = _GET_RESPONSE
        self._status(_DIRECTION | status if directed else status)


def requester(tid: int) -> int:
    """The requester a TransactionID names (see REQUESTER_SHIFT)."""
    return tid >> REQUESTER_SHIFT


def trap(tid: int, number: int, issuer_lid: int, producer: int, **details: int) -> bytes:
    """A Trap(Notice) SMP (14.2.5.1), LID-routed, for generic trap ``number`` from the port
    at ``issuer_lid`` of a node of type ``producer``; ``details`` are the Notice's
    trap-specific fields (for trap 128 NoticeDataLID, for 144 NoticeDataTrap144LID and
    NoticeDataTrap144CapMask)."""
    header = MAD_HEADER.pack(
        {
            "BaseVersion": 1,
            "MgmtClass": MgmtClass.SMI,
            "ClassVersion": 1,
            "Method": Method.TRAP,
            "TransactionID": tid,
            "AttributeID": Attr.NOTICE,
        }
    )
    layout = NOTICE_BAD_PKEY if number == TRAP_BAD_PKEY else NOTICE
    notice = layout.pack(
        {
            "NoticeIsGeneric": 1,
            "NoticeType": TRAP_TYPES[number],
            "NoticeProducerType": producer,
            "NoticeTrapNumber": number,
            "NoticeIssuerLID": issuer_lid,
            **details,
        }
    )
    mad = header.ljust(SMP_DATA, b"\0") + notice
    return mad.ljust(MAD_SIZE, b"\0")
