"""A name turned into what the real tools want: the nodes it stands for, their GUIDs, and
each port's LID and LMC (``fabriclab locate``).

A name is a tray (every HCA of it), ``HOST/HCA``, ``HOST:HCA[:PORT]``, a switch or CA by
name, description, node id or GUID, ``NODE[PORT]`` (that port alone), or a LID (decimal,
or ``0x…`` when no GUID is that number).  Names resolve through :meth:`Cluster.locate`;
a name that names nothing is an :class:`InputError` suggesting the nearest names.

The LIDs are the spec's LID plan, or, through ``lids``, those a running fabric's SM has
given now (a cold fabric's are 0 until it has).
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import InputError, Problem
from ..ib.ids import LID_MAX
from ..spec.schema import parse_endpoint
from .cluster import UNKNOWN, Cluster
from .fabric import Node, Port

# (base LID, LMC) of a port: a switch port shows the switch's (port 0's)
Lids = Callable[[Port], tuple[int, int]]
Peer = Callable[[Port], "Port | None"]


def planned_lids(port: Port) -> tuple[int, int]:
    """A port's LID and LMC as the spec's LID plan gives them."""
    node = port.node
    return (node.lid, node.lmc) if node.is_switch else (port.lid, port.lmc)


def cabled_peer(port: Port) -> Port | None:
    """The port at the far end of ``port``'s cable, as built."""
    return port.peer


def lookup(
    cluster: Cluster,
    text: str,
    *,
    lids: Lids = planned_lids,
    peer: Peer = cabled_peer,
    source: str = "spec",
) -> dict:
    """What ``text`` names, as ``locate --json`` prints it: ``{"query", "source",
    "nodes": [...]}``, each node with its ports (see :func:`node_json`).  ``lids`` and
    ``peer`` say each port's LIDs and far end (the running fabric's, for a live one);
    ``source`` says whose LIDs they are."""
    query = text.strip() if isinstance(text, str) else ""
    if not query:
        raise InputError([Problem("NAME", "an empty name")])
    found = _resolve(cluster, query, lids)
    nodes = [node_json(n, lids, peer, only) for n, only in found]
    return {"query": query, "source": source, "nodes": nodes}


def node_json(node: Node, lids: Lids, peer: Peer, only: int | None = None) -> dict:
    """A node and its ports (port ``only`` alone when given; a switch's port 0 and its
    cabled ports; a CA's every port): number, GUID, LID, LMC and far end."""
    if only is not None:
        ports = [node.port(only)]
    elif node.is_switch:
        ports = [p for p in node.iter_ports() if p.num == 0 or peer(p) is not None]
    else:
        ports = list(node.iter_ports())
    return {
        "type": node.type.name.lower(),
        "name": node.name,
        "description": node.desc,
        "id": node.label,
        "guid": _guid(node.guid),
        "host": node.host,
        "hca": node.hca,
        "ports": [_port_json(p, lids, peer) for p in ports],
    }


def _port_json(p: Port, lids: Lids, peer: Peer) -> dict:
    lid, lmc = lids(p)
    far = peer(p)
    return {
        "port": p.num,
        "guid": _guid(p.guid),
        "lid": lid,
        "lmc": lmc,
        "peer": f"{far.node.name or far.node.desc}[{far.num}]" if far is not None else None,
    }


def _guid(value: int) -> str:
    return f"0x{value:016x}"


def _resolve(cluster: Cluster, text: str, lids: Lids) -> list[tuple[Node, int | None]]:
    """The nodes ``text`` names, each with the one port it names (None: every port)."""
    tray = cluster.tray(text)
    if tray is not None:
        if not tray.hcas:
            raise InputError([Problem(text, f"tray {text!r} has no HCA")])
        return [(h, None) for h in tray.hcas]
    end = parse_endpoint(text)
    if end is not None:
        port, problem = cluster.locate(f"{end[0]}:{end[1]}", switches=True, nearest=False)
        if port is None and problem.startswith(UNKNOWN):
            raise _nothing(cluster, text, end[0])
        if port is None:
            raise InputError([Problem(text, problem)])
        return [(port.node, port.num)]
    port, problem = cluster.locate(text, switches=True, nearest=False)
    if port is not None:
        return [(port.node, None)]
    if not problem.startswith(UNKNOWN):
        raise InputError([Problem(text, problem)])
    lid = _lid_number(text)
    if lid is not None:
        node = _by_lid(cluster, lid, lids)
        if node is None:
            raise InputError([Problem(text, f"no port has LID {lid} in this fabric")])
        return [(node, None)]
    raise _nothing(cluster, text, text)


def _lid_number(text: str) -> int | None:
    """The LID ``text`` writes (decimal, or hexadecimal with ``0x``), else None."""
    try:
        lid = int(text, 16) if text.lower().startswith("0x") else int(text, 10)
    except ValueError:
        return None
    return lid if 0 < lid <= LID_MAX else None


def _by_lid(cluster: Cluster, lid: int, lids: Lids) -> Node | None:
    """The node one of whose ports has ``lid`` (its base LID and LMC)."""
    for node in cluster.fabric.nodes:
        for p in node.iter_ports():
            base, lmc = lids(p)
            if base and base <= lid < base + (1 << lmc):
                return node
            if node.is_switch:
                break  # every port of a switch shows port 0's LID
    return None


def _nothing(cluster: Cluster, text: str, name: str) -> InputError:
    """The error for ``name`` (in ``text``) naming nothing, with the nearest names."""
    hint = cluster.did_you_mean(name)
    return InputError(
        [Problem(text, f"no tray, switch, HCA, GUID or LID {name!r} in this fabric{hint}")]
    )
