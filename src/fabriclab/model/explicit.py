"""Explicit fabrics: the switches, extra CAs and cables a spec lists one by one (what
``fabriclab import`` writes), cabled to the trays' HCAs by ``HOST/HCA`` names."""

from __future__ import annotations

from ..ib import devices, rates
from ..ib.enums import NodeType
from ..spec.schema import CaSpec, Explicit, SwitchSpec
from .assembly import Assembly, spec_error
from .cluster import Tray
from .fabric import FabricError, Node, Port

WHERE = "fabric.explicit"


def build_explicit(assembly: Assembly, ex: Explicit) -> None:
    """Add the listed switches and CAs, then cable the listed links."""
    for i, s in enumerate(ex.switches):
        _switch(assembly, s, f"{WHERE}.switches[{i}]")
    for i, c in enumerate(ex.cas):
        _ca(assembly, c, f"{WHERE}.cas[{i}]")
    tray_by_host = {t.host: t for t in assembly.trays}
    default_width, default_speed = rates.width(ex.width), rates.speed(ex.rate)
    for i, link in enumerate(ex.links):
        where = f"{WHERE}.links[{i}]"
        a = _endpoint(assembly, tray_by_host, link.a, link.a_port, where)
        b = _endpoint(assembly, tray_by_host, link.b, link.b_port, where)
        width = rates.width_or_unknown(link.width) if link.width else default_width
        speed = rates.speed_or_unknown(link.speed) if link.speed else default_speed
        try:
            assembly.cable(a, b, width, speed)
        except FabricError as e:
            raise spec_error(where, str(e)) from None


def _switch(assembly: Assembly, s: SwitchSpec, where: str) -> None:
    if s.name in assembly.switch_by_name or s.name in assembly.ca_by_name:
        raise spec_error(f"{where}.name", f"name {s.name!r} appears twice")
    model = devices.switch_model(s.model)
    guid = (
        s.guid
        if s.guid is not None
        else assembly.guids.allocate(assembly.spec.guids.switch_prefix, s.name)
    )
    node = Node(
        NodeType.SWITCH,
        guid,
        s.ports or model.nports,
        s.desc if s.desc is not None else model.desc.format(name=s.name),
        vendid=s.vendid if s.vendid is not None else model.vendid,
        devid=s.devid if s.devid is not None else model.devid,
        revision=model.revision,
        sysimgguid=s.sysimgguid,
        port_guid=s.port_guid,
        name=s.name,
        role="switch",
        tier=s.tier or 0,
    )
    node.enhanced_port0 = model.enhanced_port0 if s.enhanced_port0 is None else s.enhanced_port0
    node.lid = s.lid or 0
    node.lmc = s.lmc
    assembly.add(node, where)
    assembly.switch_by_name[s.name] = node


def _ca(assembly: Assembly, c: CaSpec, where: str) -> None:
    if c.name in assembly.switch_by_name or c.name in assembly.ca_by_name:
        raise spec_error(f"{where}.name", f"name {c.name!r} appears twice")
    guid = (
        c.guid
        if c.guid is not None
        else assembly.guids.allocate(
            assembly.spec.guids.ca_prefix, c.name, span=1 if c.ports == 1 else c.ports + 1
        )
    )
    node_type = NodeType.ROUTER if c.type == "router" else NodeType.CA
    node = Node(
        node_type,
        guid,
        c.ports,
        c.desc,
        vendid=c.vendid,
        devid=c.devid,
        sysimgguid=c.sysimgguid,
        port_guid=c.port_guids[0] if c.port_guids else None,
        name=c.name,
        role="aggregation" if c.desc == devices.AGGREGATION_NODE_DESC else "ca",
    )
    if c.port_guids:
        if len(c.port_guids) != c.ports:
            raise spec_error(
                f"{where}.port_guids", f"{len(c.port_guids)} GUIDs for {c.ports} ports"
            )
        for port, port_guid in zip(node.iter_ports(), c.port_guids, strict=False):
            port.guid = port_guid
    if c.lids:
        for port, lid in zip(node.iter_ports(), c.lids, strict=False):
            port.lid = lid
    assembly.add(node, where)
    assembly.ca_by_name[c.name] = node


def _endpoint(
    assembly: Assembly, tray_by_host: dict[str, Tray], name: str, port: int, where: str
) -> Port:
    """The port a link names: ``SWITCH``, ``CA`` or ``HOST/HCA``, and its number."""
    node = assembly.switch_by_name.get(name) or assembly.ca_by_name.get(name)
    if node is None and "/" in name:
        host, hca = name.split("/", 1)
        tray = tray_by_host.get(host)
        node = tray.hca(hca) if tray else None
    if node is None:
        raise spec_error(where, f"no switch, tray HCA or CA named {name!r}")
    if not (1 <= port <= node.nports):
        raise spec_error(where, f"{name} has ports 1-{node.nports}, not {port}")
    return node.port(port)
