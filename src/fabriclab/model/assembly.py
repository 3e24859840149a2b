"""A fabric while it is built from a spec: the nodes made so far, the spec path each comes
from (for error messages), the names taken, the GUIDs handed out, and cabling."""

from __future__ import annotations

from ..errors import Problem, SpecError
from ..ib import rates
from ..ib.devices import mlnx_ext_port_info_supported
from ..ib.ids import MAX_PORTS, NODE_DESC_BYTES
from ..spec.schema import Spec
from .cluster import Tray
from .fabric import Fabric, FabricError, Node, Port
from .guids import GuidAllocator


def spec_error(where: str, what: str) -> SpecError:
    """The SpecError for one problem at one spec path."""
    return SpecError([Problem(where, what)])


class Assembly:
    """The fabric under construction and what the build steps share about it."""

    def __init__(self, spec: Spec):
        self.spec = spec
        self.fabric = Fabric()
        self.guids = GuidAllocator(spec.guids.scheme)
        self.trays: list[Tray] = []
        self.switch_by_name: dict[str, Node] = {}
        self.ca_by_name: dict[str, Node] = {}
        self.where: dict[int, str] = {}  # id(node) -> the spec path it comes from
        self.ca_ports = 0  # end ports of CAs, counted before anything is built

    def add(self, node: Node, where: str) -> Node:
        """Add a node that ``where`` in the spec describes, checking what a node can hold."""
        size = len(node.desc.encode())
        if size > NODE_DESC_BYTES:
            raise spec_error(
                where,
                f"description {node.desc[:40]!r}… is {size} bytes; a NodeDescription "
                f"holds {NODE_DESC_BYTES} (IBA 14.2.5.2)",
            )
        if not 1 <= node.nports <= MAX_PORTS:
            raise spec_error(where, f"{node.nports} ports; a node has 1-{MAX_PORTS}")
        try:
            self.fabric.add(node)
        except FabricError as e:
            raise spec_error(where, str(e)) from None
        self.where[id(node)] = where
        return node

    def cable(self, a: Port, b: Port, width: rates.Width, speed: rates.Speed) -> None:
        """Cable two ports.  FDR10 is Mellanox's own rate, switched on through Mellanox
        ExtendedPortInfo: a link trains at FDR10 only when both ends speak it (the list
        libibnetdisc and opensm use), otherwise at QDR."""
        if speed.fdr10 and not (
            mlnx_ext_port_info_supported(a.node.vendid, a.node.devid)
            and mlnx_ext_port_info_supported(b.node.vendid, b.node.devid)
        ):
            speed = rates.SPEEDS["QDR"]
        self.fabric.connect(a, b, width, speed)
