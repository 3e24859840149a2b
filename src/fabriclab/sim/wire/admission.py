"""Who may attach to a fabric server, and how many at a time.

The ibsim protocol has no authentication of its own, and abstract sockets have no
permissions, so the server decides from what the kernel tells it:

- on the local sockets, the sender's credentials (SCM_CREDENTIALS, socket(7)): its
  uid must be one of ``uids`` (by default the server's own), and the pid a client
  claims must be the sender's;
- in remote (UDP) mode, the sender's address must be in ``networks`` (loopback unless
  ``up --allow`` names others); a sender on this host is held to ``uids`` too, by the
  owner of the socket it sends from (/proc/net/udp);
- at most ``max_clients`` clients, and ``max_per_sender`` from one user (or, for
  another host, one address).
"""

from __future__ import annotations

import ipaddress
import os
import pwd
import resource
import socket
from dataclasses import dataclass, field

from ...errors import InputError, Problem

LOOPBACK = ipaddress.IPv4Network("127.0.0.0/8")
DEFAULT_MAX_CLIENTS = 512  # ibsim allows 10 (IBSIM_MAX_CLIENTS, include/ibsim.h)
# A remote client that sent nothing for this long may be dropped when the limit is
# reached and a new client needs its place.  OpenSM sweeps every 10 s (sweep_interval,
# opensm.conf), and a tool works without pause, so only a vanished client stays silent.
IDLE_AFTER = 60.0
FD_RESERVE = 64  # descriptors kept free of clients (logging, /proc, OpenSM's pipes)


def check_max_clients(n: int) -> int:
    """``--max-clients N``: at least 1, and no more than the server may open a
    descriptor for, one a client: the hard file limit (RLIMIT_NOFILE, which the server
    raises its soft limit to) less FD_RESERVE."""
    if n < 1:
        raise InputError([Problem("--max-clients", f"{n}: want at least 1")])
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and n > hard - FD_RESERVE:
        raise InputError(
            [
                Problem(
                    "--max-clients",
                    f"{n}: more clients than the server may open descriptors for (the file "
                    f"limit, RLIMIT_NOFILE, is {hard}, and {FD_RESERVE} are kept for the "
                    f"server): at most {max(1, hard - FD_RESERVE)}",
                )
            ]
        )
    return n


@dataclass
class Policy:
    """Who may attach to a server (uids; in remote mode, networks) and how many."""

    uids: frozenset[int] = field(default_factory=lambda: frozenset({os.geteuid()}))
    networks: tuple[ipaddress.IPv4Network, ...] = (LOOPBACK,)  # remote mode only
    max_clients: int = DEFAULT_MAX_CLIENTS
    max_per_sender: int | None = None  # None: half the limit when senders can differ
    idle_after: float = IDLE_AFTER

    def per_sender(self, capacity: int, remote: bool) -> int:
        """The most clients one sender may hold, when the server holds ``capacity``."""
        if self.max_per_sender is not None:
            return max(1, min(self.max_per_sender, capacity))
        if remote or len(self.uids) > 1:
            return max(1, capacity // 2)
        return capacity


def parse_users(texts: list[str] | None) -> frozenset[int]:
    """``--allow-user USER|UID[,…]`` (repeatable): the uids whose tools may attach, on
    top of the server's own."""
    uids = {os.geteuid()}
    for text in texts or []:
        for item in filter(None, (t.strip() for t in text.split(","))):
            if item.isdigit():
                uids.add(int(item))
                continue
            try:
                uids.add(pwd.getpwnam(item).pw_uid)
            except KeyError:
                raise InputError([Problem("--allow-user", f"{item!r}: no such user")]) from None
    return frozenset(uids)


def parse_networks(text: str | None) -> tuple[ipaddress.IPv4Network, ...] | None:
    """``--allow NETWORK[,NETWORK…]``: IPv4 networks in CIDR notation (an address alone
    is a /32)."""
    if text is None:
        return None
    nets = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        try:
            nets.append(ipaddress.IPv4Network(item, strict=False))
        except ValueError:
            raise InputError(
                [
                    Problem(
                        "--allow",
                        f"{item!r}: want an IPv4 network such as "
                        "10.0.0.0/24 (the server listens on IPv4)",
                    )
                ]
            ) from None
    if not nets:
        raise InputError([Problem("--allow", "name at least one network")])
    return tuple(nets)


Networks = tuple[ipaddress.IPv4Network, ...]


def exposure(listen: tuple[str, int] | None, networks: Networks | None) -> Networks:
    """The networks a server on ``listen`` answers.  A loopback address answers this
    host unless told otherwise; any other needs ``--allow``, since the protocol has no
    authentication and every host that can reach the port could drive the fabric."""
    if listen is None:
        if networks is not None:
            raise InputError(
                [Problem("--allow", "only applies to remote mode (--listen) or --host-listen")]
            )
        return ()
    host, port = listen
    if networks is not None:
        return networks
    if ipaddress.IPv4Address(host) in LOOPBACK:
        return (LOOPBACK,)
    raise InputError(
        [
            Problem(
                "--listen",
                f"{host}:{port} is not a loopback address: the "
                "ibsim protocol has no authentication, so name the networks "
                "that may attach with --allow NETWORK[,NETWORK…] "
                "(e.g. --allow 10.0.0.0/24)",
            )
        ]
    )


class Addresses:
    """Which sender addresses are allowed, and which are this host's own (a socket can
    be bound to them), remembered per address."""

    _MAX = 4096

    def __init__(self, networks: tuple[ipaddress.IPv4Network, ...]):
        self.networks = networks
        self._allowed: dict[str, bool] = {}
        self._local: dict[str, bool] = {}

    def allowed(self, host: str) -> bool:
        """Whether a datagram from ``host`` is in the allowed networks."""
        ok = self._allowed.get(host)
        if ok is None:
            if len(self._allowed) >= self._MAX:
                self._allowed.clear()
            try:
                ip = ipaddress.IPv4Address(host)
                ok = any(ip in n for n in self.networks)
            except ValueError:
                ok = False
            self._allowed[host] = ok
        return ok

    def local(self, host: str) -> bool:
        """Whether ``host`` is an address of this host (loopback, or one it can bind)."""
        ok = self._local.get(host)
        if ok is None:
            if len(self._local) >= self._MAX:
                self._local.clear()
            ok = ipaddress.IPv4Address(host) in LOOPBACK or _bindable(host)
            self._local[host] = ok
        return ok


def _bindable(host: str) -> bool:
    # an OSError here (out of descriptors) goes to the caller: nothing is decided
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.bind((host, 0))
        return True
    except OSError:
        return False
    finally:
        s.close()
