"""Every MAD structure the fabric server reads or writes, described once as data.

Offsets and widths are the InfiniBand Architecture Specification's (Vol. 1: 13.4 MAD
header, 14.2 SMPs and SMA attributes, 16.1 PMA attributes), cross-checked against
libibmad's ``fields.c``; names are libibmad's, so perfquery's and smpquery's dumps use
the same words.  Fields a tool never needs (reserved bits) are simply left out.
"""

from __future__ import annotations

from .codec import Layout

# --- headers ------------------------------------------------------------------------

# 13.4.2: the common MAD header, first 24 bytes of every MAD.
MAD_HEADER = Layout(
    "MadHeader",
    24,
    [
        ("BaseVersion", 0, 8),
        ("MgmtClass", 8, 8),
        ("ClassVersion", 16, 8),
        ("R", 24, 1),
        ("Method", 25, 7),
        ("Status", 32, 16),
        ("ClassSpecific", 48, 16),
        ("TransactionID", 64, 64),
        ("AttributeID", 128, 16),
        ("AttributeModifier", 160, 32),
    ],
)

# 14.2.1.2: a directed-route SMP's header (the D bit and 15-bit status replace the common
# Status; hop pointer and count live in ClassSpecific), up to the start of its data.
DR_SMP_HEADER = Layout(
    "DrSmpHeader",
    64,
    [
        ("BaseVersion", 0, 8),
        ("MgmtClass", 8, 8),
        ("ClassVersion", 16, 8),
        ("R", 24, 1),
        ("Method", 25, 7),
        ("D", 32, 1),
        ("Status", 33, 15),
        ("HopPointer", 48, 8),
        ("HopCount", 56, 8),
        ("TransactionID", 64, 64),
        ("AttributeID", 128, 16),
        ("AttributeModifier", 160, 32),
        ("M_Key", 192, 64),
        ("DrSLID", 256, 16),
        ("DrDLID", 272, 16),
    ],
)

SMP_DATA = 64  # byte offset of an SMP's attribute (64 bytes) in the 256-byte MAD
SMP_DATA_SIZE = 64
DR_INITIAL_PATH = 128  # byte offsets of the directed route's two 64-byte paths
DR_RETURN_PATH = 192
GMP_DATA = 64  # PMA attributes start after 40 reserved bytes (16.1.1)
GMP_DATA_SIZE = 192

# --- SMA attributes (14.2.5) ---------------------------------------------------------

NODE_INFO = Layout(
    "NodeInfo",
    64,
    [
        ("BaseVers", 0, 8),
        ("ClassVers", 8, 8),
        ("NodeType", 16, 8),
        ("NumPorts", 24, 8),
        ("SystemGuid", 32, 64),
        ("Guid", 96, 64),
        ("PortGuid", 160, 64),
        ("PartCap", 224, 16),
        ("DevId", 240, 16),
        ("Revision", 256, 32),
        ("LocalPort", 288, 8),
        ("VendorId", 296, 24),
    ],
)

SWITCH_INFO = Layout(
    "SwitchInfo",
    64,
    [
        ("LinearFdbCap", 0, 16),
        ("RandomFdbCap", 16, 16),
        ("McastFdbCap", 32, 16),
        ("LinearFdbTop", 48, 16),
        ("DefPort", 64, 8),
        ("DefMcastPrimPort", 72, 8),
        ("DefMcastNotPrimPort", 80, 8),
        ("LifeTime", 88, 5),
        ("StateChange", 93, 1),
        ("OptSLtoVLMapping", 94, 2),
        ("LidsPerPort", 96, 16),
        ("PartEnforceCap", 112, 16),
        ("InboundPartEnf", 128, 1),
        ("OutboundPartEnf", 129, 1),
        ("FilterRawInbound", 130, 1),
        ("FilterRawOutbound", 131, 1),
        ("EnhancedPort0", 132, 1),
        ("MulticastFDBTop", 144, 16),
    ],
)

# 14.2.5.5: a block of 8 port GUIDs (the attribute modifier names the block); GUID 0 of
# block 0 is the port's own.  libibmad names only the first (GUID0).
GUID_INFO = Layout("GUIDInfo", 64, [(f"GUID{i}", 64 * i, 64) for i in range(8)])
GUIDS_PER_BLOCK = 8

