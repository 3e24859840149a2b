"""fabriclab's host protocol: what its host library (``sim/host/hostlib``), preloaded into a
libibumad program, says to the fabric server for the tray it runs on.

The server listens on the SOCK_SEQPACKET socket file ``<name>.host`` in its owner's 0700
state directory, and each end checks the other's uid (``SO_PEERCRED``).  Every connection starts with one HELLO frame
from the library and one REPLY frame from the server; the HELLO's ``kind`` says what the
connection is:

- ``UMAD``: one open ``/dev/infiniband/umad<index>`` of the tray.  After the REPLY
  (``token``: the connection's id, which later REGISTER frames name) the connection
  carries MADs both ways, each exactly as the kernel's umad device reads and writes
  them: a 64-byte ``ib_user_mad`` header (:mod:`.umad`) and the MAD.  The library
  writes the application's buffer with the agent's id in TransactionID bits 32-47 of a
  request (the kernel's hi_tid); the server fills every header it delivers as the
  kernel's receive path does (agent id, status, length, source QP and LID).  A message
  longer than :data:`FRAME_MAX` (an RMPP table) travels as a first frame with
  :data:`MORE` set in the header's status and ``length`` = the whole message's size,
  followed by frames of raw bytes until ``length`` bytes have come.

  Bounds, which the library holds the server to (a umad file whose server breaks one
  fails as one whose port went away: read and write EIO, poll POLLERR, one line said):
  a frame is at most :data:`FRAME_MAX` bytes; a message at most :data:`MESSAGE_MAX`,
  header included; a single frame's ``length`` is its own size; a long message's first
  frame is exactly :data:`FRAME_MAX` bytes and each later piece is too but the last,
  which ends the message exactly; a REPLY's text is at most :data:`TEXT_MAX` bytes.
- ``ISSM``: ``/dev/infiniband/issm<index>`` held open: the port's PortInfo IsSM
  capability is set while the connection lives.  REPLY ``err`` EBUSY: another holds it.
- ``TREE``: where the tray's /sys tree is (REPLY ``text``: the directory holding
  ``class/infiniband`` and ``class/infiniband_mad``), made fresh for the asker and kept
  fresh for REPLY ``value`` ms after (0: unsaid); the library asks again within that.
- ``REGISTER``: an agent of the UMAD connection ``token`` registered with a method mask,
  so requests of its class, version (and OUI) and methods reach it; the HELLO is
  followed by the ``ib_user_mad_reg_req2`` (:data:`.umad.REG_REQ2`, ``id`` = the agent).
  REPLY ``err`` EINVAL: a method taken by another agent on that port (the kernel's rule);
  EPERM: connection ``token`` was opened by another process; EBUSY: the class is served
  on that port by its subnet manager (the process holding its ISSM).
- ``UNREGISTER``: agent ``index`` of connection ``token`` gone (EPERM as REGISTER).

A REPLY's ``err`` is 0 or an errno; with an errno, ``text`` is a line for the user.
The server reads each connection's peer (SO_PEERCRED) when it accepts it: a uid it does
not admit gets EACCES at once, and a HELLO whose ``pid`` is not its sender's gets EPERM.
Control fields are little-endian.
"""

from __future__ import annotations

import struct

MAGIC = 0x31484C46  # "FLH1"
VERSION = 1
KIND_UMAD, KIND_ISSM, KIND_TREE, KIND_REGISTER, KIND_UNREGISTER = 1, 2, 3, 4, 5
KINDS = {
    KIND_UMAD: "umad",
    KIND_ISSM: "issm",
    KIND_TREE: "tree",
    KIND_REGISTER: "register",
    KIND_UNREGISTER: "unregister",
}
TRAY_MAX = 64  # bytes of the tray's name (a host name: at most 63, RFC 1035 label ... )
# struct fl_hello { u32 magic; u16 version, kind; u32 pid, index, token, reserved;
#                   char tray[64]; }
HELLO = struct.Struct("<IHHIIII64s")  # 88 bytes
# struct fl_reply { u32 magic; i32 err; u32 token, value; } then text
REPLY = struct.Struct("<IiII")  # 16 bytes
TEXT_MAX = 4096 - REPLY.size
FRAME_MAX = 65536  # bytes of one frame: a longer message is sent in pieces
MORE = 0x80000000  # in a first frame's header status: pieces follow
# The longest message either end sends or takes, header included.  The kernel's ABI
# bounds it only by the header's 32-bit length (user_mad.c sizes an RMPP message by the
# write's count, and a received one by its segments, mad_rmpp.c); the longest a fabric
# carries is an SA table (OpenSM's 617 NodeRecords of gb200-su are about 70 kB), so
# 16 MiB holds the tables of a fabric a thousand times that.
MESSAGE_MAX = 16 << 20
SOCKET_KIND = "host"  # the listening socket is the file <name>.host

# --- over TCP (FABRICLAB_HOST_ADDR; the library's remote.c) ---------------------------
# Each packet above goes on the stream as a 4-byte little-endian length N, 1 <= N <=
# FRAME_MAX, then its N bytes.  A connection starts with AUTH (the token's TOKEN_SIZE
# ASCII hex characters) then the HELLO.  TREE's REPLY has value = the archive's size
# (<= TREE_MAX) and empty text; the archive follows in packets: entries, each ENTRY
# (type, 0, path length, data length) then the path (relative, no '.' or '..', at most
# ENTRY_PATH_MAX bytes) and the data (a file's content, a symlink's target).
LENGTH = struct.Struct("<I")  # a packet's length on the stream
TOKEN_SIZE = 64  # secrets.token_hex(32)
TREE_MAX = 16 * 1024 * 1024  # bytes of a TREE archive
ENTRY = struct.Struct("<BBHI")  # u8 type, u8 0, u16 path length, u32 data length
ENTRY_DIR, ENTRY_FILE, ENTRY_SYMLINK = 1, 2, 3
ENTRY_PATH_MAX = 1024
