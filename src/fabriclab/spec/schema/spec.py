"""A whole spec (``Spec``): its trays, NVLink, the fabric (generated or explicit, one of
them) and the GUID and LID plans; hosts are checked unique across tray groups."""

from __future__ import annotations

from pydantic import PrivateAttr, model_validator

from ...limits import MAX_TRAYS
from .. import hostlist
from .explicit import Explicit
from .fat_tree import FatTree
from .fields import Strict
from .networks import Network, Service
from .nvlink import Nvlink
from .plans import GuidPlan, LidPlan
from .trays import TrayGroup


class FabricSpec(Strict):
    """The InfiniBand fabric: generated (``fat_tree``) or listed (``explicit``)."""

    fat_tree: FatTree | None = None
    explicit: Explicit | None = None

    @model_validator(mode="after")
    def _exactly_one(self):
        if (self.fat_tree is None) == (self.explicit is None):
            raise ValueError("give exactly one of fat_tree or explicit")
        return self


class Spec(Strict):
    """A whole spec: trays, NVLink, the fabric, and the GUID and LID plans."""

    name: str = "fabric"
    description: str = ""
    trays: list[TrayGroup] = []
    nvlink: Nvlink | None = None
    fabric: FabricSpec
    guids: GuidPlan = GuidPlan()
    lids: LidPlan = LidPlan()
    services: list[Service] = []  # hosts the other networks reach that are no trays
    networks: list[Network] = []  # front end, storage, out-of-band management, ...
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
