"""Trays from the spec's tray groups: every host with its HCAs (GUIDs, given port GUIDs and
LIDs) and its GPUs, in spec order."""

from __future__ import annotations

from ..ib import devices
from ..ib.enums import NodeType
from ..spec.schema import HcaSpec, TrayGroup
from .assembly import Assembly, spec_error
from .cluster import Gpu, Tray
from .fabric import Node


def hca_specs(group: TrayGroup) -> list[HcaSpec]:
    """The HCAs each tray of a group has: as listed, or ``hcas: N`` alike ones named mlx5_0.."""
    if isinstance(group.hcas, list):
        return group.hcas
    return [
        HcaSpec(name=f"mlx5_{i}", model=group.hca_model, ports=group.hca_ports)
        for i in range(group.hcas)
    ]


def make_trays(assembly: Assembly) -> None:
    """Make every tray of the spec, adding its HCAs to the fabric (uncabled)."""
    spec = assembly.spec
    prefix = spec.guids.ca_prefix
    for gi, group in enumerate(spec.trays):
        hcas = hca_specs(group)
        for host in group.host_names():
            tray = Tray(host, gpu_model=group.gpu)
            for hi, h in enumerate(hcas):
                model = devices.ca_model(h.model)
                desc = h.desc if h.desc is not None else f"{host} {h.name}"
                if h.guid is not None:
                    guid = h.guid
                else:
                    span = 1 if h.ports == 1 else h.ports + 1
                    guid = assembly.guids.allocate(prefix, f"{host} {h.name}", span=span)
                node = Node(
                    NodeType.CA,
                    guid,
                    h.ports,
                    desc,
                    vendid=h.vendid if h.vendid is not None else model.vendid,
                    devid=h.devid if h.devid is not None else model.devid,
                    sysimgguid=h.sysimgguid,
                    port_guid=h.port_guids[0] if h.port_guids else None,
                    name=f"{host}/{h.name}",
                    role="hca",
                    host=host,
                    hca=h.name,
                    hardware=model,
                )
                if h.port_guids:
                    if len(h.port_guids) != h.ports:
                        raise spec_error(
                            f"trays[{gi}].hcas[{hi}].port_guids",
                            f"{len(h.port_guids)} GUIDs for {h.ports} ports",
                        )
                    for port, port_guid in zip(node.iter_ports(), h.port_guids, strict=False):
                        port.guid = port_guid
                if h.lids:
                    for port, lid in zip(node.iter_ports(), h.lids, strict=False):
                        port.lid = lid
                assembly.add(
                    node,
                    f"trays[{gi}].hcas[{hi}]" if isinstance(group.hcas, list) else f"trays[{gi}]",
                )
                tray.hcas.append(node)
            for gpu_index in range(group.gpus):
                tray.gpus.append(Gpu(tray, gpu_index))
            assembly.trays.append(tray)