PORT_INFO = Layout(
    "PortInfo",
    64,
    [
        ("Mkey", 0, 64),
        ("GidPrefix", 64, 64),
        ("Lid", 128, 16),
        ("SMLid", 144, 16),
        ("CapMask", 160, 32),
        ("DiagCode", 192, 16),
        ("MkeyLeasePeriod", 208, 16),
        ("LocalPort", 224, 8),
        ("LinkWidthEnabled", 232, 8),
        ("LinkWidthSupported", 240, 8),
        ("LinkWidthActive", 248, 8),
        ("LinkSpeedSupported", 256, 4),
        ("LinkState", 260, 4),
        ("PhysLinkState", 264, 4),
        ("LinkDownDefState", 268, 4),
        ("ProtectBits", 272, 2),
        ("LMC", 277, 3),
        ("LinkSpeedActive", 280, 4),
        ("LinkSpeedEnabled", 284, 4),
        ("NeighborMTU", 288, 4),
        ("SMSL", 292, 4),
        ("VLCap", 296, 4),
        ("InitType", 300, 4),
        ("VLHighLimit", 304, 8),
        ("VLArbHighCap", 312, 8),
        ("VLArbLowCap", 320, 8),
        ("InitReply", 328, 4),
        ("MtuCap", 332, 4),
        ("VLStallCount", 336, 3),
        ("HoqLife", 339, 5),
        ("OperVLs", 344, 4),
        ("PartEnforceInb", 348, 1),
        ("PartEnforceOutb", 349, 1),
        ("FilterRawInb", 350, 1),
        ("FilterRawOutb", 351, 1),
        ("MkeyViolations", 352, 16),
        ("PkeyViolations", 368, 16),
        ("QkeyViolations", 384, 16),
        ("GuidCap", 400, 8),
        ("ClientReregister", 408, 1),
        ("McastPkeyTrapSuppressionEnabled", 409, 2),
        ("SubnetTimeout", 411, 5),
        ("RespTimeVal", 419, 5),
        ("LocalPhysErr", 424, 4),
        ("OverrunErr", 428, 4),
        ("MaxCreditHint", 432, 16),
        ("LinkSpeedExtActive2", 449, 2),  # XDR (IBA 1.7)
        ("LinkSpeedExtSupported2", 451, 2),
        ("LinkSpeedExtEnabled2", 453, 3),
        ("RoundTrip", 456, 24),
        ("CapabilityMask2", 480, 16),
        ("LinkSpeedExtActive", 496, 4),
        ("LinkSpeedExtSupported", 500, 4),
        ("LinkSpeedExtEnabled", 507, 5),
    ],
)

# Mellanox vendor attribute 0xFF90 (FDR10 lives here).
MLNX_EXT_PORT_INFO = Layout(
    "MlnxExtPortInfo",
    64,
    [
        ("StateChangeEnable", 24, 8),
        ("LinkSpeedSupported", 56, 8),
        ("LinkSpeedEnabled", 88, 8),
        ("LinkSpeedActive", 120, 8),
    ],
)

SM_INFO = Layout(
    "SMInfo",
    64,
    [
        ("SmInfoGuid", 0, 64),
        ("SmInfoKey", 64, 64),
        ("SmActivity", 128, 32),
        ("SmPriority", 160, 4),
        ("SmState", 164, 4),
    ],
)

# 14.2.5.1 Notice: the trap payload.  Data details differ per trap (their fields overlap);
# those of the traps the fabric sends (128: link state change, 144: capability mask
# change, 257: bad P_Key) are spelled out.
_NOTICE_HEAD = [
    ("NoticeIsGeneric", 0, 1),
    ("NoticeType", 1, 7),
    ("NoticeProducerType", 8, 24),
    ("NoticeTrapNumber", 32, 16),
    ("NoticeIssuerLID", 48, 16),
    ("NoticeToggle", 64, 1),
    ("NoticeCount", 65, 15),
]
NOTICE = Layout(
    "Notice",
    64,
    [
        *_NOTICE_HEAD,
        ("NoticeDataLID", 80, 16),  # trap 128: the switch's LID
        ("NoticeDataTrap144LID", 96, 16),
        ("NoticeDataTrap144CapMask", 128, 32),
    ],
)
# trap 257 (Bad P_Key at a CA): the packet's source and destination LIDs and its P_Key
# (OpenSM ib_types.h, ib_mad_notice_attr257_258: rsvd, lid1, lid2, key)
NOTICE_BAD_PKEY = Layout(
    "Notice",
    64,
    [
        *_NOTICE_HEAD,
        ("NoticeDataTrap257LID1", 96, 16),
        ("NoticeDataTrap257LID2", 112, 16),
        ("NoticeDataTrap257Key", 128, 32),
    ],
)

# --- PMA attributes (16.1.3, 16.1.4) -------------------------------------------------

