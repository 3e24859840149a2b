"""The spec's other networks (:mod:`...model.networks`) as real Linux networking, made
and removed through netlink (pyroute2):

- every endpoint (tray, BMC, service node) and every switch is a network namespace,
  ``fl.FABRIC.NAME`` (``ip netns`` lists it; ``ip netns exec`` and ``fabriclab exec``
  run in it);
- every cable is a veth pair, each end in its namespace under the name the spec gives
  it (a tray's ``enp1s0f0np0``, a switch's ``swp3``);
- every switch namespace holds a bridge, ``br0``, whose ports are its cables' ends;
- every endpoint interface has its address, and loopback is up everywhere;
- a network's gateway is answered by its first switch (the address on its bridge), and
  an endpoint's default route is through the gateway of its front end (else in-band
  management, pod, out-of-band, storage: the first of its networks that has one);
  nothing forwards beyond, so traffic to any other address ends at the switch;
- an lldpd runs in every namespace (:mod:`.lldp`).

Nothing is made in the namespace this runs in: each cable is made in its switch's
namespace, its far end put straight into its own, and each namespace is then set up
through one netlink handle.  :func:`teardown` removes every namespace with the fabric's
prefix (and the veth ends in them with it), after ending the processes still in them:
what a crash left behind is cleaned by the next ``up`` of the same name and by ``down``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

from pyroute2 import NetNS, netns

from ...errors import InputError, Problem
from ...model.networks import Networks
from . import lldp
from .names import NETNS_DIR, existing, namespace

BRIDGE = "br0"
# which network's gateway an endpoint on several routes through by default
_ROUTE_ORDER = ("frontend", "inband", "pod", "oob", "storage")
__all__ = ["build", "check_room", "existing", "namespace", "teardown"]


# What one namespace takes, with its veth ends and its lldpd's two processes, rounded
# up: 888 MB for gb200-su's 383, 2.3 MB each (bench/networks.py, docs/networks.md#scale)
MB_PER_NAMESPACE = 2.5
ROOM_SHARE = 0.75  # of the memory the machine has available, at most


def check_room(nets: Networks, available_mb: float | None = None) -> None:
    """Refuse, in one line, networks that would take more than :data:`ROOM_SHARE` of the
    memory this machine has available (``available_mb``: MemAvailable when not given);
    beyond, the networks stay in the model (``fabriclab networks``) without namespaces."""
    if available_mb is None:
        available_mb = _mem_available_mb()
    count = len(nets.endpoints) + len(nets.switches)
    need = count * MB_PER_NAMESPACE
    if need > ROOM_SHARE * available_mb:
        raise InputError(
            [
                Problem(
                    "--networks",
                    f"{count} namespaces would take about {need:,.0f} MB and this machine "
                    f"has {available_mb:,.0f} MB available; without --networks they stay "
                    "in the model ('fabriclab networks' lists them)",
                )
            ]
        )


def _mem_available_mb() -> float:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    return float("inf")  # a kernel that does not say: not refused


def build(fabric: str, nets: Networks) -> list[str]:
    """Make ``nets`` for ``fabric`` (its leftovers removed first); the namespaces made.
    InputError when this process may not (not root)."""
    if os.geteuid() != 0:
        raise InputError([Problem("--networks", "building network namespaces needs root")])
    teardown(fabric)
    made: list[str] = []
    try:
        for node in [*nets.endpoints, *nets.switches]:
            ns = namespace(fabric, node)
            netns.create(ns)
            made.append(ns)
        _ipv4_only(made)
        _cables(fabric, nets)
        _configure(fabric, nets)
        lldp.start(fabric, nets)
    except BaseException:
        teardown(fabric)
        raise
    return made


def _ipv4_only(namespaces: list[str]) -> None:
    """IPv6 off in each of ``namespaces``, before any interface is made there.  The
    spec's networks are IPv4; with IPv6 on, every interface's router solicitations
    (repeated, with backoff, for as long as no router answers), MLD reports and
    duplicate-address probes are flooded by the bridges to every port of the network,
    and at gb200-su's size the floods overrun the kernel's per-CPU backlog, which every
    veth delivery goes through (net.core.netdev_max_backlog, 1000; one machine-wide
    setting, not ours to raise): some 40,000 packets a minute were dropped there after
    up, ARP among them."""
    netns.pushns()
    try:
        for ns in namespaces:
            netns.setns(ns, flags=0)
            for scope in ("all", "default"):  # what is there, and what comes
                with open(f"/proc/sys/net/ipv6/conf/{scope}/disable_ipv6", "w") as f:
                    f.write("1")
    finally:
        netns.popns()


def _cables(fabric: str, nets: Networks) -> None:
    """Every cable made from its switch's namespace, one handle each: the veth pair
    made there under both its final names, the far end put straight into its own
    namespace (an uplink's into the other switch's)."""
    by_switch: dict[str, list[tuple[str, tuple[str, str]]]] = {}
    for a, b in nets.links:
        near, far = (a, b) if a[0] in nets.switches else (b, a)
        by_switch.setdefault(near[0], []).append((near[1], far))
    for switch, cables in by_switch.items():
        with NetNS(namespace(fabric, switch)) as n:
            for port, (node, iface) in cables:
                peer = {"ifname": iface, "net_ns_fd": namespace(fabric, node)}
                n.link("add", ifname=port, kind="veth", peer=peer)


def _configure(fabric: str, nets: Networks) -> None:
    """In each namespace, one handle: loopback up; a switch's bridge and its ports in
    it, up; an endpoint's interfaces up with their addresses."""
    ports: dict[str, list[str]] = {}
    for link in nets.links:
        for end, name in link:
            ports.setdefault(end, []).append(name)
    gateways = {n.name: n for n in nets.networks if n.gateway}
    answering: dict[str, str] = {}  # the switch that answers for each network's gateway: its first
    for sw in nets.switches.values():
        if sw.network in gateways:
            answering.setdefault(sw.network, sw.name)
    for node in [*nets.endpoints, *nets.switches]:
        with NetNS(namespace(fabric, node)) as n:
            n.link("set", index=n.link_lookup(ifname="lo")[0], state="up")
            if node in nets.switches:
                n.link("add", ifname=BRIDGE, kind="bridge")
                br = n.link_lookup(ifname=BRIDGE)[0]
                n.link("set", index=br, state="up")
                for port in ports.get(node, []):
                    n.link("set", index=n.link_lookup(ifname=port)[0], master=br, state="up")
                net = nets.switches[node].network
                if answering.get(net) == node:
                    prefix = int(gateways[net].subnet.split("/")[1])
                    n.addr("add", index=br, address=gateways[net].gateway, prefixlen=prefix)
                continue
            for iface in nets.endpoints[node].interfaces:
                i = n.link_lookup(ifname=iface.name)[0]
                n.link("set", index=i, state="up")
                addr, length = iface.address.split("/")
                n.addr("add", index=i, address=addr, prefixlen=int(length))
            routed = [i for i in nets.endpoints[node].interfaces if i.network in gateways]
            if routed:  # the default route: by the network kinds' order, front end first
                best = min(routed, key=lambda i: _ROUTE_ORDER.index(gateways[i.network].kind))
                n.route("add", dst="default", gateway=gateways[best.network].gateway)


def _pids_in(ns: str) -> list[int]:
    """The processes whose network namespace is ``ns``."""
    try:
        ino = os.stat(os.path.join(NETNS_DIR, ns)).st_ino
    except OSError:
        return []
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if os.stat(f"/proc/{entry}/ns/net").st_ino == ino:
                    out.append(int(entry))
    return out


def teardown(fabric: str, grace: float = 2.0) -> list[str]:
    """Remove every namespace of ``fabric``, after ending the processes in them (TERM,
    then KILL after ``grace`` seconds); the namespaces removed."""
    names = existing(fabric)
    pids = [p for ns in names for p in _pids_in(ns) if p != os.getpid()]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, sig)
        deadline = time.monotonic() + grace
        while pids and time.monotonic() < deadline:
            pids = [p for p in pids if os.path.exists(f"/proc/{p}")]
            time.sleep(0.05)
    for ns in names:
        with contextlib.suppress(OSError, FileNotFoundError):
            netns.remove(ns)
    lldp.remove(fabric)
    return names
