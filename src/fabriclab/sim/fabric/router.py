"""How a MAD crosses the fabric: LID routing through the switches' forwarding tables
and directed routes (IBA Vol. 1, 14.2.2), counted in the ports' counters as it goes.

LID-routed SMPs travel on VL15 and need only physically up links (a port in INIT
passes them); every other packet needs both ends ACTIVE.  A switch drops a packet whose
DLID has no forwarding entry (PortRcvSwitchRelayErrors on the port it came in), and a
port that cannot send it counts PortXmitDiscards.

PortRcvSwitchRelayErrors counts "packets received on the port that were discarded
because they could not be forwarded by the switch relay" (IBA Vol. 1, 16.1.3.5,
PortCounters; NVIDIA's UFM manual, "Supported Port Counters", quotes it).  A packet a
switch sends itself from its port 0 (a Notice to its SM, an answer to a LID-routed
request) was received on no port: with no entry for its DLID yet it is dropped where it
starts, and no port counts it.  That is what a fresh subnet sends: OpenSM's LID manager
resets the link of every CA port whose NeighborMTU or OperVLs it changes (PortState
Down, opensm/osm_lid_mgr.c, "Sending Link Down ... due to op_vls or mtu change"), and
the leaf at the other end sends trap 128 to the SM's LID before the SM has written any
forwarding table (the ucast manager runs after the LID manager, osm_state_mgr.c); the SM
learns of the change from SwitchInfo.PortStateChange on its next sweep instead.  ibsim
counts such a Notice at port 0 (ibsim/sim_mad.c, lid_route_MAD from send_trap), but
sends none while an SM configures the subnet: its PortInfo Set of PortState Down sends
no trap (sim_mad.c, do_portinfo).

Each function returns the ports the MAD crossed, as (egress, ingress) pairs, so that an
answer travelling back the same way is counted without walking the route again.
"""

from __future__ import annotations

from ...ib.enums import PhysState, PortState
from .state import SimPort

MAX_HOPS = 64
_LINKUP, _ACTIVE = PhysState.LINKUP, PortState.ACTIVE

Hops = list[tuple[SimPort, SimPort]]


def _cross(egress: SimPort, smp: bool, hops: Hops) -> SimPort | None:
    """Send a packet out of ``egress``; the port it arrives at, or None if it is lost."""
    ingress = egress.peer
    if (
        ingress is None
        or egress.phys != _LINKUP
        or ingress.phys != _LINKUP
        or (not smp and (egress.state != _ACTIVE or ingress.state != _ACTIVE))
    ):
        egress.counters.add("PortXmitDiscards")
        return None
    egress.mad_out += 1
    ingress.mad_in += 1
    hops.append((egress, ingress))
    return ingress


def recount(hops: Hops) -> None:
    """A packet taking a route already walked (and remembered): count it on the way."""
    for egress, ingress in hops:
        egress.mad_out += 1
        ingress.mad_in += 1


def retrace(hops: Hops) -> None:
    """An answer going back along ``hops`` (the links are as they were a moment ago)."""
    for egress, ingress in hops:
        ingress.mad_out += 1
        egress.mad_in += 1


def lid_route(src: SimPort, dlid: int, smp: bool) -> tuple[SimPort | None, Hops]:
    """The end port a packet from ``src`` to ``dlid`` reaches (or None), and its hops."""
    hops: Hops = []
    if src.has_lid(dlid):
        return src, hops
    port: SimPort | None = src
    if not src.node.is_switch:
        port = _cross(src, smp, hops)
    for _ in range(MAX_HOPS):
        if port is None:
            return None, hops
        node = port.node
        if not node.is_switch:
            return (port if port.has_lid(dlid) else None), hops
        out = node.sw.out_port(dlid)  # type: ignore[union-attr]
        if out == 0:
            p0 = node.ports[0]
            return (p0 if p0 is not None and p0.has_lid(dlid) else None), hops
        egress = node.port(out) if out != 0xFF else None
        if egress is None:
            if port.num:  # received over a link (port 0 sends; it receives nothing)
                port.counters.add("PortRcvSwitchRelayErrors")
            return None, hops
        port = _cross(egress, smp, hops)
    return None, hops


