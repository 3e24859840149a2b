"""Slurm-style hostlists: ``sched-worker[1-2]``, ``gb-r[01-08]-t[01-18]``, ``a1,b[3,5-6]``.

Expansion follows Slurm's ``scontrol show hostnames``: comma-separated terms at the top
level, and within a term every bracket is a range set whose leftmost bracket varies
slowest.  A range keeps the zero padding of its lower bound (``[01-08]``).

Written here rather than taken from a library because the one maintained Python
implementation (``python-hostlist``) differs from Slurm on padding rules and has no
notion of growing a range, which ``scale()`` needs.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
MAX_HOSTS = 1_000_000


class HostlistError(ValueError):
    """A hostlist that cannot be expanded; the message says why."""


@dataclass(frozen=True)
class _Range:
    lo: int
    hi: int
    width: int  # zero-padding width, 0 = none

    def values(self) -> list[str]:
        if self.width:
            return [str(v).zfill(self.width) for v in range(self.lo, self.hi + 1)]
        return [str(v) for v in range(self.lo, self.hi + 1)]

    def __len__(self) -> int:
        return self.hi - self.lo + 1


def _split_top(text: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    terms, depth, cur = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
            if depth > 1:
                raise HostlistError(f"nested '[' in {text!r}")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"unbalanced ']' in {text!r}")
        if ch == "," and depth == 0:
            terms.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth:
        raise HostlistError(f"unclosed '[' in {text!r}")
    terms.append("".join(cur))
    return terms


def _parse_bracket(body: str, term: str) -> list[_Range]:
    ranges = []
    for part in body.split(","):
        m = _RANGE.match(part.strip())
        if not m:
            raise HostlistError(f"bad range {part!r} in {term!r}")
        lo_s, hi_s = m.group(1), m.group(2) or m.group(1)
        lo, hi = int(lo_s), int(hi_s)
        if hi < lo:
            raise HostlistError(f"range {part!r} runs backwards in {term!r}")
        width = len(lo_s) if lo_s.startswith("0") and len(lo_s) > 1 else 0
        ranges.append(_Range(lo, hi, width))
    return ranges


def _parse_term(term: str) -> list[str | list[_Range]]:
    """A term as a list of literal strings and bracket range-sets."""
    parts: list[str | list[_Range]] = []
    pos = 0
    for m in re.finditer(r"\[([^\]]*)\]", term):
        if m.start() > pos:
            parts.append(term[pos : m.start()])
        parts.append(_parse_bracket(m.group(1), term))
        pos = m.end()
    if pos < len(term):
        parts.append(term[pos:])
    return parts


_NAME_OK = re.compile(r"^[A-Za-z0-9._-]+$")


def expand(text: str) -> list[str]:
    """Expand a hostlist into host names, in Slurm's order.  Duplicates are an error."""
    if not isinstance(text, str) or not text.strip():
        raise HostlistError("empty hostlist")
    hosts: list[str] = []
    for term in _split_top(text.strip()):
        term = term.strip()
        if not term:
            raise HostlistError(f"empty term in {text!r}")
        parts = _parse_term(term)
        choices = [[p] if isinstance(p, str) else [v for r in p for v in r.values()] for p in parts]
        count = 1
        for c in choices:
            count *= len(c)
        if len(hosts) + count > MAX_HOSTS:
            raise HostlistError(f"{text!r} expands to more than {MAX_HOSTS} hosts")
        for combo in itertools.product(*choices):
            name = "".join(combo)
            if not _NAME_OK.match(name):
                raise HostlistError(f"bad host name {name!r} in {text!r}")
            hosts.append(name)
    seen: set[str] = set()
    for h in hosts:
        if h in seen:
            raise HostlistError(f"host {h!r} appears twice in {text!r}")
        seen.add(h)
    return hosts


def scale(text: str, count: int) -> str:
    """A hostlist of exactly ``count`` hosts that extends ``text`` by growing its first
    bracket, e.g. ``scale("gb-r[01-08]-t[01-18]", 8192)`` is
    ``"gb-r[001-455]-t[01-18],gb-r456-t[01-02]"``.  This is how ``--trays N`` enlarges a
    preset while keeping its naming scheme.
    """
    if count < 1:
        raise HostlistError("tray count must be at least 1")
    terms = _split_top(text.strip())
    if len(terms) != 1:
        raise HostlistError(f"cannot scale a multi-term hostlist {text!r}")
    parts = _parse_term(terms[0])
    brackets = [i for i, p in enumerate(parts) if not isinstance(p, str)]
    if not brackets:
        raise HostlistError(f"cannot scale {text!r}: it has no [range]")
    first = brackets[0]
    inner = 1
    for i in brackets[1:]:
        inner *= sum(len(r) for r in parts[i])  # type: ignore[union-attr]
    full, rest = divmod(count, inner)
    ranges: list[_Range] = parts[first]  # type: ignore[assignment]
    lo, width = ranges[0].lo, ranges[0].width
    last = lo + full + (1 if rest else 0) - 1
    if width:
        width = max(width, len(str(last)))

    def fmt(p) -> str:
        if isinstance(p, str):
            return p
        if len(p) == 1 and p[0].lo == p[0].hi:
            return _fmt_range(p[0])
        return "[" + ",".join(_fmt_range(x) for x in p) + "]"

    def build(r: _Range) -> str:
        return "".join(fmt(p) for p in parts[:first] + [[r]] + parts[first + 1 :])

    out = []
    if full:
        out.append(build(_Range(lo, lo + full - 1, width)))
    if rest:
        out.extend(expand(build(_Range(last, last, width)))[:rest])
    return ",".join(out)


def _fmt_range(r: _Range) -> str:
    lo = str(r.lo).zfill(r.width) if r.width else str(r.lo)
    hi = str(r.hi).zfill(r.width) if r.width else str(r.hi)
    return lo if r.lo == r.hi else f"{lo}-{hi}"
