"""Numbers the MAD protocol is made of (IBA Vol. 1, chapters 13, 14 and 16)."""

from __future__ import annotations

from enum import IntEnum


class MgmtClass(IntEnum):
    SMI = 0x01  # LID-routed SMP
    SA = 0x03
    PERF = 0x04
    SMI_DIRECT = 0x81  # directed-route SMP


class Method(IntEnum):
    GET = 0x01
    SET = 0x02
    SEND = 0x03
    TRAP = 0x05
    REPORT = 0x06
    TRAP_REPRESS = 0x07
    GET_RESPONSE = 0x81  # the R bit plus GET


class Attr(IntEnum):
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

# What umad2sim puts in sim_request.status when a MAD went nowhere: ETIMEDOUT, so the
# tool sees its request time out at once instead of waiting for its retries.
SIM_STATUS_TIMEOUT = 110

PERMISSIVE_LID = 0xFFFF


class PortState(IntEnum):
    NOP = 0
    DOWN = 1
    INIT = 2
    ARMED = 3
    ACTIVE = 4


class PhysState(IntEnum):
    NOP = 0
    SLEEP = 1
    POLLING = 2
    DISABLED = 3
    TRAINING = 4
    LINKUP = 5
    ERROR_RECOVERY = 6


class NodeTypeCode(IntEnum):
    CA = 1
    SWITCH = 2
    ROUTER = 3


# PortInfo.CapabilityMask bits (14.2.5.6, Table 164)
CAP_IS_SM = 1 << 1
CAP_IS_NOTICE = 1 << 2
CAP_IS_TRAP = 1 << 3
CAP_IS_SL_MAP = 1 << 6
CAP_IS_SYS_IMAGE_GUID = 1 << 11
CAP_IS_CABLE_INFO = 1 << 13
CAP_IS_EXT_SPEEDS = 1 << 14
CAP_IS_CAP_MASK2 = 1 << 15
CAP_IS_COMM_MGT = 1 << 16
CAP_IS_VENDOR_CLASS = 1 << 20
CAP_IS_CAP_MASK_NOTICE = 1 << 22
CAP_IS_LINK_RT_LATENCY = 1 << 24
CAP_IS_CLIENT_REREG = 1 << 25
CAP_IS_OTHER_LOCAL_CHANGES_NOTICE = 1 << 26
CAP_IS_MCAST_PKEY_TRAP_SUPPRESS = 1 << 29
CAP_IS_HIERARCHY_INFO = 1 << 31

# PortInfo.CapabilityMask2 bits
CAP2_IS_LINK_WIDTH_2X = 1 << 4
CAP2_IS_LINK_SPEED_HDR = 1 << 5
CAP2_IS_LINK_SPEED_NDR = 1 << 10
CAP2_IS_EXT_SPEEDS_2 = 1 << 11
CAP2_IS_LINK_SPEED_XDR = 1 << 12

# ClassPortInfo.CapabilityMask of the PMA (16.1.3.1)
PM_ALL_PORT_SELECT = 1 << 8
PM_EXT_WIDTH_SUPPORTED = 1 << 9
PM_EXT_WIDTH_NOIETF = 1 << 10
PM_SAMPLES_ONLY = 1 << 11
PM_XMIT_WAIT = 1 << 12
PM_IS_QP1_DROP = 1 << 15
# ClassPortInfo.CapabilityMask2 of the PMA
PM2_ADDL_PORT_COUNTERS_EXT = 1 << 1

# Traps the fabric raises (14.2.5.1)
TRAP_LINK_STATE_CHANGE = 128
TRAP_CAPABILITY_MASK_CHANGE = 144
