"""A fabric (a parsed real dump) written back as an explicit spec.

Every GUID, LID, description and cable is kept, so building the spec gives the same
fabric again (``build(spec_from_fabric(f)).fabric.same_as(f)``).  CAs described
``"<host> <hca>"`` become trays; everything else (HCAs with a factory description,
SHARP Aggregation Nodes, routers) is listed under ``fabric.explicit.cas``.
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import InputError, Problem
from ..ib import devices
from ..ib.enums import NodeType
from ..ib.ids import UNICAST_LIDS
from .cluster import host_and_hca
from .fabric import Fabric, Node

# The names a tray and its HCA keep in a spec: a host name a hostlist reads back as itself,
# and an HCA name that ends in its device number (mlx5_0).
_TRAY_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_TRAY_HCA = re.compile(r"[A-Za-z][A-Za-z0-9_-]*\d")
_SWITCH_NAME = re.compile(r"^[^;:]+;([^;:]+):[^;:]+$")
# A name that reads back from a link line ("NAME[PORT] -- NAME[PORT]") as itself.
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
HCAS_PER_TRAY_MAX = 64  # the spec's limit (TrayGroup.hcas)
GPUS_PER_TRAY_MAX = 64  # the spec's limit (TrayGroup.gpus)
_SWITCH_BY_DEVID = {m.devid: k for k, m in devices.SWITCH_MODELS.items() if m.enhanced_port0}
_CA_BY_DEVID = {m.devid: k for k, m in devices.CA_MODELS.items()}


def _hex(v: int) -> str:
    return f"0x{v:016x}"


def _unique(cand: str | None, fallback: str, used: set[str]) -> str:
    """``cand`` when it is a safe name nobody has, else ``fallback`` (a node id), made
    unique with a suffix if need be."""
    for name in (cand, fallback):
        if name and _SAFE_NAME.match(name) and name not in used:
            used.add(name)
            return name
    base = fallback if _SAFE_NAME.match(fallback or "") else "node"
    k = 2
    while f"{base[:56]}-{k}" in used:
        k += 1
    used.add(f"{base[:56]}-{k}")
    return f"{base[:56]}-{k}"


def _tray_hca(n: Node) -> tuple[str, str] | None:
    """(host, HCA) of a CA that can be a tray's HCA: described "<host> <hca>" with names
    a spec keeps as they are."""
    parts = host_and_hca(n.desc) if n.type == NodeType.CA else None
    if parts is None or not (_TRAY_HOST.fullmatch(parts[0]) and _TRAY_HCA.fullmatch(parts[1])):
        return None
    return parts


def spec_from_fabric(
    fabric: Fabric,
    name: str,
    *,
    gpus_per_hca: int = 1,
    description: str = "",
    warnings: list[Problem] | None = None,
) -> dict[str, Any]:
    """The explicit spec of a fabric, as plain data ready for YAML.  It is always a spec
    ``validate`` accepts: what does not fit the spec's limits is said in ``warnings``
    (or is an InputError when the fabric cannot be a spec at all)."""

    def warn(what: str) -> None:
        if warnings is not None:
            warnings.append(Problem(name, what))

    lids = sum(1 if n.is_switch else n.nports for n in fabric.nodes)
    if lids > UNICAST_LIDS:
        raise InputError(
            [
                Problem(
                    name,
                    f"the fabric has {lids} switches and CA ports, more than the "
                    f"{UNICAST_LIDS} unicast LIDs one subnet has (IBA 4.1.3)",
                )
            ]
        )
    trays: dict[str, list[tuple[Node, str]]] = {}  # host -> its HCAs and their names
    loose: list[Node] = []
    taken: set[tuple[str, str]] = set()
    for n in fabric.nodes:
        if n.is_switch:
            continue
        parts = _tray_hca(n)
        if (
            parts
            and parts not in taken
            and n.ident is None
            and len(trays.get(parts[0], ())) < HCAS_PER_TRAY_MAX
        ):
            taken.add(parts)
            trays.setdefault(parts[0], []).append((n, parts[1]))
        else:
            loose.append(n)

    names: dict[int, str] = {}  # id(node) -> endpoint name
    used: set[str] = set()
    for n in fabric.switches():
        m = _SWITCH_NAME.match(n.desc)
        names[id(n)] = _unique(m.group(1) if m else None, n.label, used)
    for host, hcas in trays.items():
        for h, hca in hcas:
            names[id(h)] = f"{host}/{hca}"
    for n in loose:
        names[id(n)] = _unique(n.label, n.label, used)
        if n.ident is not None and names[id(n)] != n.ident:
            warn(f"node {n.ident[:40]!r} is named {names[id(n)]!r}: its id cannot be a spec name")

    switches = [_switch(n, names[id(n)]) for n in fabric.switches()]
    tray_specs = []
    for host, hcas in trays.items():
        gpus = gpus_per_hca * len(hcas)
        if gpus > GPUS_PER_TRAY_MAX:
            warn(
                f"tray {host}: {len(hcas)} HCAs x {gpus_per_hca} GPUs is more than a tray's "
                f"{GPUS_PER_TRAY_MAX}; given {GPUS_PER_TRAY_MAX}"
            )
            gpus = GPUS_PER_TRAY_MAX
        tray_specs.append({"hosts": host, "gpus": gpus, "hcas": [_hca(h, hca) for h, hca in hcas]})
    cas = [_ca(n, names[id(n)]) for n in loose]
    links = []
    for a, b in fabric.links():
        links.append(
            f"{names[id(a.node)]}[{a.num}] -- {names[id(b.node)]}[{b.num}] "
            f"{a.width.token}{a.speed.token}"
        )
    explicit: dict[str, Any] = {"switches": switches}
    if cas:
        explicit["cas"] = cas
    explicit["links"] = links
    spec: dict[str, Any] = {"name": name}
    if description:
        spec["description"] = description
    spec["trays"] = tray_specs
    spec["fabric"] = {"explicit": explicit}
    return spec


def _switch(n: Node, name: str) -> dict[str, Any]:
    model_key = _SWITCH_BY_DEVID.get(n.devid, "quantum-2")
    model = devices.SWITCH_MODELS[model_key]
    d: dict[str, Any] = {"name": name, "model": model_key}
    if n.ident is None:
        d["guid"] = _hex(n.guid)
        if n.port_guid != n.guid:
            d["port_guid"] = _hex(n.port_guid)
        if n.sysimgguid != n.guid:
            d["sysimgguid"] = _hex(n.sysimgguid)
    d["desc"] = n.desc
    if n.nports != model.nports:
        d["ports"] = n.nports
    d["lid"] = n.lid
    if n.lmc:
        d["lmc"] = n.lmc
    if n.enhanced_port0 != model.enhanced_port0:
        d["enhanced_port0"] = n.enhanced_port0
    if n.vendid != model.vendid:
        d["vendid"] = f"0x{n.vendid:x}"
    if n.devid != model.devid:
        d["devid"] = f"0x{n.devid:x}"
    return d


def _port_fields(n: Node, d: dict[str, Any]) -> None:
    ports = list(n.iter_ports())
    default = [n.port_guid_for(p.num) for p in ports]
    actual = [p.guid for p in ports]
    if actual != default:
        d["port_guids"] = [_hex(g) for g in actual]
    d["lids"] = [p.lid for p in ports]


def _hca(n: Node, hca: str) -> dict[str, Any]:
    model_key = _CA_BY_DEVID.get(n.devid, "connectx-7")
    model = devices.CA_MODELS[model_key]
    d: dict[str, Any] = {"name": hca, "model": model_key, "guid": _hex(n.guid)}
    if n.nports != 1:
        d["ports"] = n.nports
    if n.sysimgguid != n.guid:
        d["sysimgguid"] = _hex(n.sysimgguid)
    _port_fields(n, d)
    if n.vendid != model.vendid:
        d["vendid"] = f"0x{n.vendid:x}"
    if n.devid != model.devid:
        d["devid"] = f"0x{n.devid:x}"
    return d


def _ca(n: Node, name: str) -> dict[str, Any]:
    d: dict[str, Any] = {"name": name, "desc": n.desc}
    if n.type == NodeType.ROUTER:
        d["type"] = "router"
    if n.ident is None:  # nodes named without a GUID (ibsim nets) get one from the plan
        d["guid"] = _hex(n.guid)
    if n.nports != 1:
        d["ports"] = n.nports
    if n.sysimgguid != n.guid and n.ident is None:
        d["sysimgguid"] = _hex(n.sysimgguid)
    _port_fields(n, d)
    d["vendid"] = f"0x{n.vendid:x}"
    d["devid"] = f"0x{n.devid:x}"
    return d
