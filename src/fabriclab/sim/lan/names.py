"""The names of a fabric's network namespaces: ``fl.FABRIC.NODE``, one for every
endpoint and switch of its other networks."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ...model.networks import Networks

# where ip netns and pyroute2 keep the namespaces' mounts: read as a directory, so that
# naming a fabric's namespaces (every 'down', every 'exec') loads no netlink library
NETNS_DIR = "/run/netns"


def prefix(fabric: str) -> str:
    """What every namespace of fabric ``fabric`` is named with."""
    return f"fl.{fabric}."


def namespace(fabric: str, node: str) -> str:
    """The namespace of endpoint or switch ``node`` of ``fabric``."""
    return prefix(fabric) + node


def existing(fabric: str) -> list[str]:
    """The fabric's namespaces that exist now."""
    p = prefix(fabric)
    try:
        return sorted(n for n in os.listdir(NETNS_DIR) if n.startswith(p))
    except FileNotFoundError:  # no namespace was ever made on this machine
        return []


def endpoint_namespace(fabric: str, nets: Networks | None, node: str) -> str | None:
    """The namespace ``up --networks`` made for ``node`` (an endpoint or switch of the
    fabric's other networks), when there is one."""
    if nets is None or (node not in nets.endpoints and node not in nets.switches):
        return None
    ns = namespace(fabric, node)
    return ns if ns in existing(fabric) else None


def in_namespace(ns: str) -> list[str]:
    """The words that run a command in network namespace ``ns`` as ``ip netns exec``
    does: its interfaces, addresses and routes the command's own, and /sys mounted
    afresh in a private mount namespace so /sys/class/net (node_exporter's netdev
    collector, ``ethtool``) shows them too."""
    return ["ip", "netns", "exec", ns]
