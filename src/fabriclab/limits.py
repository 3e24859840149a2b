"""The sizes fabriclab accepts, each checked before the work it bounds, and where each
number comes from.  A fabric is bounded by InfiniBand itself (:mod:`fabriclab.ib.ids`);
the text formats around it by what real tools write."""

from __future__ import annotations

from .ib.ids import NODE_DESC_BYTES, UNICAST_LIDS

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
