"""Capability bits: what a port's SMA (PortInfo.CapabilityMask and CapabilityMask2)
and a node's PMA (ClassPortInfo.CapabilityMask and CapabilityMask2) say they can do."""

from __future__ import annotations

# PortInfo.CapabilityMask bits (14.2.5.6, Table 164)
CAP_IS_SM = 1 << 1
CAP_IS_NOTICE = 1 << 2
CAP_IS_TRAP = 1 << 3
CAP_IS_SL_MAP = 1 << 6
CAP_IS_SYS_IMAGE_GUID = 1 << 11
# IsPKeySwitchExternalPortTrapSupported: a switch sends trap 259 (OpenSM ib_types.h
# IB_PORT_CAP_HAS_PKEY_SW_EXT_PORT_TRAP)
CAP_IS_PKEY_SW_EXT_PORT_TRAP = 1 << 12
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
