"""The spec's NVLink domains: listed (trays, cluster UUID, clique, partitions) or laid
out by ``trays_per_domain``."""

from __future__ import annotations

import uuid
from typing import Annotated

from pydantic import AfterValidator, Field, field_validator, model_validator

from .. import hostlist
from .fields import Name, Strict, check_pattern


class Partition(Strict):
    """An NVLink partition: its GPUs report ``clique = id`` instead of the default."""

    id: int = Field(ge=1, le=32765)
    gpus: str = Field(
        max_length=4096
    )  # "sched-worker2" (all its GPUs), "sched-worker2:0-1", a hostlist of either
    name: Name | None = None


class NvlinkDomain(Strict):
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


class Nvlink(Strict):
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
