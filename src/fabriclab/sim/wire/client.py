"""A tool attached to the fabric server, as the ways in know it: where it sits, its
sockets, and (through the host library) the MAD agents it registered."""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field

from ..fabric.state import SimPort


@dataclass
class Client:
    """A tool attached to the fabric: its id, where it sits, and its sockets."""

    id: int
    key: int  # pid (local) or the client's data UDP port (remote)
    port: SimPort
    qp: int
    issm: bool
    nodeid: str
    sock: socket.socket
    addr: object = None  # its control socket's address: its requests come from there
    host: str = ""  # remote mode: the client's IP address
    sender: tuple = ()  # ("uid", uid) or, another host, ("host", ip): whose quota it uses
    pid: int = 0  # local mode: its process, as the kernel named it to us
    inode: int = 0  # remote mode, a client on this host: its data socket's inode
    since: float = field(default_factory=time.time)
    # attached through fabriclab's host library: its agents by id (:mod:`.agents`), the
    # requests that reach it are chosen by them; None for an ibsim client
    agents: dict | None = None
