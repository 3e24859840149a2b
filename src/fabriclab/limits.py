"""The sizes fabriclab accepts, each checked before the work it bounds, and where each
number comes from.  A fabric is bounded by InfiniBand itself; the text formats around
it by what real tools write."""

from __future__ import annotations

# --- InfiniBand ---------------------------------------------------------------------------

# Unicast LIDs are 0x0001-0xBFFF (IBA Vol 1, 4.1.3 "Local Identifiers"; 0xC000-0xFFFE are
# multicast, 0xFFFF the permissive LID).  Every switch and every CA port needs one, so no
# subnet has more than 49,151 end ports and switches together.
LID_MIN = 0x0001
LID_MAX = 0xBFFF
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

# --- names and hostlists ------------------------------------------------------------------

# Linux HOST_NAME_MAX and Slurm's MAXHOSTNAMELEN (src/common/hostlist.c) are both 64.
HOST_NAME_MAX = 64
# Slurm's hostlist.c: "max host range: anything larger will be assumed to be an error",
# MAX_RANGE = 64*1024.  fabriclab applies it to a whole hostlist.
MAX_HOSTS = 64 * 1024
# A tray's HCA needs a LID, so a cluster has no more trays than unicast LIDs.
MAX_TRAYS = UNICAST_LIDS
# Names fabriclab makes from patterns (switches, NVLink domains): a switch name lands in
# its NodeDescription, so the same 64 bytes.
NAME_MAX = NODE_DESC_BYTES

# --- input files --------------------------------------------------------------------------

# A spec of the largest fabric (49,151 end ports, written by `fabriclab import`) is about
# 20 MB of YAML and 700,000 YAML nodes; these leave room above it.
SPEC_BYTES_MAX = 64 << 20
YAML_NODES_MAX = 1_000_000  # after alias expansion
YAML_DEPTH_MAX = 64  # a spec nests 8 deep
YAML_KEY_CHARS_MAX = 1024
INT_DIGITS_MAX = 40  # every number in a spec fits 64 bits (20 digits, 0x + 16)

# ibnetdiscover output of the largest fabric: -p prints one line of about 200 bytes per
# port, 254 ports on each of the switches; 512 MB is several times that.
DUMP_BYTES_MAX = 512 << 20
# A line of ibnetdiscover names at most two nodes (two 64-byte descriptions, two ids, a
# few numbers): real lines are under 300 bytes.
DUMP_LINE_MAX = 1024
# A file of node names (``--nodes FILE``): MAX_HOSTS names of HOST_NAME_MAX bytes.
NODES_FILE_BYTES_MAX = MAX_HOSTS * (HOST_NAME_MAX + 1) * 2

# nvidia-smi answers (``--nvidia-smi FILE``): a line of about 80 bytes per GPU, and at most
# one GPU per LID; 64 MB is ten times that.
SMI_BYTES_MAX = 64 << 20

# ``--topologies FILE``: a few named topologies, each a node list of at most MAX_HOSTS.
TOPOLOGIES_BYTES_MAX = 16 << 20

# --- reporting ----------------------------------------------------------------------------

# Problems kept in memory per input (the rest are counted), and shown per kind.
PROBLEMS_KEPT = 1000
PROBLEMS_SHOWN = 20
