"""The fabric spec: what a user writes to describe a cluster's networks.

A spec names the trays (compute nodes) and their GPUs and HCAs, the NVLink domains and
partitions they form, and the InfiniBand fabric, either generated (a fat tree) or
listed switch by switch and cable by cable.  Validation here checks each field on its
own; :mod:`fabriclab.model.build` checks what only shows once the fabric is laid out
(ports that run out, uplinks that do not divide).
"""

from __future__ import annotations

import re
import uuid
from typing import Annotated, Literal

from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, PrivateAttr, field_validator,
                      model_validator)

from ..model import hardware, rates
from . import hostlist


def _int_or_hex(v):
    if isinstance(v, str):
        s = v.strip().lower()
        try:
            return int(s, 16) if s.startswith("0x") else int(s)
        except ValueError:
            raise ValueError(f"not a number: {v!r}") from None
    return v


Guid = Annotated[int, BeforeValidator(_int_or_hex), Field(ge=0, le=0xFFFF_FFFF_FFFF_FFFF)]
Lid = Annotated[int, Field(ge=1, le=0xBFFF)]


def _check_rate(v: str | None) -> str | None:
    if v is None:
        return v
    try:
        return rates.speed(v).token
    except KeyError as e:
        raise ValueError(e.args[0]) from None


def _check_width(v: str | None) -> str | None:
    if v is None:
        return v
    try:
        return rates.width(v).token
    except KeyError as e:
        raise ValueError(e.args[0]) from None


def _known(lookup):
    def check(v: str) -> str:
        try:
            lookup(v)
        except KeyError as e:
            raise ValueError(e.args[0]) from None
        return v
    return check


CaModelKey = Annotated[str, AfterValidator(_known(hardware.ca_model))]
SwitchModelKey = Annotated[str, AfterValidator(_known(hardware.switch_model))]
Rate = Annotated[str, BeforeValidator(lambda v: _check_rate(str(v)))]
WidthToken = Annotated[str, BeforeValidator(lambda v: _check_width(str(v)))]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False)


# --- trays --------------------------------------------------------------------------


class HcaSpec(_Strict):
    """One HCA (an ``mlx5_N`` device) of a tray, listed explicitly."""

    name: str
    model: CaModelKey = "connectx-7"
    ports: int = Field(1, ge=1, le=254)
    guid: Guid | None = None
    sysimgguid: Guid | None = None
    port_guids: list[Guid] | None = None
    lids: list[int] | None = None  # one per port; 0 = unassigned
    desc: str | None = None  # NodeDescription, default "<host> <name>"
    vendid: Guid | None = None
    devid: Guid | None = None



class TrayGroup(_Strict):
    """Trays that share a shape, named by a Slurm hostlist."""

    hosts: str
    gpus: int = Field(4, ge=0, le=64)
    hcas: int | list[HcaSpec] = Field(4)
    hca_ports: int = Field(1, ge=1, le=2)
    hca_model: CaModelKey = "connectx-7"

    @field_validator("hosts")
    @classmethod
    def _hosts(cls, v: str) -> str:
        try:
            hostlist.expand(v)
        except hostlist.HostlistError as e:
            raise ValueError(f"bad hostlist: {e}") from None
        return v

    @field_validator("hcas")
    @classmethod
    def _hcas(cls, v):
        if isinstance(v, int) and not 0 <= v <= 64:
            raise ValueError("hcas must be between 0 and 64")
        if isinstance(v, list):
            names = [h.name for h in v]
            dup = {n for n in names if names.count(n) > 1}
            if dup:
                raise ValueError(f"HCA name {sorted(dup)[0]!r} appears twice")
        return v


    def host_names(self) -> list[str]:
        return hostlist.expand(self.hosts)

    def hca_count(self) -> int:
        return self.hcas if isinstance(self.hcas, int) else len(self.hcas)


# --- NVLink ---------------------------------------------------------------------------


class Partition(_Strict):
    """An NVLink partition: its GPUs report ``clique = id`` instead of the default."""

    id: int = Field(ge=1, le=32765)
    gpus: str  # "sched-worker2" (all its GPUs), "sched-worker2:0-1", a hostlist of either
    name: str | None = None


