"""What the kernel says about sockets and processes, read from /proc.

The fabric server checks its clients (is a client's socket still bound, who owns the
socket a datagram came from) while it may be short of file descriptors, so the socket
tables are read through descriptors opened once and kept (:class:`ProcFile`); the
command-line side reads a process's identity (start time and command) before it
signals a recorded pid.

Formats are the kernel's (Documentation/filesystems/proc.rst, net/unix/af_unix.c
``unix_seq_show``, net/ipv4/udp.c ``udp4_format_sock``, net/ipv6/datagram.c
``__ip6_dgram_sock_seq_show``).
"""

from __future__ import annotations

import ipaddress
import os
import struct
from dataclasses import dataclass

from . import sockdiag


class ProcFile:
    """A /proc file opened once and re-read from the start on each :meth:`read`
    (seq_file regenerates its contents when read from offset 0)."""

    def __init__(self, path: str):
        self.path = path
        self.fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)

    def read(self) -> bytes:
        """The file's contents now."""
        os.lseek(self.fd, 0, os.SEEK_SET)
        chunks: list[bytes] = []
        while True:
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)

    def close(self) -> None:
        """Close the descriptor (once)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


UNIX_TABLE = "/proc/net/unix"


def abstract_names(raw: bytes | None = None) -> set[bytes]:
    """The abstract addresses bound in the /proc/net/unix listing ``raw`` (read now when
    not given; OSError when it cannot be), as the kernel shows them: each NUL of the
    name as ``@`` (so ``\\0sim:ctl\\0`` is ``@sim:ctl@``)."""
    if raw is None:
        with open(UNIX_TABLE, "rb") as f:
            raw = f.read()
    return {line.rsplit(None, 1)[-1] for line in raw.splitlines() if b"@" in line}


def abstract_bound(address: bytes, names: set[bytes] | None = None) -> bool:
    """Whether some socket is bound at the abstract ``address`` (as given to bind(): a
    NUL first), among ``names`` (from :func:`abstract_names`) or, without them, now."""
    return shown_name(address) in (abstract_names() if names is None else names)


def unix_inode(raw: bytes, shown: bytes) -> int | None:
    """The inode of the socket bound at ``shown`` (as :func:`abstract_names` spells it)."""
    for line in raw.splitlines():
        parts = line.split()
        if len(parts) >= 8 and parts[7] == shown:
            return int(parts[6])
    return None


def shown_name(abstract: bytes) -> bytes:
    """An abstract socket address as /proc/net/unix shows it."""
    return abstract.replace(b"\0", b"@")


@dataclass(frozen=True)
class UdpSocket:
    """A UDP socket as /proc/net/udp shows it: address, port, owner and inode."""

    address: ipaddress.IPv4Address | ipaddress.IPv6Address
    port: int
    uid: int
    inode: int

    def covers(self, ip: ipaddress.IPv4Address) -> bool:
        """Whether a datagram from ``ip`` can have come from this socket: bound to that
        address, to the wildcard, or (an IPv6 socket) to its v4-mapped form."""
        a = self.address
        if a.is_unspecified or a == ip:
            return True
        return isinstance(a, ipaddress.IPv6Address) and a.ipv4_mapped == ip


def udp_sockets(raw: bytes, v6: bool = False) -> list[UdpSocket]:
    """The sockets in a /proc/net/udp (``v6``: udp6) listing.  Addresses are printed as
    32-bit words in the machine's byte order (``%08X`` of the in-memory value)."""
    out = []
    for line in raw.splitlines()[1:]:
        parts = line.split()
        if len(parts) < 10:
            continue
        addr_hex, _, port_hex = parts[1].partition(b":")
        words = [int(addr_hex[i : i + 8], 16) for i in range(0, len(addr_hex), 8)]
        packed = b"".join(struct.pack("=I", w) for w in words)
        try:
            address = ipaddress.IPv6Address(packed) if v6 else ipaddress.IPv4Address(packed)
            out.append(UdpSocket(address, int(port_hex, 16), int(parts[7]), int(parts[9])))
        except ValueError:
            continue
    return out


@dataclass(frozen=True)
class ProcessId:
    """Which process a pid is: pid numbers are reused, (pid, start time) is not."""

    pid: int
    start: int  # /proc/PID/stat field 22: start time, clock ticks after boot (proc(5))
    cmdline: tuple[str, ...]


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after
    # the last ')'; the first field there is field 3 (state)
    return raw.rsplit(b")", 1)[1].decode().split()


def process(pid: int) -> ProcessId | None:
    """The process ``pid`` is now (None: no such process, or a zombie, which is gone)."""
    if pid <= 0:
        return None
    fields = _stat_fields(pid)
    if fields is None or len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read()
    except OSError:
        return None
    return ProcessId(
        pid, int(fields[19]), tuple(a.decode(errors="replace") for a in cmd.split(b"\0")[:-1])
    )


def nspids(pid: int) -> list[int]:
    """``pid`` as each PID namespace it belongs to sees it, outermost (ours) first (the
    NSpid line of /proc/PID/status); [] when unknown."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"NSpid:"):
                    return [int(x) for x in line.split()[1:]]
    except (OSError, ValueError):
        pass
    return []


def socket_inodes(pid: int) -> set[int]:
    """The inodes of the sockets process ``pid`` has open (readable for our own
    processes, or as root)."""
    out: set[int] = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return out
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            out.add(int(target[8:-1]))
    return out


@dataclass(frozen=True)
class Holder:
    """A process holding a socket open: its pid, (effective) uid and command name."""

    pid: int
    uid: int
    command: str

    def __str__(self) -> str:
        return f"uid {self.uid} (pid {self.pid}, {self.command})"


def holders(inode: int, limit: int = 8) -> list[Holder]:
    """The processes (at most ``limit``) that have socket ``inode`` open, among those
    whose /proc/PID/fd this user may read (every one, as root)."""
    want = f"socket:[{inode}]"
    out: list[Holder] = []
    for pid in sorted(int(p) for p in os.listdir("/proc") if p.isdigit()):
        if _has_open(pid, want):
            try:
                with open(f"/proc/{pid}/status", "rb") as f:
                    uid = next(int(x.split()[2]) for x in f if x.startswith(b"Uid:"))
                with open(f"/proc/{pid}/comm", "rb") as f:
                    comm = f.read(64).strip().decode(errors="replace")
            except (OSError, StopIteration, ValueError, IndexError):
                continue
            out.append(Holder(pid, uid, comm))
            if len(out) >= limit:
                break
    return out


def _has_open(pid: int, target: str) -> bool:
    """Whether process ``pid`` has a descriptor whose link reads ``target``."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                return True
        except OSError:
            continue
    return False


def abstract_holder(address: bytes) -> str:
    """Who holds the abstract socket ``address`` (as given to bind()), for a message:
    "uid U (pid P, COMMAND)", or what can be said when the process cannot be seen
    (its uid, asked of the kernel: :mod:`.sockdiag`)."""
    try:
        with open(UNIX_TABLE, "rb") as f:
            inode = unix_inode(f.read(), shown_name(address))
        if inode is None:
            return "no process now"
        found = holders(inode)
    except OSError:
        return "a process (the socket table cannot be read)"
    if found:
        return ", ".join(map(str, found))
    uid = sockdiag.unix_uid(inode)
    if uid is None:
        return "a process of another user (root can name it)"
    return f"uid {uid} (its process is not yours to see: root can name it)"


def open_fds() -> int:
    """How many file descriptors this process has open."""
    return len(os.listdir("/proc/self/fd"))
