"""The running fabric's state: what the subnet manager and the tools can read and write.

The model (:mod:`fabriclab.model.fabric`) says what is cabled and how fast; this module
holds what changes at run time: LIDs, port states, forwarding tables, P_Key, SL-to-VL
and VL-arbitration tables, alias GUIDs and counters.  A fabric comes up the way real
hardware does after power-on: every cabled port is physically up and logically INIT,
nothing is routed, and the SM drives the rest.  Ports keep the LIDs of the spec's LID
plan, as if a previous SM had assigned them; OpenSM keeps valid LIDs it finds, so the
subnet comes up with the same LIDs every time.  A cold fabric (spec ``lids.power_on:
cold``, ``fabriclab up --cold``) starts with no LIDs, and the SM assigns them.
"""

from __future__ import annotations

import functools
from array import array
from collections.abc import Callable, Iterator

from ...ib import devices
from ...ib.enums import NodeType, PhysState, PortState
from ...ib.mad.layouts import NODE_INFO
from ...ib.rates import SPEEDS, Speed, Width
from ...model.fabric import Fabric, Node, Port
from . import portinfo
from .counters import Counters
from .flat import ATTR_SIZE, Flat, FlatPort
from .switch import SimSwitch

_NDR = SPEEDS["NDR"]
# NodeInfo's LocalPortNum: the byte of its 8-bit field (14.2.5.3)
_NI_LOCAL_PORT = next(off // 8 for name, off, _ in NODE_INFO.fields if name == "LocalPort")
# LinkSpeedExtSupported bits: FDR 1, EDR 2, HDR 4, NDR 8 (the device supports every
# extended speed up to its own); LinkSpeedExtSupported2 bit 1 is XDR.
_EXT_SUPPORTED = {0: 0, 1: 0x1, 2: 0x3, 4: 0x7, 8: 0xF}
_WIDTH_1X_4X, _WIDTH_1X_2X_4X = 0x03, 0x13
# A MAD on the wire from LRH to ICRC: 8 + 12 + 8 + 256 + 4 bytes, in 4-byte words, the
# unit of PortXmitData/PortRcvData.
MAD_WORDS = 72
# SL-to-VL after reset: SL i on VL i for i < 15 (a table of 4-bit entries, 2 per byte).
DEFAULT_SL2VL = bytes.fromhex("0123456789abcde0")


class Generation:
    """A number that grows with every change that can move traffic: a forwarding-table
    write and any change of a port's state (its ``changed``).  Whoever routes flows
    over the fabric compares it with the number it routed at (one per fabric), and
    :meth:`take` says what changed since it last asked: the switches whose forwarding
    tables were written, the ports that changed, or everything (a change it was not
    told the place of)."""

    __slots__ = ("everything", "ports", "switches", "value")

    def __init__(self) -> None:
        self.value = 0
        self.everything = False
        self.switches: set[SimSwitch] = set()
        self.ports: set[SimPort] = set()

    def bump(self, switch: SimSwitch | None = None, port: SimPort | None = None) -> None:
        """Something that routes depend on changed: ``switch``'s forwarding table,
        ``port``, or (neither given) anything."""
        self.value += 1
        if switch is not None:
            self.switches.add(switch)
        elif port is not None:
            self.ports.add(port)
        else:
            self.everything = True

    def take(self) -> tuple[bool, set[SimSwitch], set[SimPort]]:
        """What changed since the last take: (everything, switches, ports)."""
        out = (self.everything, self.switches, self.ports)
        self.everything, self.switches, self.ports = False, set(), set()
        return out


@functools.lru_cache(maxsize=64)
def _power_on(switch_ext: bool, width: int, mtu: int, ext: int, ext2: int) -> array:
    """A port's PortInfo components that a Set may change, as at power-on, in the flat
    state's order (portinfo.STORED): a switch external port's (``switch_ext``) or an end
    port's, with its supported widths, MTU cap and extended speeds (a few kinds of port
    in a fabric: one row each, written at once)."""
    values = {
        "mkey": 0,
        "gid_prefix": 0 if switch_ext else 0xFE80000000000000,
        "smlid": 0,
        "mkey_lease": 0,
        "width_enabled": width,
        "link_down_def": int(PhysState.POLLING),
        "mkey_protect": 0,
        "speed_enabled": 0x7,  # SDR, DDR, QDR
        "neighbor_mtu": mtu,
        "smsl": 0,
        "vl_high_limit": 0,
        "init_reply": 0,
        "vl_stall": 7,
        "hoq_life": 31,
        "op_vls": 1,  # VL0 until the SM says more
        # Partition enforcement and raw filtering apply to switch external ports only
        # (IBA Vol. 1, 14.2.5.6: reserved on other ports; OpenSM's osm_pkey_mgr.c passes
        # only switch ports to pkey_mgr_enforce_partition).  fabriclab's switches power on
        # enforcing on every external port (ibsim's start with it off: sim_net.c swport
        # template, byte 43 = 0x40); the SM's PortInfo Set decides from then on - OpenSM
        # sets it on CA-facing ports and clears it on inter-switch links.
        "part_enf_in": 1 if switch_ext else 0,
        "part_enf_out": 1 if switch_ext else 0,
        "filter_raw_in": 0,
        "filter_raw_out": 0,
        # 16-bit violation counters (RW: the SM may clear them, 14.2.5.6)
        "mkey_violations": 0,
        "pkey_violations": 0,
        "qkey_violations": 0,
        "client_rereg": 0,
        "mcast_pkey_trap": 0,
        "subnet_timeout": 0,
        # thresholds of LocalLinkIntegrityErrors / ExcessiveBufferOverrunErrors: 0 at
        # power-on as in ibsim's port templates; OpenSM writes 8 (osm_link_mgr.c,
        # OSM_DEFAULT_ERROR_THRESHOLD)
        "local_phy_err": 0,
        "overrun_err": 0,
        "speed_ext2_enabled": ext2,
        "speed_ext_enabled": ext,
    }
    assert set(values) == set(portinfo.STORED), "power-on values for another set of fields"
    return array("Q", [values[name] for name in portinfo.STORED])


class SimPort(FlatPort):
    """One port's run-time state; ``pi`` caches its encoded PortInfo.  What the native MAD
    core reads (``phys``, ``state``, ``lid``, ``lmc``, ``peer``, ``is_endport``,
    ``mad_in``, ``mad_out``, ``pi``, ``pkeys``) lives in the fabric's flat state
    (:mod:`.flat`, row ``_r``): those attributes are properties over it."""

    __slots__ = (
        "cap_mask",
        "cap_mask2",
        "counters",
        "fabric_port",
        "fdr10_enabled",
        "gen",
        "guid",
        "guid_cap",
        "guids",
        "held",
        "node",
        "num",
        "resp_time",
        "sl2vl",
        "speed_ext2_supported",
        "speed_ext_supported",
        "speed_trained",
        "state_change_enable",
        "traffic",
        "vlarb",
        "width_supported",
        "width_trained",
    )

    def __init__(self, node: SimNode, model: Port):
        self.node = node
        self.num = model.num
        self.place(node.flat, node.first + model.num)
        self.fabric_port = model  # the port as built (cabling, link rate)
        self.guid = model.guid
        # (a fresh row of the flat state already reads: no peer, no MADs, PortInfo not
        # encoded; writing them again would cost a 32,768-HCA fabric a fifth of a second)
        caps = node.caps
        switch_ext = node.is_switch and model.num != 0
        self.is_endport = not switch_ext  # has a LID of its own: CA port or switch port 0
        self.lid = 0 if switch_ext else (node.fabric_node.lid if node.is_switch else model.lid)
        self.lmc = 0 if switch_ext else (node.fabric_node.lmc if node.is_switch else model.lmc)
        if model.num == 0:
            self.state, self.phys = PortState.ACTIVE, PhysState.LINKUP
        elif model.peer is not None:
            self.state, self.phys = PortState.INIT, PhysState.LINKUP
        else:
            self.state, self.phys = PortState.DOWN, PhysState.POLLING
        native = node.native_speed
        wide = native.order >= _NDR.order
        self.width_supported = _WIDTH_1X_2X_4X if wide else _WIDTH_1X_4X
        # an XDR device also speaks every extended speed up to NDR
        self.speed_ext_supported = 0xF if native.ext2 else _EXT_SUPPORTED.get(native.ext, 0)
        self.speed_ext2_supported = 1 if native.ext2 else 0
        self.fdr10_enabled = 1 if native.order >= SPEEDS["FDR10"].order else 0
        self.state_change_enable = 0
        self.resp_time = 16
        # what a Set may change, as at power-on: one row of the flat state
        row = _power_on(
            switch_ext,
            self.width_supported,
            caps.mtu_cap,
            self.speed_ext_supported,
            self.speed_ext2_supported,
        )
        b = self._r * len(row)
        node.flat.setv[b : b + len(row)] = row
        self.cap_mask = 0 if switch_ext else caps.cap_mask
        self.cap_mask2 = 0 if switch_ext else caps.cap_mask2
        self.guid_cap = 0 if switch_ext else caps.guid_cap
        size = caps.part_enforce_cap if switch_ext else caps.partition_cap
        self.pkeys = bytearray(2 * size)
        if size:
            self.pkeys[0:2] = b"\xff\xff"  # the default partition, full member
        self.sl2vl: dict[int, bytes] = {}  # (in port << 8 | out port) -> 8 bytes, when set
        self.vlarb: dict[int, bytes] = {}  # block 1..4 -> 64 bytes, when set
        self.guids: dict[int, bytes] = {}  # GUIDInfo blocks, when set
        self.counters = Counters()
        # data traffic through this port not yet in the counters: called with the port
        # by flush (set by a traffic engine, :mod:`..live.traffic`)
        self.traffic: Callable[[SimPort], None] | None = None
        self.gen = node.gen
        # the live fabric's faults (sim/live.py): how many faults hold the link down, and
        # the width/speed a degraded link retrained at (None: as cabled)
        self.held = 0
        self.width_trained: Width | None = None
        self.speed_trained: Speed | None = None

    # --- PortInfo -----------------------------------------------------------------

    @property
    def up(self) -> bool:
        """Whether the port's link is physically up."""
        return self.phys == PhysState.LINKUP and self.peer is not None

    def port_info(self) -> bytes:
        """The encoded PortInfo (LocalPort left 0: it depends on where the SMP came in)."""
        if self.pi is None:
            self.pi = portinfo.encode(self)
        return self.pi

    def changed(self) -> None:
        """The port's state changed: its PortInfo is encoded anew when next read, and
        routes over the fabric may have changed."""
        self.pi = None
        self.gen.bump(port=self)

    def flush(self) -> Counters:
        """The port's counters, with the MADs that crossed it since the last read."""
        c = self.counters
        if self.traffic is not None:
            self.traffic(self)
        if self.mad_out or self.mad_in:
            c.count_packets(self.mad_out, self.mad_in, MAD_WORDS)
            self.mad_out = self.mad_in = 0
        return c

    def has_lid(self, lid: int) -> bool:
        """Whether ``lid`` is one of this end port's (its base LID and LMC)."""
        return self.is_endport and self.lid != 0 and self.lid <= lid < self.lid + (1 << self.lmc)

    def ref(self) -> str:
        """The port for the log: its node's description and its number."""
        return f"{self.node.fabric_node.desc!r}[{self.num}]"

    def __repr__(self) -> str:
        return f"<SimPort {self.ref()} lid {self.lid} {PortState(self.state).name}>"


class SimNode:
    """A node as its SMA sees itself: identity, caps, ports, and a switch's tables."""

    __slots__ = (
        "_node_info",
        "caps",
        "fabric_node",
        "first",
        "flat",
        "gen",
        "index",
        "is_switch",
        "native_speed",
        "ports",
        "sw",
    )

    def __init__(
        self, model: Node, index: int, gen: Generation | None = None, flat: Flat | None = None
    ):
        self.fabric_node = model  # the node as built (identity, ports, cabling)
        self.index = index
        self.gen = gen if gen is not None else Generation()
        self.is_switch = model.type == NodeType.SWITCH
        self.flat = flat if flat is not None else Flat(index + 1, len(model.ports))
        self.first = self.flat.add_node(index, len(model.ports), self.is_switch)
        self.caps = devices.management_caps(model.devid, self.is_switch)
        self.native_speed = self._native_speed(model)
        at = index * ATTR_SIZE
        self.flat.node_desc[at : at + ATTR_SIZE] = model.desc.encode("utf-8", "replace")[
            :ATTR_SIZE
        ].ljust(ATTR_SIZE, b"\0")
        self.ports: list[SimPort | None] = [
            SimPort(self, p) if p is not None else None for p in model.ports
        ]
        self.sw = (
            SimSwitch(self.caps, model.enhanced_port0, self.gen, self.flat, index)
            if self.is_switch
            else None
        )
        self._node_info: dict[int, bytes] = {}  # through a port number with no port

    @property
    def node_desc(self) -> bytes:
        """NodeDescription (64 bytes)."""
        at = self.index * ATTR_SIZE
        return bytes(self.flat.node_desc[at : at + ATTR_SIZE])

    @staticmethod
    def _native_speed(model: Node):
        m = model.hardware
        if m is not None and getattr(m, "rate", None) in SPEEDS:
            return SPEEDS[m.rate]
        fastest = [p.speed for p in model.iter_ports() if p.peer is not None]
        return max(fastest, key=lambda s: s.order) if fastest else _NDR

    def node_info(self, local_port: int) -> bytes:
        """NodeInfo as read through ``local_port`` (LocalPortNum, and a CA's PortGUID)."""
        f = self.flat
        row = self.first + local_port
        here = 0 <= local_port < len(self.ports) and self.ports[local_port] is not None
        if here and f.ni_valid[row]:
            return bytes(f.ni[row * ATTR_SIZE : (row + 1) * ATTR_SIZE])
        ni = self._node_info.get(local_port)
        if ni is None:
            m = self.fabric_node
            port = self.ports[local_port]
            ni = NODE_INFO.pack(
                {
                    "BaseVers": 1,
                    "ClassVers": 1,
                    "NodeType": int(m.type),
                    "NumPorts": m.nports,
                    "SystemGuid": m.sysimgguid,
                    "Guid": m.guid,
                    "PortGuid": m.port_guid if self.is_switch or port is None else port.guid,
                    "PartCap": self.caps.partition_cap,
                    "DevId": m.devid,
                    "Revision": m.revision,
                    "LocalPort": local_port,
                    "VendorId": m.vendid,
                }
            )
            if not here:
                self._node_info[local_port] = ni
            elif self.is_switch:  # through every port alike but for LocalPortNum
                for p in self.ports:
                    if p is not None:
                        r = self.first + p.num
                        f.ni[r * ATTR_SIZE : (r + 1) * ATTR_SIZE] = ni
                        f.ni[r * ATTR_SIZE + _NI_LOCAL_PORT] = p.num
                        f.ni_valid[r] = 1
            else:
                f.ni[row * ATTR_SIZE : (row + 1) * ATTR_SIZE] = ni
                f.ni_valid[row] = 1
        return ni

    def port(self, num: int) -> SimPort | None:
        """Port ``num``, or None when the node has no such port."""
        if 0 <= num < len(self.ports):
            return self.ports[num]
        return None


class SimFabric:
    """Every node and port of a fabric, wired as the model cables them.  ``cold``: the
    end ports power on with no LID, as real hardware does (see :meth:`power_on_cold`)."""

    def __init__(self, fabric: Fabric, cold: bool = False):
        self.fabric = fabric
        # bumped by every forwarding-table write and port change (see Generation)
        self.generation = Generation()
        # the hot state, in flat arrays (:mod:`.flat`): a row per port number of each node
        self.flat = Flat(len(fabric.nodes), sum(len(n.ports) for n in fabric.nodes))
        self.nodes = [SimNode(n, i, self.generation, self.flat) for i, n in enumerate(fabric.nodes)]
        self.by_model: dict[int, SimNode] = {id(n.fabric_node): n for n in self.nodes}
        for sn in self.nodes:
            for sp in sn.ports:
                if sp is not None and sp.fabric_port.peer is not None:
                    far = sp.fabric_port.peer
                    sp.peer = self.by_model[id(far.node)].ports[far.num]
        if cold:
            self.power_on_cold()

    def node_of(self, model: Node) -> SimNode:
        """The run-time node of a model node."""
        return self.by_model[id(model)]

    def port_of(self, model: Port) -> SimPort:
        """The run-time port of a model port."""
        return self.by_model[id(model.node)].ports[model.num]  # type: ignore[return-value]

    def power_on_cold(self) -> None:
        """Every end port as after a real power-on with no SM yet: LID 0, LMC 0, SM LID 0
        (ibsim: its port templates hold LID 0 and SMLID 0 until an SM sets them, and
        link_ports puts a cabled port in Init, sim_net.c).  Cabled ports are already
        physically up and INIT."""
        for sn in self.nodes:
            for sp in sn.ports:
                if sp is not None and sp.is_endport:
                    sp.lid = sp.lmc = sp.smlid = 0
                    sp.changed()

    def encode_ahead(self, step: int = 250) -> Iterator[int]:
        """Encode every port's PortInfo and NodeInfo into the flat state ahead of their
        first reads, so that a discovery's or an SM's first reads are answered by the
        native core instead of each waiting for Python to encode it (about 12 µs a
        port); a step of about ``step`` ports at a time, yielding the ports encoded so
        far after each (the server does it while it has nothing else to do)."""
        n = since = 0
        for node in self.nodes:
            for p in node.ports:
                if p is not None:
                    try:
                        p.port_info()
                        node.node_info(p.num)
                    except (ValueError, OverflowError):
                        pass  # left to its first read, which answers the failure
                    n += 1
                    since += 1
            if since >= step:
                yield n
                since = 0
        yield n
