"""The InfiniBand fabric: nodes, ports and the links between them.

This is what the hardware shows to management software, nothing more: every field here
travels in some MAD (NodeInfo, NodeDescription, PortInfo, SwitchInfo) or is the
physical cabling.  Trays, GPUs and NVLink live in :mod:`fabriclab.model.cluster`.

Objects use ``__slots__``: a 32,768-HCA three-tier fabric has about 200,000 ports.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..ib.enums import NodeType, PhysState
from ..ib.rates import SPEEDS, WIDTHS, Speed, Width

DOWN_WIDTH, DOWN_SPEED = WIDTHS["4x"], SPEEDS["SDR"]


class Port:
    """One port of a node: its GUID, LID and LMC, and the port it is cabled to with the
    link's width and speed."""

    __slots__ = ("guid", "lid", "lmc", "node", "num", "peer", "phys", "speed", "width")

    def __init__(self, node: Node, num: int, guid: int, lid: int = 0, lmc: int = 0):
        self.node = node
        self.num = num
        self.guid = guid
        self.lid = lid
        self.lmc = lmc
        self.peer: Port | None = None
        # What PortInfo shows for a port with no link: LinkWidthActive 4x and
        # LinkSpeedActive SDR, as ibsim and real unconnected switch ports report.
        self.width: Width = DOWN_WIDTH
        self.speed: Speed = DOWN_SPEED
        self.phys = PhysState.POLLING

    @property
    def up(self) -> bool:
        """Cabled and LinkUp."""
        return self.peer is not None and self.phys == PhysState.LINKUP

    @property
    def base_lid(self) -> int:
        """The LID tools print for this port: a switch port shows the switch's LID."""
        return self.node.lid if self.node.type == NodeType.SWITCH else self.lid

    def ref(self) -> str:
        """``NODE-ID[PORT]``, as messages name a port."""
        return f"{self.node.label}[{self.num}]"

    def __repr__(self) -> str:
        return f"<Port {self.ref()}>"


class Node:
    """A switch, CA or router: what its NodeInfo, NodeDescription and SwitchInfo show,
    its ports, and where it sits in the cluster (name, role, tier, host)."""

    __slots__ = (
        "desc",
        "devid",
        "enhanced_port0",
        "guid",
        "hardware",
        "hca",
        "host",
        "ident",
        "lid",
        "lmc",
        "name",
        "nports",
        "port_guid",
        "ports",
        "revision",
        "role",
        "sysimgguid",
        "tier",
        "type",
        "vendid",
    )

    def __init__(
        self,
        type: NodeType,
        guid: int,
        nports: int,
        desc: str,
        *,
        vendid: int = 0,
        devid: int = 0,
        revision: int = 0,
        sysimgguid: int | None = None,
        port_guid: int | None = None,
        name: str | None = None,
        role: str = "",
        tier: int = 0,
        host: str | None = None,
        hca: str | None = None,
        ident: str | None = None,
        hardware=None,
    ):
        self.type = type
        self.guid = guid
        self.nports = nports
        self.desc = desc
        self.vendid = vendid
        self.devid = devid
        self.revision = revision
        self.sysimgguid = guid if sysimgguid is None else sysimgguid
        # NodeInfo.PortGUID: for a switch the port-0 GUID; for a CA the GUID of the
        # port the NodeInfo was read through (here: its first port).
        self.port_guid = guid if port_guid is None else port_guid
        self.lid = 0  # switch port 0 LID (switches only)
        self.lmc = 0
        self.enhanced_port0 = False
        self.name = name
        self.role = role  # "leaf", "spine", "core", "hca", "aggregation", ...
        self.tier = tier  # 0 = end node, 1 = leaf, 2 = spine, 3 = core
        self.host = host
        self.hca = hca
        # ibnetdiscover's quoted node id when it is not "<prefix>-<guid>" (ibsim nets).
        self.ident = ident
        self.hardware = hardware  # devices.SwitchModel / CaModel when built from a spec
        first = 0 if type == NodeType.SWITCH else 1
        self.ports: list[Port | None] = [None] * (nports + 1)
        for n in range(first, nports + 1):
            self.ports[n] = Port(self, n, self.port_guid_for(n))

    def port_guid_for(self, num: int) -> int:
        """Port GUID plan: a switch's ports all carry the port-0 GUID; a single-port CA's
        port carries the node GUID (mlx5: one port per device); a multi-port CA's port N
        carries node GUID + N (the mlx4 / ibsim convention)."""
        if self.type == NodeType.SWITCH:
            return self.port_guid
        if self.nports == 1:
            return self.port_guid
        return self.guid + num

    @property
    def label(self) -> str:
        """The id ibnetdiscover prints in quotes, without the quotes."""
        if self.ident is not None:
            return self.ident
        return f"{self.type.prefix}-{self.guid:016x}"

    @property
    def is_switch(self) -> bool:
        """Whether the node is a switch."""
        return self.type == NodeType.SWITCH

    def port(self, num: int) -> Port:
        """Port ``num``; IndexError when the node has no such port."""
        if not 0 <= num <= self.nports or self.ports[num] is None:
            raise IndexError(f"{self.label} has no port {num}")
        return self.ports[num]  # type: ignore[return-value]

    def iter_ports(self) -> Iterator[Port]:
        """The node's ports in number order (a switch's port 0 first)."""
        for p in self.ports:
            if p is not None:
                yield p

    def __repr__(self) -> str:
        return f"<Node {self.label} {self.desc!r}>"


class FabricError(ValueError):
    """A fabric that cannot be built as asked (port in use, duplicate GUID, ...)."""


