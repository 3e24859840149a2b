"""Numbers the MAD protocol is made of: management classes, methods, attribute ids,
statuses and trap numbers (IBA Vol. 1, chapters 13, 14 and 16)."""

from __future__ import annotations

from enum import IntEnum


class MgmtClass(IntEnum):
    """Management classes (13.4.4) the fabric serves or forwards."""

    SMI = 0x01  # LID-routed SMP
    SA = 0x03
    PERF = 0x04
    SMI_DIRECT = 0x81  # directed-route SMP


class Method(IntEnum):
    """MAD methods (13.4.5)."""

    GET = 0x01
    SET = 0x02
    SEND = 0x03
    TRAP = 0x05
    REPORT = 0x06
    TRAP_REPRESS = 0x07
    GET_RESPONSE = 0x81  # the R bit plus GET


class Attr(IntEnum):
    """Attribute ids of the SMA (14.2.5) and the PMA (16.1.2)."""

    # SMA (14.2.5)
    NOTICE = 0x0002
    NODE_DESC = 0x0010
    NODE_INFO = 0x0011
    SWITCH_INFO = 0x0012
    GUID_INFO = 0x0014
    PORT_INFO = 0x0015
    PKEY_TABLE = 0x0016
    SL_TO_VL = 0x0017
    VL_ARB = 0x0018
    LINEAR_FDB = 0x0019
    MCAST_FDB = 0x001B
    SM_INFO = 0x0020
    MLNX_EXT_PORT_INFO = 0xFF90
    # PMA (16.1.2)
    CLASS_PORT_INFO = 0x0001
    PORT_SAMPLES_CONTROL = 0x0010
    PORT_SAMPLES_RESULT = 0x0011
    PORT_COUNTERS = 0x0012
    PORT_RCV_ERROR_DETAILS = 0x0015
    PORT_XMIT_DISCARD_DETAILS = 0x0016
    PORT_COUNTERS_EXT = 0x001D


# MAD status (13.4.7): bits 2-4 carry the "invalid field" code.
STATUS_OK = 0x0000
STATUS_BAD_VERSION = 1 << 2
STATUS_METHOD_UNSUPPORTED = 2 << 2
STATUS_METHOD_ATTR_UNSUPPORTED = 3 << 2
STATUS_INVALID_FIELD = 7 << 2

# Traps the fabric raises (14.2.5.1)
TRAP_LINK_STATE_CHANGE = 128
TRAP_CAPABILITY_MASK_CHANGE = 144
TRAP_BAD_PKEY = 257  # a CA discarded a packet for its P_Key
TRAP_BAD_PKEY_SWITCH = 259  # a switch external port did
# Notice.Type of each (14.2.5.1): a link state change is urgent, a capability change
# informational, a bad P_Key a security notice.
NOTICE_URGENT, NOTICE_SECURITY, NOTICE_INFORMATIONAL = 1, 2, 4
TRAP_TYPES = {
    TRAP_LINK_STATE_CHANGE: NOTICE_URGENT,
    TRAP_CAPABILITY_MASK_CHANGE: NOTICE_INFORMATIONAL,
    TRAP_BAD_PKEY: NOTICE_SECURITY,
    TRAP_BAD_PKEY_SWITCH: NOTICE_SECURITY,
}
