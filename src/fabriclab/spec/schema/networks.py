"""The spec's other networks (front end, storage, out-of-band management, pod, in-band
management): each its Ethernet switches, which interface of which endpoint goes to
which switch port, the uplinks between its switches, and its addressing; and the
service nodes (controller, login, storage) that only these networks reach."""

from __future__ import annotations

import ipaddress
from typing import Annotated, Literal

from pydantic import Field, field_validator

from ...ethernet import SWITCH_MODELS
from ...limits import HOST_NAME_MAX
from .fields import Strict

KINDS = ("frontend", "storage", "oob", "pod", "inband")
Name = Annotated[
    str, Field(min_length=1, max_length=HOST_NAME_MAX, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
]
# a Linux interface name: at most 15 bytes (IFNAMSIZ 16 with its NUL), no '/' or blank
IfName = Annotated[str, Field(min_length=1, max_length=15, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]


class Service(Strict):
    """A service node: a host on these networks that is no tray (controller, login,
    storage)."""

    name: Name
    role: Literal["controller", "login", "storage", "other"] = "other"


class NetSwitch(Strict):
    """An Ethernet switch of one network: its name and model (``fabriclab.ethernet``)."""

    name: Name
    model: str = "sn2201"

    @field_validator("model")
    @classmethod
    def _model(cls, v: str) -> str:
        if v not in SWITCH_MODELS:
            raise ValueError(f"unknown switch model {v!r}; one of: {', '.join(SWITCH_MODELS)}")
        return v


class Attach(Strict):
    """Endpoints cabled to a switch: ``endpoints`` a hostlist of trays, of their BMCs
    (``bmc:HOSTLIST``: the BMC of each tray, named HOST-bmc), of service nodes
    (``service:NAMES``) or of NVLink domains' switch trays (``nvswitch:DOMAINS``: each
    domain's, named DOMAIN-nvsw1 ...); each one's ``interface`` to the switch's ports
    from ``first_port`` on, in order."""

    endpoints: str
    interface: IfName | None = None  # default by the endpoint's kind (fabriclab.ethernet)
    switch: Name
    first_port: int = Field(1, ge=1, le=1024)


class Uplink(Strict):
    """A link between two switches of the network, ``SWITCH[port]`` at each end."""

    ends: tuple[str, str]


class Network(Strict):
    """One network: its kind, subnet (addresses given to its endpoints in order, the
    gateway left out), VLAN, switches, endpoints and uplinks."""

    name: Name
    kind: Literal["frontend", "storage", "oob", "pod", "inband"]
    subnet: str
    gateway: str | None = None
    vlan: int | None = Field(None, ge=1, le=4094)
    switches: list[NetSwitch] = Field(min_length=1)
    attach: list[Attach] = []
    uplinks: list[Uplink] = []

    @field_validator("subnet")
    @classmethod
    def _subnet(cls, v: str) -> str:
        try:
            net = ipaddress.IPv4Network(v, strict=True)
        except ValueError as e:
            raise ValueError(f"bad subnet {v!r}: {e}") from None
        if net.prefixlen > 30:
            raise ValueError(f"subnet {v} holds no two hosts")
        return str(net)

    @field_validator("gateway")
    @classmethod
    def _gateway(cls, v: str | None) -> str | None:
        if v is None:
            return v
        try:
            return str(ipaddress.IPv4Address(v))
        except ValueError:
            raise ValueError(f"bad gateway address {v!r}") from None
