"""Durations as every command, scenario and admin request takes them: a number of
seconds (``2``, ``2.5``, ``1e-3``) or a number with a unit (``500ms``, ``2s``, ``1m``,
``1h``); one parser, so ``--period 2s`` means what ``period: 2s`` in a scenario means.
"""

from __future__ import annotations

import re

from ...errors import InputError, Problem

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT = {None: 1.0, "ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
LONGEST = 10 * 365 * 86400  # ten years: past any run, and still exact as a float
EXAMPLES = "2, 2.5, 2s, 500ms, 1m, 1h"


def seconds(value, where: str, low: float = 0.0, high: float = LONGEST) -> float:
    """``value`` (a number of seconds, or a text as above) in seconds, from ``low`` to
    ``high``; else an InputError naming ``where`` (the option, argument or file line)."""
    if isinstance(value, bool):
        raise InputError([Problem(where, f"{value!r} is not a duration ({EXAMPLES})")])
    if isinstance(value, int | float):
        v = float(value)
    else:
        text = str(value)
        m = _DURATION.match(text) if len(text) < 40 else None
        if not m:
            raise InputError([Problem(where, f"{text[:40]!r} is not a duration ({EXAMPLES})")])
        v = float(m.group(1)) * _UNIT[m.group(2)]
    if not low <= v <= high:  # (not a NaN either)
        raise InputError([Problem(where, f"{value!r}: want {_span(low)} to {_span(high)}")])
    return v


def _span(s: float) -> str:
    if s < 3600:
        return f"{s:g} s"
    if s < 86400:
        return f"{s / 3600:g} h"
    days = s / 86400
    return f"{days:g} day" + ("" if days == 1 else "s")