class NvlinkDomain(_Strict):
    name: str
    trays: str  # hostlist
    cluster_uuid: str | None = None
    clique: int = Field(1, ge=0, le=32766)  # clique of the default partition
    default_partition: bool = True  # False: GPUs in no partition report clique 0
    partitions: list[Partition] = []

    @field_validator("cluster_uuid")
    @classmethod
    def _uuid(cls, v):
        if v is None:
            return v
        try:
            return str(uuid.UUID(v))
        except ValueError:
            raise ValueError(f"not a UUID: {v!r}") from None

    @field_validator("trays")
    @classmethod
    def _trays(cls, v):
        try:
            hostlist.expand(v)
        except hostlist.HostlistError as e:
            raise ValueError(f"bad hostlist: {e}") from None
        return v


class Nvlink(_Strict):
    """NVLink domains, listed or laid out: ``trays_per_domain: 18`` makes one domain per
    18 consecutive trays (an NVL72 rack of 4-GPU trays)."""

    domains: list[NvlinkDomain] = []
    trays_per_domain: int | None = Field(None, ge=1)
    name: str = "nvl{n}"  # pattern for laid-out domains
    clique: int = Field(1, ge=0, le=32766)

    @model_validator(mode="after")
    def _one_way(self):
        if self.domains and self.trays_per_domain:
            raise ValueError("give either domains or trays_per_domain, not both")
        names = [d.name for d in self.domains]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"domain name {sorted(dup)[0]!r} appears twice")
        return self


# --- fabric ---------------------------------------------------------------------------


class SwitchNames(_Strict):
    """Name patterns: ``{n}`` = 1-based index in the tier, ``{i}`` = 0-based, ``{rail}``
    (1-based, leaves of rail-optimized fabrics), ``{pod}`` (1-based), ``{group}``."""

    leaf: str = "IB-LEAF-{n:02d}"
    spine: str = "IB-SPINE-{n:02d}"
    core: str = "IB-CORE-{n:02d}"


class FatTree(_Strict):
    """A generated folded-Clos fabric of 1, 2 or 3 switch tiers."""

    tiers: int | Literal["auto"] = "auto"
    switch: SwitchModelKey = "quantum-2"
    rate: Rate | None = None  # default: the slower of switch and HCA native rates
    width: WidthToken = "4x"
    rail_optimized: bool = True
    hosts_per_leaf: int | None = Field(None, ge=1)
    leaf_uplinks: int | None = Field(None, ge=0)
    oversubscription: float | None = Field(None, ge=1.0)
    spines: int | None = Field(None, ge=1)  # 2 tiers: in all; 3 tiers: per pod
    leaves_per_pod: int | None = Field(None, ge=1)
    spine_uplinks: int | None = Field(None, ge=1)
    cores_per_group: int | None = Field(None, ge=1)
    sharp: bool = False  # SHARP Aggregation Node on each switch's AN port
    names: SwitchNames = SwitchNames()


    @field_validator("tiers")
    @classmethod
    def _tiers(cls, v):
        if v != "auto" and v not in (1, 2, 3):
            raise ValueError("tiers must be 1, 2, 3 or auto")
        return v

    @model_validator(mode="after")
    def _uplinks_or_ratio(self):
        if self.leaf_uplinks is not None and self.oversubscription is not None:
            raise ValueError("give either leaf_uplinks or oversubscription, not both")
        return self


class SwitchSpec(_Strict):
    name: str
    model: SwitchModelKey = "quantum-2"
    guid: Guid | None = None
    port_guid: Guid | None = None  # port 0 GUID, default = node GUID
    sysimgguid: Guid | None = None
    desc: str | None = None  # default: the model's description template
    ports: int | None = Field(None, ge=1, le=254)  # default: the model's NumPorts
    lid: int | None = Field(None, ge=0, le=0xBFFF)
    lmc: int = Field(0, ge=0, le=7)
    enhanced_port0: bool | None = None
    vendid: Guid | None = None
    devid: Guid | None = None
    tier: int | None = Field(None, ge=1, le=8)



class CaSpec(_Strict):
    """A channel adapter that belongs to no tray: a storage or UFM host's HCA, an HCA with
    a factory description, a SHARP Aggregation Node, a router (``type: router``)."""

    name: str
    desc: str
    type: Literal["ca", "router"] = "ca"
    ports: int = Field(1, ge=1, le=254)
    guid: Guid | None = None
    sysimgguid: Guid | None = None
    port_guids: list[Guid] | None = None
    lids: list[int] | None = None
    vendid: Guid = hardware.MELLANOX_VENDID
    devid: Guid = 0x1021


