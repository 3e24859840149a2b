"""What libibnetdisc (rdma-core) finds when a tool scans the fabric from one port.

ibnetdiscover, iblinkinfo and ibqueryerrors print nodes in the order libibnetdisc
created them, reversed (each new node is pushed on the front of a list).  That order
comes from its SMP engine (``libibnetdisc/query_smp.c``): SMPs are queued FIFO, at most
``max_smps`` (default 2) are on the wire, and a subnet that answers in order (ibsim,
fabriclab's server) makes the completion callbacks run in exactly the order the SMPs
were issued.  So the scan is a FIFO of pending queries, replayed here:

- NodeInfo(node) completes: a node not seen before is created and NodeDescription,
  then (switches) SwitchInfo and PortInfo(0) are queued; for a CA, PortInfo of the port
  the NodeInfo came in through is queued (again for a CA met a second time).
- PortInfo(0) of a switch completes: PortInfo(1..N) are queued.
- PortInfo(p) completes: if the port is LinkUp and it is a switch port other than the
  one the switch was reached through (PortInfo.LocalPortNum), or it is the starting
  CA's own port, NodeInfo of the far end is queued one hop further.

A port that is LinkUp at QDR on a Mellanox device old enough to have FDR10 (see
``mlnx_ext_port_info_supported``) gets a Mellanox ExtendedPortInfo query first, and the
walk goes on from that answer instead (``IBND_CONFIG_MLX_EPI``, on by default).

``total_mads`` and ``max_hops`` are what ``ibnetdiscover -m`` reports.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from ..ib.devices import mlnx_ext_port_info_supported
from ..model.fabric import Fabric, Node, Port

_NODE_INFO, _PORT_INFO, _PORT0_INFO, _OTHER, _EXT_PORT_INFO = 0, 1, 2, 3, 4


@dataclass
class Scan:
    """What one scan found: nodes in creation order, the CA ports reached, and ``-m``'s
    MAD and hop counts."""

    start: Port
    created: list[Node]  # creation order
    ca_ports: dict[int, set[int]] = field(default_factory=dict)  # id(node) -> ports reached
    total_mads: int = 0
    max_hops: int = 0

    @property
    def nodes(self) -> list[Node]:
        """All nodes, most recently created first (``ibnd_iter_nodes``)."""
        return self.created[::-1]

    def of_type(self, switch: bool) -> list[Node]:
        """Switches or non-switches, most recent first (``ibnd_iter_nodes_type``)."""
        return [n for n in reversed(self.created) if n.is_switch == switch]

    def ports(self, node: Node) -> list[Port]:
        """The ports libibnetdisc holds for a node: every port of a switch, the ports a
        CA was reached through."""
        if node.is_switch:
            return [p for p in node.ports[1:] if p is not None]
        nums = self.ca_ports.get(id(node), ())
        return [node.ports[n] for n in sorted(nums)]  # type: ignore[misc]


def scan(fabric: Fabric, start: Port) -> Scan:
    """Replay libibnetdisc's discovery from ``start`` (a CA port)."""
    if start.node.is_switch:
        raise ValueError("a scan starts from a CA port")
    created: list[Node] = []
    ingress: dict[int, int] = {}
    ca_ports: dict[int, set[int]] = {}
    q: deque = deque([(_NODE_INFO, start.node, start.num, 0)])
    mads = 0
    max_hops = 0
    start_node, start_num = start.node, start.num
    popleft, append = q.popleft, q.append
    while q:
        ev = popleft()
        mads += 1
        kind = ev[0]
        if kind == _PORT_INFO or kind == _EXT_PORT_INFO:
            _, node, num, hops = ev
            port = node.ports[num]
            if port is None or not port.up:
                continue
            if (
                kind == _PORT_INFO
                and port.speed.speed == 4
                and not port.speed.ext
                and not port.speed.ext2
                and mlnx_ext_port_info_supported(node.vendid, node.devid)
            ):
                append((_EXT_PORT_INFO, node, num, hops))
                continue
            if node.is_switch:
                if num == ingress[id(node)]:
                    continue
            elif not (node is start_node and num == start_num and hops == 0):
                continue
            peer = port.peer
            append((_NODE_INFO, peer.node, peer.num, hops + 1))
            if hops + 1 > max_hops:
                max_hops = hops + 1
        elif kind == _NODE_INFO:
            _, node, num, hops = ev
            key = id(node)
            if key not in ingress:
                ingress[key] = num
                created.append(node)
                append((_OTHER,))  # NodeDescription
                if node.is_switch:
                    append((_OTHER,))  # SwitchInfo
                    append((_PORT0_INFO, node, hops))
            if not node.is_switch:
                ca_ports.setdefault(key, set()).add(num)
                append((_PORT_INFO, node, num, hops))
        elif kind == _PORT0_INFO:
            _, node, hops = ev
            for num in range(1, node.nports + 1):
                append((_PORT_INFO, node, num, hops))
    return Scan(start, created, ca_ports, mads, max_hops)
