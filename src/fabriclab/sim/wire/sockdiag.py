"""Whose a Unix socket is, asked of the kernel: a ``sock_diag`` netlink query for one
socket by inode (Linux include/uapi/linux/sock_diag.h, unix_diag.h; net/unix/diag.c
``unix_diag_get_exact``).  Unlike /proc/PID/fd it needs no privilege, so a user can
learn the uid that holds a socket name even when the process is not theirs to see; the
uid attribute is there from Linux 5.3 on."""

from __future__ import annotations

import socket
import struct

NETLINK_SOCK_DIAG = 4  # linux/netlink.h
SOCK_DIAG_BY_FAMILY = 20  # linux/sock_diag.h
NLM_F_REQUEST = 1
NLMSG_ERROR = 2
UDIAG_SHOW_UID = 0x40  # linux/unix_diag.h
UNIX_DIAG_UID = 7  # the attribute after NAME, VFS, PEER, ICONS, RQLEN, MEMINFO, SHUTDOWN
NO_COOKIE = 0xFFFFFFFF  # INET_DIAG_NOCOOKIE: look the socket up by inode alone
NLMSG = struct.Struct("=IHHII")  # struct nlmsghdr
REQUEST = struct.Struct("=BBHIIIII")  # struct unix_diag_req
MESSAGE = struct.Struct("=BBBBIII")  # struct unix_diag_msg
ATTR = struct.Struct("=HH")  # struct rtattr (nlattr)
_WAIT = 2.0  # seconds the kernel may take (it answers at once)


def unix_uid(inode: int) -> int | None:
    """The uid owning the Unix socket ``inode`` (None: no such socket, or the kernel
    does not say)."""
    body = REQUEST.pack(
        socket.AF_UNIX, 0, 0, 0xFFFFFFFF, inode, UDIAG_SHOW_UID, NO_COOKIE, NO_COOKIE
    )
    try:
        s = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG)
    except OSError:
        return None
    try:
        s.settimeout(_WAIT)
        s.send(NLMSG.pack(NLMSG.size + len(body), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST, 1, 0) + body)
        raw = s.recv(8192)
    except OSError:
        return None
    finally:
        s.close()
    if len(raw) < NLMSG.size + MESSAGE.size:
        return None
    length, kind, _flags, _seq, _pid = NLMSG.unpack_from(raw)
    if kind == NLMSG_ERROR:
        return None
    at, end = NLMSG.size + MESSAGE.size, min(length, len(raw))
    while at + ATTR.size <= end:  # the attributes, each 4-byte aligned
        size, kind = ATTR.unpack_from(raw, at)
        if size < ATTR.size:
            return None
        if kind == UNIX_DIAG_UID and size >= ATTR.size + 4 and at + ATTR.size + 4 <= end:
            return struct.unpack_from("=I", raw, at + ATTR.size)[0]
        at += (size + 3) & ~3
    return None