_ENDPOINT = r"(?P<{0}>[^\[\]]+)\[(?P<{0}p>\d+)\]"
_LINK_RE = re.compile(
    r"^\s*" + _ENDPOINT.format("a") + r"\s*--\s*" + _ENDPOINT.format("b")
    + r"(?:\s+(?P<w>\d+x|\?\?)(?P<s>[A-Za-z0-9]+|\?\?\?))?\s*$"
)


class LinkSpec(_Strict):
    a: str
    a_port: int
    b: str
    b_port: int
    width: str | None = None
    speed: str | None = None

    @classmethod
    def parse(cls, text: str) -> "LinkSpec":
        m = _LINK_RE.match(text)
        if not m:
            raise ValueError(
                f"bad link {text!r}: expected 'NODE[PORT] -- NODE[PORT] [4xNDR]'"
            )
        w = m.group("w") and (m.group("w") if m.group("w") == "??" else _check_width(m.group("w")))
        s = m.group("s") and (m.group("s") if m.group("s") == "???" else _check_rate(m.group("s")))
        return cls(a=m.group("a").strip(), a_port=int(m.group("ap")), b=m.group("b").strip(),
                   b_port=int(m.group("bp")), width=w, speed=s)

    def render(self) -> str:
        rate = f" {self.width}{self.speed}" if self.width and self.speed else ""
        return f"{self.a}[{self.a_port}] -- {self.b}[{self.b_port}]{rate}"


def _parse_links(v):
    if not isinstance(v, list):
        raise ValueError("links must be a list")
    out = []
    for i, item in enumerate(v):
        if isinstance(item, str):
            out.append(LinkSpec.parse(item))
        else:
            out.append(item)
    return out


class Explicit(_Strict):
    """Switches, extra CAs and cables listed one by one (what ``fabriclab import`` writes).

    A link endpoint is ``SWITCH[port]``, ``HOST/HCA[port]`` for a tray's HCA, or
    ``CA[port]`` for an entry of ``cas``."""

    switches: list[SwitchSpec] = []
    cas: list[CaSpec] = []
    links: Annotated[list[LinkSpec], BeforeValidator(_parse_links)] = []
    rate: Rate = "NDR"  # for links that name none
    width: WidthToken = "4x"


class FabricSpec(_Strict):
    fat_tree: FatTree | None = None
    explicit: Explicit | None = None

    @model_validator(mode="after")
    def _exactly_one(self):
        if (self.fat_tree is None) == (self.explicit is None):
            raise ValueError("give exactly one of fat_tree or explicit")
        return self


class GuidPlan(_Strict):
    """How GUIDs are made.  ``hash``: an OUI-based 32-bit prefix plus the first 8 hex
    digits of SHA-1 of the node's name ("<host> mlx5_<i>" or the switch name), the
    seed lab's scheme; a collision is resolved by hashing "<name>#1", "#2", … in spec
    order.  ``sequential``: prefix plus a counter."""

    scheme: Literal["hash", "sequential"] = "hash"
    ca_prefix: Guid = 0xE09D7303
    switch_prefix: Guid = 0x2C5EAB03

    @field_validator("ca_prefix", "switch_prefix")
    @classmethod
    def _prefix(cls, v):
        if v > 0xFFFFFFFF:
            raise ValueError("a GUID prefix is the upper 32 bits (8 hex digits)")
        return v


class LidPlan(_Strict):
    """LIDs as the subnet manager is expected to assign them: switches from
    ``switch_base`` (top tier first), then CAs from ``ca_base`` in tray order."""

    switch_base: Lid = 1
    ca_base: Lid | None = None  # default: 100, or the next hundred above the switches


class Spec(_Strict):
    name: str = "fabric"
    description: str = ""
    trays: list[TrayGroup] = []
    nvlink: Nvlink | None = None
    fabric: FabricSpec
    guids: GuidPlan = GuidPlan()
    lids: LidPlan = LidPlan()
    # Where the spec came from and the line of each key, so that errors found while
    # building can point at the line too (set by fabriclab.spec.load).
    _source: str = PrivateAttr("")
    _lines: dict = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _unique_hosts(self):
        seen: dict[str, int] = {}
        for i, group in enumerate(self.trays):
            for h in group.host_names():
                if h in seen:
                    raise ValueError(
                        f"tray {h!r} appears in trays[{seen[h]}] and trays[{i}]"
                    )
                seen[h] = i
        return self
