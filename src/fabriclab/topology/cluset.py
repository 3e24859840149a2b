"""topograph's host-list compaction and expansion (its ``internal/cluset`` package):
the node lists of Slurm's topology files and of topograph's requests and models.

These follow topograph, not Slurm (spec.hostlist is Slurm's): compaction groups names by
the prefix before their trailing number and keeps each number's own digits, expansion
takes one bracket at the end of an entry and treats a bad number as 0 (Go's ``Atoi``).
"""

from __future__ import annotations

import re

from ..spec.hostlist import HostlistError, split_terms
from .errors import OptionError

MAX_EXPANDED = 500_000  # topograph's maxExpandedNodes (internal/cluset/cluset.go)

_COMPACT = re.compile(r"^(.*?)(0*\d+)$")
_EXPAND = re.compile(r"^(.*?)\[(.*?)\]$")


def compact(names: list[str]) -> list[str]:
    """topograph's ``cluset.Compact``: names grouped by the prefix before their trailing
    number (``^(.*?)(0*\\d+)$``), prefixes sorted, numbers sorted by value and joined into
    ranges that keep each number's own digits: ``n-[1101-1102]``, ``S[2-3]``, ``x1``."""
    groups: dict[str, list[str] | None] = {}
    for name in names:
        match = _COMPACT.match(name)
        if match:
            numbers = groups.get(match.group(1))
            if numbers is None:
                groups[match.group(1)] = [match.group(2)]
            else:
                numbers.append(match.group(2))
        else:
            groups.setdefault(name, None)
    out = []
    for prefix in sorted(groups):
        numbers = groups[prefix]
        if not numbers:
            out.append(prefix)
            continue
        numbers = sorted(numbers, key=int)
        if len(numbers) == 1:
            out.append(prefix + numbers[0])
            continue
        parts, start, end = [], numbers[0], numbers[0]
        for number in numbers[1:]:
            if int(number) == int(end) + 1:
                end = number
            else:
                parts.append(start if start == end else f"{start}-{end}")
                start = end = number
        parts.append(start if start == end else f"{start}-{end}")
        out.append(prefix + "[" + ",".join(parts) + "]")
    return out


def expand_list(text: str) -> list[str]:
    """topograph's ``cluset.ExpandList`` with its ``ExpandWithLimit`` bound: comma-separated
    entries (blank ones skipped), each ``prefix[ranges]`` (one bracket, at the end) or a
    plain name; ranges keep the lower bound's width.  More than MAX_EXPANDED names, or
    brackets that are nested, unbalanced or unclosed, are an OptionError."""
    try:
        entries = [term.strip() for term in split_terms(text)]
    except HostlistError as e:
        raise OptionError(str(e)) from None
    out: list[str] = []
    for entry in entries:
        if not entry:
            continue
        match = _EXPAND.match(entry)
        if not match:
            out.append(entry)
            continue
        prefix = match.group(1)
        for part in match.group(2).split(","):
            if "-" in part:
                low_text, high_text = part.split("-")[:2]
                width = len(low_text)
                low, high = _atoi(low_text), _atoi(high_text)
                if high >= low and high - low >= MAX_EXPANDED - len(out):  # before expanding
                    raise OptionError(f"expanded node list exceeds {MAX_EXPANDED} entries")
                out.extend(f"{prefix}{i:0{width}d}" for i in range(low, high + 1))
            else:
                out.append(prefix + part)
    return out


def _atoi(text: str) -> int:
    """Go's strconv.Atoi as topograph uses it: a bad number counts as 0."""
    try:
        return int(text)
    except ValueError:
        return 0
