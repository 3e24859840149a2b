"""Who may open a connection on the host protocol's socket, and how many may wait.

A connection's peer is known from the moment it is accepted (SO_PEERCRED, unix(7):
the pid, uid and gid of the process that connected), so a uid the server does not
admit (``up --allow-user``) is answered and closed at once, before it holds anything.
A connection that was admitted waits for its HELLO in :class:`Pending`: at most
:data:`PER_UID` of one uid and :data:`TOTAL` in all, each for at most
:data:`HELLO_WAIT` seconds.  The fabric's owner and root always get a place: when every
place is taken, another uid's oldest waiting connection gives up its own.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

_CRED = struct.Struct("iII")  # struct ucred { pid_t pid; uid_t uid; gid_t gid; } (unix(7))
HELLO_WAIT = 5.0  # seconds a connection may take to say what it is
TOTAL = 256  # connections that have not said what they are, of every uid
PER_UID = 16  # ... of one uid (the owner and root: up to TOTAL)


@dataclass(frozen=True)
class Peer:
    """The process at the other end of a connection, as the kernel saw it connect."""

    pid: int
    uid: int
    gid: int
    addr: str = ""  # over TCP: its address (then pid is the one its HELLO names)


def peer_of(c: socket.socket) -> Peer:
    """``c``'s peer (OSError when the kernel cannot say)."""
    return Peer(*_CRED.unpack(c.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size)))


@dataclass
class Waiting:
    """An accepted connection that has not said its HELLO yet."""

    sock: socket.socket
    peer: Peer
    since: float


def privileged(uid: int) -> bool:
    """Whether ``uid`` is root or the fabric's owner (the server's own)."""
    return uid in (0, os.geteuid())


class Pending:
    """The accepted connections that have not said what they are, by descriptor."""

    def __init__(self, owner: int | None = None, total: int = TOTAL, per_uid: int = PER_UID):
        self.owner = os.geteuid() if owner is None else owner
        self.total = total
        self.per_uid = per_uid
        self.by_fd: dict[int, Waiting] = {}
        self._uids: Counter[int] = Counter()

    def privileged(self, uid: int) -> bool:
        """Whether ``uid`` is the fabric's owner or root (always given a place)."""
        return uid in (0, self.owner)

    def admit(self, c: socket.socket, peer: Peer) -> tuple[bool, Waiting | None]:
        """Whether ``c`` gets a place, and the connection evicted to make it (the caller
        closes it)."""
        privileged = self.privileged(peer.uid)
        if not privileged and self._uids[peer.uid] >= self.per_uid:
            return False, None
        evicted = None
        if len(self.by_fd) >= self.total:
            if not privileged:
                return False, None
            evicted = self._oldest_unprivileged()
            if evicted is None:
                return False, None
            self.forget(evicted.sock.fileno())
        self.by_fd[c.fileno()] = Waiting(c, peer, time.monotonic())
        self._uids[peer.uid] += 1
        return True, evicted

    def _oldest_unprivileged(self) -> Waiting | None:
        others = [w for w in self.by_fd.values() if not self.privileged(w.peer.uid)]
        return min(others, key=lambda w: w.since, default=None)

    def forget(self, fd: int) -> Waiting | None:
        """Take connection ``fd`` off the list (it spoke, or it goes)."""
        w = self.by_fd.pop(fd, None)
        if w is not None:
            self._uids[w.peer.uid] -= 1
            if self._uids[w.peer.uid] <= 0:
                del self._uids[w.peer.uid]
        return w

    def silent(self, now: float, wait: float = HELLO_WAIT) -> list[Waiting]:
        """The connections that have waited longer than ``wait`` seconds."""
        return [w for w in self.by_fd.values() if now - w.since > wait]

    def of_uid(self, uid: int) -> int:
        """How many of ``uid``'s connections wait."""
        return self._uids[uid]

    def __len__(self) -> int:
        return len(self.by_fd)


def accepted(sock: socket.socket, rlog, what: str) -> Iterator[tuple[socket.socket, Any]]:
    """The connections waiting on the listening ``sock``, at most 64 a loop turn; an
    accept that fails for lack of descriptors is logged (``what``: which listener) and
    ends the turn, and the tool sees its connect hang up."""
    for _ in range(64):
        try:
            yield sock.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            rlog.warning("host connections refused", f"{what}: %s", e)
            return
