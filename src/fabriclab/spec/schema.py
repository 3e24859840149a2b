"""The fabric spec: what a user writes to describe a cluster's networks.

A spec names the trays (compute nodes) and their GPUs and HCAs, the NVLink domains and
partitions they form, and the InfiniBand fabric, either generated (a fat tree) or
listed switch by switch and cable by cable.  Validation here checks each field on its
own; :mod:`fabriclab.model.build` checks what only shows once the fabric is laid out
(ports that run out, uplinks that do not divide).
"""

from __future__ import annotations

import re
import string
import uuid
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    field_validator,
    model_validator,
)

from ..ib import devices, rates
from ..ib.ids import DEVID_MAX, GUID_MAX, MAX_PORTS, VENDID_MAX
from ..limits import HOST_NAME_MAX, INT_DIGITS_MAX, MAX_TRAYS, NAME_MAX
from . import hostlist


def _int_or_hex(v):
    if isinstance(v, str):
        s = v.strip().lower()
        if len(s) > INT_DIGITS_MAX:  # before int(): thousands of digits are slow or refused
            raise ValueError(f"not a number of at most 64 bits: {len(s)} characters")
        try:
            return int(s, 16) if s.startswith("0x") else int(s)
        except ValueError:
            raise ValueError(f"not a number: {v!r}") from None
    return v


def _bits(name: str, top: int):
    """An unsigned field of IBA: in 0..top, said in hex (pydantic would print the bound
    of a 64-bit field as a float)."""

    def check(v: int) -> int:
        if v < 0 or v > top:
            shown = (
                f"0x{v:x}"
                if v >= 0 and v.bit_length() <= 80
                else str(v)
                if v < 0
                else f"a {v.bit_length()}-bit number"
            )
            raise ValueError(f"{shown} is not a {name} (0-0x{top:x})")
        return v

    return check


# GUIDs are EUI-64, VendorID 24 bits, DeviceID 16 bits (see fabriclab.limits)
Guid = Annotated[int, BeforeValidator(_int_or_hex), AfterValidator(_bits("64-bit GUID", GUID_MAX))]
VendorId = Annotated[
    int, BeforeValidator(_int_or_hex), AfterValidator(_bits("24-bit vendor id", VENDID_MAX))
]
DeviceId = Annotated[
    int, BeforeValidator(_int_or_hex), AfterValidator(_bits("16-bit device id", DEVID_MAX))
]
Lid = Annotated[int, Field(ge=1, le=0xBFFF)]
# A LID or LMC as the spec gives it (0 = unassigned): range and uniqueness are checked on
# the built fabric, by the same rules for every source (fabriclab.model.addressing).
AnyLid = int
Name = Annotated[str, Field(min_length=1, max_length=NAME_MAX)]


def check_pattern(fields: tuple[str, ...]):
    """A name pattern (``IB-LEAF-{n:02d}``, fields among ``fields``; an unknown one is
    reported when the pattern is used): every width or precision is checked before
    anything is formatted, since ``{n:500000000d}`` would otherwise make a 500 MB name."""

    def check(pattern: str) -> str:
        if len(pattern) > 4 * NAME_MAX:
            raise ValueError(
                f"a pattern of {len(pattern)} characters; a name has at most {NAME_MAX}"
            )
        try:
            parsed = list(string.Formatter().parse(pattern))
        except ValueError as e:
            raise ValueError(f"bad name pattern {pattern!r}: {e}") from None
        for _literal, field, spec, _conv in parsed:
            if field is None:
                continue
            if spec and "{" in spec:
                raise ValueError(f"bad name pattern {pattern!r}: nested fields")
            for num in re.findall(r"\d+", spec or ""):
                if len(num) > 3 or int(num) > NAME_MAX:
                    raise ValueError(
                        f"bad name pattern {pattern!r}: width {num[:10]} in "
                        f"{{{field}:{(spec or '')[:20]}}}; a name has at most {NAME_MAX} characters"
                    )
        return pattern

    return check


SWITCH_FIELDS = ("n", "i", "rail", "pod", "group")


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


CaModelKey = Annotated[str, AfterValidator(_known(devices.ca_model))]
SwitchModelKey = Annotated[str, AfterValidator(_known(devices.switch_model))]
Rate = Annotated[str, BeforeValidator(lambda v: _check_rate(str(v)))]
WidthToken = Annotated[str, BeforeValidator(lambda v: _check_width(str(v)))]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False)


# --- trays --------------------------------------------------------------------------


