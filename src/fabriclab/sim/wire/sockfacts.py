"""Small facts about sockets and processes the transport reads: an address for the log,
when a socket's last datagram arrived, descriptors passed by mistake, a process alive."""

from __future__ import annotations

import fcntl
import os
import socket
import struct

_SIOCGSTAMP = 0x8906  # linux/sockios.h: the time the last datagram read arrived
_TIMEVAL = struct.Struct("@ll")  # struct timeval


def show_address(addr) -> str:
    """A socket address for the log."""
    if isinstance(addr, bytes):
        return addr.strip(b"\0").decode(errors="replace") or "(unbound)"
    if isinstance(addr, tuple):
        return f"{addr[0]}:{addr[1]}"
    return repr(addr)


def close_passed_fds(data: bytes) -> None:
    """Close the descriptors an SCM_RIGHTS message ``data`` passed (nobody hands the
    server descriptors)."""
    n = len(data) - len(data) % 4
    for fd in struct.unpack(f"{n // 4}i", data[:n]):
        try:
            os.close(fd)
        except OSError:
            pass


def last_datagram(sock: socket.socket) -> float:
    """When the last datagram read from ``sock`` arrived (the first call turns the
    kernel's timestamps on; 0.0: none yet)."""
    try:
        sec, usec = _TIMEVAL.unpack(fcntl.ioctl(sock.fileno(), _SIOCGSTAMP, bytes(_TIMEVAL.size)))
    except OSError:
        return 0.0
    return sec + usec / 1e6


def pid_exists(pid: int) -> bool:
    """Whether process ``pid`` exists (one of another user's too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True
