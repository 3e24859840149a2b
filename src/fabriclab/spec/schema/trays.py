"""The spec's trays: groups of trays that share a shape, named by a Slurm hostlist,
with their GPUs and HCAs (a count, or HCAs listed one by one)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator

from ... import gpus as gpus_facts
from ...ib.ids import MAX_PORTS
from ...limits import HOST_NAME_MAX
from .. import hostlist
from .fields import AnyLid, CaModelKey, DeviceId, GpuModelKey, Guid, Strict, VendorId


class HcaSpec(Strict):
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


class TrayGroup(Strict):
    """Trays that share a shape, named by a Slurm hostlist."""

    hosts: str
    gpus: int = Field(4, ge=0, le=64)
    gpu: GpuModelKey = gpus_facts.DEFAULT  # the GPUs' model: their NVLinks (fabriclab.gpus)
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