def dr_out(src: SimPort, path, hop_count: int) -> tuple[SimPort | None, bytearray, Hops]:
    """Follow a directed route's initial path (``path[1..hop_count]`` are egress ports)
    from ``src``: the port it ends at, the return path (``[0]`` the port it left the
    source by, ``[k]`` the port it entered hop k by), and its hops."""
    rpath = bytearray(64)
    hops: Hops = []
    port = src
    for ptr in range(1, hop_count + 1):
        node = port.node
        ports = node.ports
        num = path[ptr]
        egress = ports[num] if 0 < num < len(ports) else None
        if egress is None:
            return None, rpath, hops
        if not node.is_switch and (ptr > 1 or egress is not port):
            return None, rpath, hops  # a CA sends only through its own port, forwards nothing
        rpath[ptr - 1] = num if ptr == 1 else port.num
        # _cross, inlined: this loop runs for every hop of every directed-route SMP
        ingress = egress.peer
        if ingress is None or egress.phys != _LINKUP or ingress.phys != _LINKUP:
            egress.counters.add("PortXmitDiscards")
            return None, rpath, hops
        egress.mad_out += 1
        ingress.mad_in += 1
        hops.append((egress, ingress))
        port = ingress
    rpath[hop_count] = port.num
    return port, rpath, hops


def dr_in(src: SimPort, rpath: bytes | memoryview, hop_count: int) -> SimPort | None:
    """Follow a directed-route response back along its return path from ``src``; the
    port it reaches on the requester's node, or None."""
    hops: Hops = []
    port = src
    for ptr in range(hop_count, 0, -1):
        egress = port.node.port(rpath[ptr])
        if egress is None:
            return None
        nxt = _cross(egress, True, hops)
        if nxt is None:
            return None
        port = nxt
    return port


class Router:
    """The routing functions with a memory: a route found once is reused until the
    fabric changes under it.  Directed routes depend only on which links are up; LID
    routes also on the forwarding tables and LIDs, so every SMA Set forgets them.  A
    link that changes forgets only the routes that cross it (each remembered route is
    filed under the ports it leaves by), so that a storm of flaps does not make every
    MAD walk its path again.  (An SM configuring the fabric sweeps the same paths again
    and again: a cached route costs a dictionary lookup instead of a walk.)"""

    LIMIT = 1 << 18  # routes kept before the memory starts over

    def __init__(self) -> None:
        self._dr: dict = {}
        self._lid: dict = {}
        # port -> the keys of the routes remembered leaving by it (some since forgotten)
        self._dr_by: dict[SimPort, list] = {}
        self._lid_by: dict[SimPort, list] = {}
        self._filed = 0  # entries in those lists

    def forget(self, links: bool = True) -> None:
        """Forget LID routes, and directed routes too when ``links`` changed."""
        self._lid.clear()
        self._lid_by.clear()
        if links:
            self._dr.clear()
            self._dr_by.clear()
            self._filed = 0

    def forget_links(self, ports) -> None:
        """The links of ``ports`` changed (down, up, retrained): forget the routes that
        cross them, at either end."""
        for p in ports:
            for q in (p, p.peer):
                if q is None:
                    continue
                for key in self._dr_by.pop(q, ()):
                    self._dr.pop(key, None)
                for key in self._lid_by.pop(q, ()):
                    self._lid.pop(key, None)

    def _file(self, by: dict, key, hops) -> None:
        if self._filed >= 4 * self.LIMIT:  # stale entries pile up: start over
            self.forget(links=True)
            return
        for egress, _ in hops:
            filed = by.get(egress)
            if filed is None:
                by[egress] = [key]
            else:
                filed.append(key)
        self._filed += len(hops)

    def dr_out(self, src: SimPort, path, hop_count: int):
        """``dr_out`` remembered; returns (dest or None, return path, hops)."""
        key = (src, bytes(path[1 : hop_count + 1]))
        r = self._dr.get(key)
        if r is not None:
            recount(r[2])
            return r
        dest, rpath, hops = dr_out(src, path, hop_count)
        if dest is None:  # not remembered: a lost MAD counts its discard every time
            return None, rpath, hops
        if len(self._dr) >= self.LIMIT:
            self._dr.clear()
        r = self._dr[key] = (dest, bytes(rpath), tuple(hops))
        self._file(self._dr_by, key, hops)
        return r

    def lid_route(self, src: SimPort, dlid: int, smp: bool):
        """``lid_route`` remembered; returns (dest or None, hops)."""
        key = (src, dlid, smp)
        r = self._lid.get(key)
        if r is not None:
            recount(r[1])
            return r
        r = lid_route(src, dlid, smp)
        if r[0] is not None:
            if len(self._lid) >= self.LIMIT:
                self._lid.clear()
            self._lid[key] = (r[0], tuple(r[1]))
            self._file(self._lid_by, key, r[1])
        return r
