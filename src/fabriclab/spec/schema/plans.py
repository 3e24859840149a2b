"""The spec's plans for addresses: how GUIDs are made (``GuidPlan``) and how LIDs are
assigned, and held at power-on (``LidPlan``)."""

from __future__ import annotations

from typing import Literal

from pydantic import field_validator

from .fields import Guid, Lid, Strict


class GuidPlan(Strict):
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


class LidPlan(Strict):
    """LIDs as the subnet manager is expected to assign them: switches from
    ``switch_base`` (top tier first), then CAs from ``ca_base`` in tray order."""

    switch_base: Lid = 1
    ca_base: Lid | None = None  # default: 100, or the next hundred above the switches
    # What a served fabric's ports hold at power-on: ``plan``, the plan's LIDs, as if a
    # previous SM had assigned them; ``cold``, no LID (0) and no SM LID until an SM
    # assigns them, as real hardware after power-on (``fabriclab up --cold`` likewise).
    power_on: Literal["plan", "cold"] = "plan"
