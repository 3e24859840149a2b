"""The spec's generated fabric: a fat tree of 1, 2 or 3 switch tiers (switch model,
rate, rail optimization, hosts per leaf, uplinks or oversubscription, spines, pods, core
groups, SHARP) and its switch name patterns."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from .fields import SWITCH_FIELDS, Rate, Strict, SwitchModelKey, WidthToken, check_pattern


class SwitchNames(Strict):
    """Name patterns: ``{n}`` = 1-based index in the tier, ``{i}`` = 0-based, ``{rail}``
    (1-based, leaves of rail-optimized fabrics), ``{pod}`` (1-based), ``{group}``."""

    leaf: Annotated[str, AfterValidator(check_pattern(SWITCH_FIELDS))] = "IB-LEAF-{n:02d}"
    spine: Annotated[str, AfterValidator(check_pattern(SWITCH_FIELDS))] = "IB-SPINE-{n:02d}"
    core: Annotated[str, AfterValidator(check_pattern(SWITCH_FIELDS))] = "IB-CORE-{n:02d}"


class FatTree(Strict):
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
    # the switches send each packet by the least loaded of the ports on a shortest path
    # (NVIDIA Adaptive Routing): collectives' flows spread over equal-cost paths
    adaptive_routing: bool = False
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
