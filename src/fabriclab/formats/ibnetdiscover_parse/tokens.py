"""The pieces dump lines are made of, bounded against hostile input: number and GUID
fragments for the line patterns, node ids that carry a GUID (``S-<guid>``), node type
words, rate tokens (``4xNDR``) and GUIDs as written.

Hostile input is bounded before it is read: a line longer than any ibnetdiscover prints
is skipped, every number pattern has a bounded number of digits (so int() is cheap and
never refused), GUIDs have at most 16 hex digits, ports are 1-254, and no pattern can
backtrack more than a bounded amount.
"""

from __future__ import annotations

import re

from ...ib import rates
from ...ib.enums import NodeType

PORT = r"\d{1,3}"  # a port number or port count (checked against 1-254 after matching)
LID = r"\d{1,6}"  # a LID (checked against the unicast range by the addressing rules)
HEX = r"[0-9a-fA-F]{1,16}"  # a GUID: 64 bits
ANYHEX = r"[0-9a-fA-F]{1,64}"  # as written; more than 16 digits is reported

ID_GUID = re.compile(r"^([SHR])-([0-9a-fA-F]{1,16})$")
LONG_ID_GUID = re.compile(r"^[SHR]-[0-9a-fA-F]{17,}$")
TYPE_BY_PREFIX = {"S": NodeType.SWITCH, "H": NodeType.CA, "R": NodeType.ROUTER}
TYPE_BY_WORD = {
    "Switch": NodeType.SWITCH,
    "Ca": NodeType.CA,
    "Hca": NodeType.CA,
    "Rt": NodeType.ROUTER,
}
TYPE_BY_ABBR = {"SW": NodeType.SWITCH, "CA": NodeType.CA, "RT": NodeType.ROUTER}

_RATE_RE = re.compile(r"^(\d{1,2}x)([A-Za-z0-9?]{1,8})$")
_RATE_CACHE: dict[str, tuple[rates.Width, rates.Speed] | None] = {}
_RATE_CACHE_MAX = 256  # garbage tokens must not grow it without bound


def rate_tokens(tok: str | None) -> tuple[rates.Width, rates.Speed] | None:
    """Width and speed of a rate token (``4xNDR``), unknown parts as such; None when
    there is no token or it is not a rate."""
    if not tok:
        return None
    hit = _RATE_CACHE.get(tok)
    if hit is not None or tok in _RATE_CACHE:
        return hit
    m = _RATE_RE.match(tok)
    out = (rates.width_or_unknown(m.group(1)), rates.speed_or_unknown(m.group(2))) if m else None
    if len(_RATE_CACHE) < _RATE_CACHE_MAX:
        _RATE_CACHE[tok] = out
    return out


def hex_guid(text: str) -> int | None:
    """A GUID as written, or None when it has more than 64 bits."""
    return int(text, 16) if len(text.lstrip("0")) <= 16 else None