CLASS_PORT_INFO = Layout(
    "ClassPortInfo",
    72,
    [
        ("BaseVersion", 0, 8),
        ("ClassVersion", 8, 8),
        ("CapabilityMask", 16, 16),
        ("CapabilityMask2", 32, 27),
        ("RespTimeVal", 59, 5),
        ("RedirectGID", 64, 128),
        ("RedirectTC", 192, 8),
        ("RedirectSL", 200, 4),
        ("RedirectFL", 204, 20),
        ("RedirectLID", 224, 16),
        ("RedirectPKey", 240, 16),
        ("RedirectQP", 264, 24),
        ("RedirectQKey", 288, 32),
        ("TrapGID", 320, 128),
        ("TrapTC", 448, 8),
        ("TrapSL", 456, 4),
        ("TrapFL", 460, 20),
        ("TrapLID", 480, 16),
        ("TrapPKey", 496, 16),
        ("TrapHL", 512, 8),
        ("TrapQP", 520, 24),
        ("TrapQKey", 544, 32),
    ],
)

PORT_COUNTERS = Layout(
    "PortCounters",
    44,
    [
        ("PortSelect", 8, 8),
        ("CounterSelect", 16, 16),
        ("SymbolErrorCounter", 32, 16),
        ("LinkErrorRecoveryCounter", 48, 8),
        ("LinkDownedCounter", 56, 8),
        ("PortRcvErrors", 64, 16),
        ("PortRcvRemotePhysicalErrors", 80, 16),
        ("PortRcvSwitchRelayErrors", 96, 16),
        ("PortXmitDiscards", 112, 16),
        ("PortXmitConstraintErrors", 128, 8),
        ("PortRcvConstraintErrors", 136, 8),
        ("CounterSelect2", 144, 8),
        ("LocalLinkIntegrityErrors", 152, 4),
        ("ExcessiveBufferOverrunErrors", 156, 4),
        ("QP1Dropped", 160, 16),
        ("VL15Dropped", 176, 16),
        ("PortXmitData", 192, 32),
        ("PortRcvData", 224, 32),
        ("PortXmitPkts", 256, 32),
        ("PortRcvPkts", 288, 32),
        ("PortXmitWait", 320, 32),
    ],
)

PORT_COUNTERS_EXT = Layout(
    "PortCountersExtended",
    184,
    [
        ("PortSelect", 8, 8),
        ("CounterSelect", 16, 16),
        ("CounterSelect2", 32, 32),
        ("PortXmitData", 64, 64),
        ("PortRcvData", 128, 64),
        ("PortXmitPkts", 192, 64),
        ("PortRcvPkts", 256, 64),
        ("PortUnicastXmitPkts", 320, 64),
        ("PortUnicastRcvPkts", 384, 64),
        ("PortMulticastXmitPkts", 448, 64),
        ("PortMulticastRcvPkts", 512, 64),
        # IsAdditionalPortCountersExtendedSupported (ClassPortInfo CapabilityMask2 bit 1)
        ("SymbolErrorCounter", 576, 64),
        ("LinkErrorRecoveryCounter", 640, 64),
        ("LinkDownedCounter", 704, 64),
        ("PortRcvErrors", 768, 64),
        ("PortRcvRemotePhysicalErrors", 832, 64),
        ("PortRcvSwitchRelayErrors", 896, 64),
        ("PortXmitDiscards", 960, 64),
        ("PortXmitConstraintErrors", 1024, 64),
        ("PortRcvConstraintErrors", 1088, 64),
        ("LocalLinkIntegrityErrors", 1152, 64),
        ("ExcessiveBufferOverrunErrors", 1216, 64),
        ("VL15Dropped", 1280, 64),
        ("PortXmitWait", 1344, 64),
        ("QP1Dropped", 1408, 64),
    ],
)

PORT_RCV_ERROR_DETAILS = Layout(
    "PortRcvErrorDetails",
    16,
    [
        ("PortSelect", 8, 8),
        ("CounterSelect", 16, 16),
        ("PortLocalPhysicalErrors", 32, 16),
        ("PortMalformedPktErrors", 48, 16),
        ("PortBufferOverrunErrors", 64, 16),
        ("PortDLIDMappingErrors", 80, 16),
        ("PortVLMappingErrors", 96, 16),
        ("PortLoopingErrors", 112, 16),
    ],
)

PORT_XMIT_DISCARD_DETAILS = Layout(
    "PortXmitDiscardDetails",
    12,
    [
        ("PortSelect", 8, 8),
        ("CounterSelect", 16, 16),
        ("PortInactiveDiscards", 32, 16),
        ("PortNeighborMTUDiscards", 48, 16),
        ("PortSwLifetimeLimitDiscards", 64, 16),
        ("PortSwHOQLifetimeLimitDiscards", 80, 16),
    ],
)