class HcaSpec(_Strict):
    """One HCA (an ``mlx5_N`` device) of a tray, listed explicitly."""

    name: Annotated[str, Field(min_length=1, max_length=HOST_NAME_MAX)]
    model: CaModelKey = "connectx-7"
    ports: int = Field(1, ge=1, le=MAX_PORTS)
    guid: Guid | None = None
    sysimgguid: Guid | None = None
    port_guids: list[Guid] | None = Field(None, max_length=MAX_PORTS)
    lids: list[AnyLid] | None = Field(None, max_length=MAX_PORTS)  # one per port; 0 = unassigned
    desc: str | None = None  # NodeDescription, default "<host> <name>"
    vendid: VendorId | None = None
    devid: DeviceId | None = None


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
            hostlist.count(v)  # syntax, names and size, without expanding
        except hostlist.HostlistError as e:
            raise ValueError(f"bad hostlist: {e}") from None
        return v

    @field_validator("hcas")
    @classmethod
    def _hcas(cls, v):
        if isinstance(v, int) and not 0 <= v <= 64:
            raise ValueError("hcas must be between 0 and 64")
        if isinstance(v, list) and len(v) > 64:
            raise ValueError(f"{len(v)} HCAs; a tray has at most 64")
        if isinstance(v, list):
            names = [h.name for h in v]
            dup = {n for n in names if names.count(n) > 1}
            if dup:
                raise ValueError(f"HCA name {sorted(dup)[0]!r} appears twice")
        return v

    def host_names(self) -> list[str]:
        """The group's hosts, expanded from its hostlist."""
        return hostlist.expand(self.hosts)


# --- NVLink ---------------------------------------------------------------------------


class Partition(_Strict):
    """An NVLink partition: its GPUs report ``clique = id`` instead of the default."""

    id: int = Field(ge=1, le=32765)
    gpus: str = Field(
        max_length=4096
    )  # "sched-worker2" (all its GPUs), "sched-worker2:0-1", a hostlist of either
    name: Name | None = None


class NvlinkDomain(_Strict):
    """An NVLink domain: its trays (a hostlist), cluster UUID, default clique and partitions."""

    name: Name
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
            hostlist.count(v)
        except hostlist.HostlistError as e:
            raise ValueError(f"bad hostlist: {e}") from None
        return v


class Nvlink(_Strict):
    """NVLink domains, listed or laid out: ``trays_per_domain: 18`` makes one domain per
    18 consecutive trays (an NVL72 rack of 4-GPU trays)."""

    domains: list[NvlinkDomain] = []
    trays_per_domain: int | None = Field(None, ge=1)
    name: Annotated[str, AfterValidator(check_pattern(("n", "i")))] = (
        "nvl{n}"  # pattern for laid-out domains
    )
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

    leaf: Annotated[str, AfterValidator(check_pattern(SWITCH_FIELDS))] = "IB-LEAF-{n:02d}"
    spine: Annotated[str, AfterValidator(check_pattern(SWITCH_FIELDS))] = "IB-SPINE-{n:02d}"
    core: Annotated[str, AfterValidator(check_pattern(SWITCH_FIELDS))] = "IB-CORE-{n:02d}"


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
    """A switch of an explicit fabric: its model and anything that differs from the model."""

    name: Name
    model: SwitchModelKey = "quantum-2"
    guid: Guid | None = None
    port_guid: Guid | None = None  # port 0 GUID, default = node GUID
    sysimgguid: Guid | None = None
    desc: str | None = None  # default: the model's description template
    ports: int | None = Field(None, ge=1, le=MAX_PORTS)  # default: the model's NumPorts
    lid: AnyLid | None = None  # port 0's LID; 0 or none: from the LID plan
    lmc: AnyLid = 0
    enhanced_port0: bool | None = None
    vendid: VendorId | None = None
    devid: DeviceId | None = None
    tier: int | None = Field(None, ge=1, le=8)


class CaSpec(_Strict):
    """A channel adapter that belongs to no tray: a storage or UFM host's HCA, an HCA with
    a factory description, a SHARP Aggregation Node, a router (``type: router``)."""

    name: Name
    desc: str
    type: Literal["ca", "router"] = "ca"
    ports: int = Field(1, ge=1, le=MAX_PORTS)
    guid: Guid | None = None
    sysimgguid: Guid | None = None
    port_guids: list[Guid] | None = Field(None, max_length=MAX_PORTS)
    lids: list[AnyLid] | None = Field(None, max_length=MAX_PORTS)
    vendid: VendorId = devices.MELLANOX_VENDID
    devid: DeviceId = 0x1021