class Fabric:
    """A set of nodes and the links between their ports."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self.adaptive_routing = False  # the switches spread packets over equal-cost ports
        self.by_guid: dict[int, Node] = {}
        self.by_label: dict[str, Node] = {}
        # description or name -> the first node with it (built when first looked in)
        self._by_text: dict[str, Node] | None = None

    def add(self, node: Node) -> Node:
        """Add a node; FabricError when its GUID or id is taken."""
        if node.guid in self.by_guid and node.ident is None:
            other = self.by_guid[node.guid]
            raise FabricError(
                f"GUID 0x{node.guid:016x} of {node.desc!r} is already used by {other.desc!r}"
            )
        if node.label in self.by_label:
            raise FabricError(f"node id {node.label!r} appears twice")
        self.nodes.append(node)
        self._by_text = None
        self.by_guid.setdefault(node.guid, node)
        self.by_label[node.label] = node
        return node

    def remove(self, node: Node) -> None:
        """Take a node out of the fabric; the ports it was cabled to go down."""
        for p in node.iter_ports():
            q = p.peer
            if q is not None:
                q.peer = None
                q.width, q.speed, q.phys = DOWN_WIDTH, DOWN_SPEED, PhysState.POLLING
                p.peer = None
        self.nodes.remove(node)
        self._by_text = None
        if self.by_guid.get(node.guid) is node:
            del self.by_guid[node.guid]
        self.by_label.pop(node.label, None)

    def connect(self, a: Port, b: Port, width: Width, speed: Speed) -> None:
        """Cable two free ports at this width and speed (both come up LinkUp);
        FabricError for a port in use, a port cabled to itself, or a switch's port 0."""
        if a is b:
            raise FabricError(f"{a.ref()} cannot be cabled to itself")
        for p in (a, b):
            if p.peer is not None:
                raise FabricError(f"{p.ref()} ({p.node.desc}) is already cabled to {p.peer.ref()}")
            if p.num == 0:
                raise FabricError(f"{p.ref()}: switch port 0 is internal and cannot be cabled")
        a.peer, b.peer = b, a
        for p in (a, b):
            p.width, p.speed, p.phys = width, speed, PhysState.LINKUP

    def switches(self) -> list[Node]:
        """The switches, in node order."""
        return [n for n in self.nodes if n.type == NodeType.SWITCH]

    def cas(self) -> list[Node]:
        """The CAs and routers, in node order."""
        return [n for n in self.nodes if n.type != NodeType.SWITCH]

    def links(self) -> Iterator[tuple[Port, Port]]:
        """Each cable once, from the end that comes first in node order."""
        index = {id(n): i for i, n in enumerate(self.nodes)}
        for n in self.nodes:
            for p in n.iter_ports():
                q = p.peer
                if q is None:
                    continue
                if (index[id(n)], p.num) < (index[id(q.node)], q.num):
                    yield p, q

    def link_count(self) -> int:
        """How many cables the fabric has."""
        return sum(1 for _ in self.links())

    def find(self, text: str) -> Node | None:
        """A node by id (``S-…``), GUID (``0x…``), or description."""
        if text in self.by_label:
            return self.by_label[text]
        try:
            g = int(text, 16) if text.lower().startswith("0x") else None
        except ValueError:
            g = None
        if g is not None and g in self.by_guid:
            return self.by_guid[g]
        if self._by_text is None:  # a fault request names a node: a dict, not a walk
            by_text: dict[str, Node] = {}
            for n in self.nodes:
                by_text.setdefault(n.desc, n)
                if n.name is not None:
                    by_text.setdefault(n.name, n)
            self._by_text = by_text
        return self._by_text.get(text)

    # --- comparison --------------------------------------------------------------
    def signature(
        self, *, rates: bool = True, lids: bool = True, ca_port_guids: bool = True
    ) -> tuple[frozenset, frozenset]:
        """What two fabrics must share to be the same fabric to management software:
        nodes (identity, description, device ids, port count, LIDs) and links (with
        their width and speed).  Down ports and cluster-level names are not part of it.
        """
        nodes = set()
        for n in self.nodes:
            lid = (n.lid, n.lmc) if (lids and n.is_switch) else None
            up_ports = tuple(
                (p.num, p.guid if ca_port_guids else None, (p.lid, p.lmc) if lids else None)
                for p in n.iter_ports()
                if p.peer is not None and not n.is_switch
            )
            nodes.add(
                (
                    n.type,
                    n.guid,
                    n.label,
                    n.desc,
                    n.nports,
                    n.vendid,
                    n.devid,
                    n.sysimgguid,
                    n.port_guid if n.is_switch else None,
                    n.enhanced_port0 if n.is_switch else None,
                    lid,
                    up_ports,
                )
            )
        links = set()
        for a, b in self.links():
            ends = sorted([(a.node.label, a.num), (b.node.label, b.num)])
            extra = (a.width.token, a.speed.token) if rates else None
            links.add((ends[0], ends[1], extra))
        return frozenset(nodes), frozenset(links)

    def same_as(self, other: Fabric, **kw) -> bool:
        """Whether two fabrics have the same signature (see ``signature`` for ``kw``)."""
        return self.signature(**kw) == other.signature(**kw)


def diff_signatures(a: Fabric, b: Fabric, limit: int = 10, **kw) -> list[str]:
    """Human-readable differences between two fabrics (for test failure messages)."""
    (an, al), (bn, bl) = a.signature(**kw), b.signature(**kw)
    out: list[str] = []
    for label, x, y in (("node", an, bn), ("link", al, bl)):
        for item in sorted(x - y, key=repr)[:limit]:
            out.append(f"- {label} only in first: {item}")
        for item in sorted(y - x, key=repr)[:limit]:
            out.append(f"+ {label} only in second: {item}")
    return out
