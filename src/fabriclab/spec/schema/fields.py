"""The spec's field types, each checked on its own: numbers in IBA's bit widths (GUIDs,
vendor and device ids, LIDs, said in decimal or hex), names, name patterns (widths
bounded before anything is formatted), rates and widths, and device model keys."""

from __future__ import annotations

import re
import string
from typing import Annotated

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from ... import gpus
from ...ib import devices, rates
from ...ib.ids import DEVID_MAX, GUID_MAX, VENDID_MAX
from ...limits import INT_DIGITS_MAX, NAME_MAX


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


def check_rate(v: str | None) -> str | None:
    if v is None:
        return v
    try:
        return rates.speed(v).token
    except KeyError as e:
        raise ValueError(e.args[0]) from None


def check_width(v: str | None) -> str | None:
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


def _gpu_model(v: str) -> str:
    if v not in gpus.MODELS:
        raise ValueError(f"unknown GPU model {v!r}; one of: {', '.join(gpus.MODELS)}")
    return v


GpuModelKey = Annotated[str, AfterValidator(_gpu_model)]
SwitchModelKey = Annotated[str, AfterValidator(_known(devices.switch_model))]
Rate = Annotated[str, BeforeValidator(lambda v: check_rate(str(v)))]
WidthToken = Annotated[str, BeforeValidator(lambda v: check_width(str(v)))]


class Strict(BaseModel):
    """A part of the spec: a key it does not know is an error."""

    model_config = ConfigDict(extra="forbid", frozen=False)