# Names and port numbers bounded, and the text stripped and bounded before matching, so
# that matching stays linear on any input.
_ENDPOINT = (
    r"(?P<{0}>[^\[\]]{{1," + str(HOST_NAME_MAX + NAME_MAX + 1) + r"}})\[(?P<{0}p>\d{{1,3}})\]"
)
_LINK_RE = re.compile(
    _ENDPOINT.format("a")
    + r"\s*--\s*"
    + _ENDPOINT.format("b")
    + r"(?:\s+(?P<w>\d{1,2}x|\?\?)(?P<s>[A-Za-z0-9]{1,8}|\?\?\?))?$"
)
_LINK_CHARS_MAX = 2 * (HOST_NAME_MAX + NAME_MAX + 8) + 32
_ENDPOINT_RE = re.compile(_ENDPOINT.format("a") + "$")


def parse_endpoint(text: str) -> tuple[str, int] | None:
    """One end of a link, ``NODE[PORT]`` as the links of a spec write it: (node, port),
    or None when ``text`` is not in that form."""
    text = text.strip()
    if len(text) > _LINK_CHARS_MAX:
        return None
    m = _ENDPOINT_RE.match(text)
    return (m.group("a").strip(), int(m.group("ap"))) if m else None


class LinkSpec(_Strict):
    """A cable of an explicit fabric: ``NODE[PORT] -- NODE[PORT] [4xNDR]``."""

    a: str
    a_port: int
    b: str
    b_port: int
    width: str | None = None
    speed: str | None = None

    @classmethod
    def parse(cls, text: str) -> LinkSpec:
        """A link from its text; ValueError saying what is wrong."""
        text = text.strip()
        if len(text) > _LINK_CHARS_MAX:
            raise ValueError(
                f"a link of {len(text)} characters: expected 'NODE[PORT] -- NODE[PORT] [4xNDR]'"
            )
        m = _LINK_RE.match(text)
        if not m:
            raise ValueError(f"bad link {text!r}: expected 'NODE[PORT] -- NODE[PORT] [4xNDR]'")
        w = m.group("w") and (m.group("w") if m.group("w") == "??" else _check_width(m.group("w")))
        s = m.group("s") and (m.group("s") if m.group("s") == "???" else _check_rate(m.group("s")))
        return cls(
            a=m.group("a").strip(),
            a_port=int(m.group("ap")),
            b=m.group("b").strip(),
            b_port=int(m.group("bp")),
            width=w,
            speed=s,
        )

    def render(self) -> str:
        """The link as text ``parse`` reads back."""
        rate = f" {self.width}{self.speed}" if self.width and self.speed else ""
        return f"{self.a}[{self.a_port}] -- {self.b}[{self.b_port}]{rate}"


def _parse_links(v):
    if not isinstance(v, list):
        raise ValueError("links must be a list")
    out = []
    for _i, item in enumerate(v):
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
    """The InfiniBand fabric: generated (``fat_tree``) or listed (``explicit``)."""

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
    # What a served fabric's ports hold at power-on: ``plan``, the plan's LIDs, as if a
    # previous SM had assigned them; ``cold``, no LID (0) and no SM LID until an SM
    # assigns them, as real hardware after power-on (``fabriclab up --cold`` likewise).
    power_on: Literal["plan", "cold"] = "plan"


class Spec(_Strict):
    """A whole spec: trays, NVLink, the fabric, and the GUID and LID plans."""

    name: str = "fabric"
    description: str = ""
    trays: list[TrayGroup] = []
    nvlink: Nvlink | None = None
    fabric: FabricSpec
    guids: GuidPlan = GuidPlan()
    lids: LidPlan = LidPlan()
    # Where the spec came from and the line of each key, so that errors found while
    # building can point at the line too (set by fabriclab.spec.load; lines are looked up
    # in the text only when an error needs one).
    _source: str = PrivateAttr("")
    _text: str = PrivateAttr("")

    @model_validator(mode="after")
    def _unique_hosts(self):
        total = sum(hostlist.count(g.hosts) for g in self.trays)  # before expanding any
        if total > MAX_TRAYS:
            raise ValueError(
                f"the trays name {total} hosts; a fabric has room for {MAX_TRAYS} "
                "(one unicast LID each)"
            )
        seen: dict[str, int] = {}
        for i, group in enumerate(self.trays):
            for h in group.host_names():
                if h in seen:
                    raise ValueError(f"tray {h!r} appears in trays[{seen[h]}] and trays[{i}]")
                seen[h] = i
        return self
