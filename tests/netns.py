"""Network namespaces a test makes for itself: a server's and trays', joined by veth
pairs, with addresses that exist only inside them (10.x), all removed at the end.

``ip netns add`` (iproute2) needs root; :func:`why_not` says why a machine cannot, so a
test skips with that reason.  Test traffic never leaves the namespaces made here.
"""

from __future__ import annotations

import itertools
import os
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass, field

_count = itertools.count()


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check)


def why_not() -> str | None:
    """Why network namespaces cannot be made here (None: they can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    name = f"fl-probe-{os.getpid()}"
    r = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        return f"ip netns add failed: {r.stderr.strip()}"
    _ip("netns", "del", name, check=False)
    return None


@dataclass
class Net:
    """The namespaces made: the server's, and each tray's with its address."""

    server: str
    server_addr: dict[str, str] = field(default_factory=dict)  # tray ns -> server's address
    trays: dict[str, str] = field(default_factory=dict)  # tray ns -> its address
    nets: dict[str, str] = field(default_factory=dict)  # tray ns -> its /24

    def argv(self, ns: str, argv: list[str]) -> list[str]:
        """``argv`` run in namespace ``ns``."""
        return ["ip", "netns", "exec", ns, *argv]


@contextmanager
def namespaces(trays: int):
    """A server namespace and ``trays`` tray namespaces, tray i on its own veth pair and
    network 10.<x>.<i>.0/24 (the server .1, the tray .2); removed at the end."""
    tag = f"{os.getpid() % 100000}{next(_count)}"
    x = 200 + os.getpid() % 50
    made: list[str] = []
    net = Net(server=f"fl-test-{tag}-s")
    try:
        for ns in [net.server] + [f"fl-test-{tag}-t{i}" for i in range(trays)]:
            _ip("netns", "add", ns)
            made.append(ns)
            _ip("-n", ns, "link", "set", "lo", "up")
        for i in range(trays):
            ns = f"fl-test-{tag}-t{i}"
            a, b = f"fl{tag}s{i}"[:15], f"fl{tag}t{i}"[:15]
            _ip("link", "add", a, "netns", net.server, "type", "veth", "peer", "name", b,
                "netns", ns)  # fmt: skip
            srv, mine = f"10.{x}.{i}.1", f"10.{x}.{i}.2"
            _ip("-n", net.server, "addr", "add", f"{srv}/24", "dev", a)
            _ip("-n", ns, "addr", "add", f"{mine}/24", "dev", b)
            _ip("-n", net.server, "link", "set", a, "up")
            _ip("-n", ns, "link", "set", b, "up")
            # the server's other addresses through it (they are local to the server's
            # namespace: no forwarding, nothing leaves)
            _ip("-n", ns, "route", "add", f"10.{x}.0.0/16", "via", srv)
            net.trays[ns], net.server_addr[ns], net.nets[ns] = mine, srv, f"10.{x}.{i}.0/24"
        yield net
    finally:
        for ns in made:  # a namespace's veth ends go with it
            _ip("netns", "del", ns, check=False)


@contextmanager
def tray_namespace():
    """One tray namespace joined to this (the root) namespace by a veth pair: yields
    (the namespace, this end's address, the tray's address, their /30); for a server
    that runs here (the benchmark's).  Removed at the end."""
    tag = f"{os.getpid() % 100000}{next(_count)}"
    x = 200 + os.getpid() % 50
    ns, here, there = f"fl-bench-{tag}", f"fl{tag}h"[:15], f"fl{tag}t"[:15]
    _ip("netns", "add", ns)
    try:
        _ip("-n", ns, "link", "set", "lo", "up")
        _ip("link", "add", here, "type", "veth", "peer", "name", there, "netns", ns)
        _ip("addr", "add", f"10.{x}.250.1/30", "dev", here)
        _ip("-n", ns, "addr", "add", f"10.{x}.250.2/30", "dev", there)
        _ip("link", "set", here, "up")
        _ip("-n", ns, "link", "set", there, "up")
        yield ns, f"10.{x}.250.1", f"10.{x}.250.2", f"10.{x}.250.0/30"
    finally:
        _ip("link", "del", here, check=False)
        _ip("netns", "del", ns, check=False)
