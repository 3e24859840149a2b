"""The fabric spec's schema (pydantic): what a user writes to describe a cluster's networks.

A spec names the trays (compute nodes) and their GPUs and HCAs, the NVLink domains and
partitions they form, and the InfiniBand fabric, either generated (a fat tree) or
listed switch by switch and cable by cable.  Validation here checks each field on its
own; :mod:`fabriclab.model.build` checks what only shows once the fabric is laid out
(ports that run out, uplinks that do not divide).

The schema by part: :mod:`.spec` (the whole spec), :mod:`.trays`, :mod:`.nvlink`,
:mod:`.fat_tree` (a generated fabric), :mod:`.explicit` (a listed one) and its
:mod:`.links`, :mod:`.plans` (GUIDs and LIDs), and :mod:`.fields` (the field types they
are made of).
"""

from __future__ import annotations

from .explicit import CaSpec, Explicit, SwitchSpec
from .fat_tree import FatTree, SwitchNames
from .fields import (
    SWITCH_FIELDS,
    AnyLid,
    CaModelKey,
    DeviceId,
    Guid,
    Lid,
    Name,
    Rate,
    SwitchModelKey,
    VendorId,
    WidthToken,
    check_pattern,
)
from .links import LinkSpec, parse_endpoint
from .nvlink import Nvlink, NvlinkDomain, Partition
from .plans import GuidPlan, LidPlan
from .spec import FabricSpec, Spec
from .trays import HcaSpec, TrayGroup

__all__ = [
    "SWITCH_FIELDS",
    "AnyLid",
    "CaModelKey",
    "CaSpec",
    "DeviceId",
    "Explicit",
    "FabricSpec",
    "FatTree",
    "Guid",
    "GuidPlan",
    "HcaSpec",
    "Lid",
    "LidPlan",
    "LinkSpec",
    "Name",
    "Nvlink",
    "NvlinkDomain",
    "Partition",
    "Rate",
    "Spec",
    "SwitchModelKey",
    "SwitchNames",
    "SwitchSpec",
    "TrayGroup",
    "VendorId",
    "WidthToken",
    "check_pattern",
    "parse_endpoint",
]
