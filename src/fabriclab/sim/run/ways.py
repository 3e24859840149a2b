"""The ways in opened beside a fabric server: the host library's socket (and TCP), and
the UDP address of remote mode, as ``fabriclab up`` is given them."""

from __future__ import annotations

import socket

from ...errors import InputError, Problem
from ...model.cluster import Cluster
from ...statedir import state_dir
from ..wire.hostlink import HostLink, trees_dir
from ..wire.hosttcp import HostTcp, make_token, parse_allow, parse_host_listen, token_path
from ..wire.server import FabricServer


def host_link(cluster: Cluster, srv: FabricServer, name: str) -> HostLink:
    """The host library's socket on ``srv`` (``<state>/<name>.host``), served in its loop."""
    link = HostLink(srv.transport, srv.sim, cluster, trees_dir(state_dir(), name), srv.set_issm)
    try:
        link.bind()
    except OSError as e:
        raise InputError(
            [Problem(str(link.path), f"cannot serve the host library: {e.strerror}")]
        ) from None
    return link


def host_tcp(link: HostLink, host_listen: str, allow: str | None, name: str) -> HostTcp:
    """The host protocol over TCP at ``up --host-listen``, with a fresh token kept 0600
    in the state directory."""
    addr = parse_host_listen(host_listen)
    token = make_token(token_path(state_dir(), name))
    tcp = HostTcp(link, name, addr, parse_allow([allow] if allow else None), token)
    try:
        tcp.bind()
    except OSError as e:
        raise InputError(
            [Problem(f"--host-listen {host_listen}", f"cannot listen: {e.strerror}")]
        ) from None
    return tcp


def host_port(addr) -> str:
    """(host, port) as HOST:PORT ([HOST]:PORT for IPv6)."""
    host, port = addr[0], addr[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def parse_listen(text: str | None) -> tuple[str, int] | None:
    """``[HOST:]PORT`` for remote (UDP) mode."""
    if text is None:
        return None
    host, _, port = text.rpartition(":")
    try:
        p = int(port)
        if not 0 < p < 65536 - 64:
            raise ValueError
    except ValueError:
        raise InputError(
            [
                Problem(
                    "--listen",
                    f"{text!r}: want [HOST:]PORT with a port below 65472 (client i uses PORT+1+i)",
                )
            ]
        ) from None
    host = host or "127.0.0.1"
    try:
        return (socket.gethostbyname(host), p)  # the server listens on IPv4
    except (OSError, UnicodeError):
        raise InputError(
            [Problem("--listen", f"{host!r}: not an IPv4 address or a name this host resolves")]
        ) from None
