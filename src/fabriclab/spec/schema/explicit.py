"""The spec's explicit fabric: switches, extra CAs (storage and UFM hosts, SHARP
Aggregation Nodes, routers) and cables listed one by one, as ``fabriclab import`` writes
them."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator, Field

from ...ib import devices
from ...ib.ids import MAX_PORTS
from .fields import AnyLid, DeviceId, Guid, Name, Rate, Strict, SwitchModelKey, VendorId, WidthToken
from .links import LinkSpec, parse_links


class SwitchSpec(Strict):
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


class CaSpec(Strict):
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


class Explicit(Strict):
    """Switches, extra CAs and cables listed one by one (what ``fabriclab import`` writes).

    A link endpoint is ``SWITCH[port]``, ``HOST/HCA[port]`` for a tray's HCA, or
    ``CA[port]`` for an entry of ``cas``."""

    switches: list[SwitchSpec] = []
    cas: list[CaSpec] = []
    links: Annotated[list[LinkSpec], BeforeValidator(parse_links)] = []
    rate: Rate = "NDR"  # for links that name none
    width: WidthToken = "4x"
