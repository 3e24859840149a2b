"""Identifiers and their ranges: LIDs, LMC, GUIDs, port numbers, vendor and device ids,
the NodeDescription's size (IBA Vol. 1, chapters 4 and 14)."""

from __future__ import annotations

# Unicast LIDs are 0x0001-0xBFFF (IBA Vol 1, 4.1.3 "Local Identifiers"; 0xC000-0xFFFE are
# multicast, 0xFFFF the permissive LID).  Every switch and every CA port needs one, so no
# subnet has more than 49,151 end ports and switches together.
LID_MIN = 0x0001
LID_MAX = 0xBFFF
MULTICAST_LID_MIN = 0xC000
PERMISSIVE_LID = 0xFFFF
UNICAST_LIDS = LID_MAX - LID_MIN + 1
# PortInfo.LMC is 3 bits (IBA Vol 1, 14.2.5.6): a port answers to 2**LMC LIDs, lid .. lid + 2**LMC - 1.
LMC_MAX = 7
# NodeInfo.NumPorts is 8 bits (IBA Vol 1, 14.2.5.3), and port 255 means "all ports" in
# the PMA's PortSelect (IBA Vol 1, 16.1.3): a node has at most 254 ports.
MAX_PORTS = 254
# GUIDs are EUI-64 (IBA Vol 1, 4.1).
GUID_MAX = (1 << 64) - 1
# NodeInfo.VendorID is 24 bits, DeviceID 16 bits (IBA Vol 1, 14.2.5.3).
VENDID_MAX = (1 << 24) - 1
DEVID_MAX = (1 << 16) - 1
# NodeDescription is a 64-byte attribute (IBA Vol 1, 14.2.5.2).
NODE_DESC_BYTES = 64
