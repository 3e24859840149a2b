"""Slurm-style hostlists: ``sched-worker[1-2]``, ``gb-r[01-08]-t[01-18]``, ``a1,b[3,5-6]``.

Expansion follows Slurm's ``scontrol show hostnames``: comma-separated terms at the top
level, and within a term every bracket is a range set whose leftmost bracket varies
slowest.  A range keeps the zero padding of its lower bound (``[01-08]``).

Written here rather than taken from a library because the one maintained Python
implementation (``python-hostlist``) differs from Slurm on padding rules and has no
notion of growing a range, which ``scale()`` needs; ClusterShell's NodeSet sorts and
merges what it is given (Slurm keeps the order and the duplicates, which fabriclab
reports), and its RangeSet is a set of every value, so it cannot count a range without
expanding it.  Here a hostlist is always counted and its names' lengths checked before
anything is expanded (``count``), so ``n[1-1000000000000]`` costs nothing.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass

from ..limits import HOST_NAME_MAX, MAX_HOSTS

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
_LITERAL_OK = re.compile(r"^[A-Za-z0-9._-]*$")
_BRACKETS = re.compile(r"[\[\],]")


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

    @property
    def longest(self) -> int:
        """Characters of its longest value."""
        return max(self.width, len(str(self.hi)))


def _short(text: str) -> str:
    return repr(text) if len(text) <= 80 else repr(text[:60] + "…")


def split_terms(text: str) -> list[str]:
    """A hostlist's terms: split on the commas outside brackets (one pass over the brackets
    and commas)."""
    terms, depth, start = [], 0, 0
    for m in _BRACKETS.finditer(text):
        ch = m.group()
        if ch == "[":
            depth += 1
            if depth > 1:
                raise HostlistError(f"nested '[' in {_short(text)}")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"unbalanced ']' in {_short(text)}")
        elif depth == 0:
            terms.append(text[start : m.start()])
            start = m.end()
    if depth:
        raise HostlistError(f"unclosed '[' in {_short(text)}")
    terms.append(text[start:])
    return terms


def _parse_bracket(body: str, term: str) -> list[_Range]:
    ranges = []
    for part in body.split(","):
        m = _RANGE.match(part.strip())
        if not m:
            raise HostlistError(f"bad range {_short(part)} in {_short(term)}")
        lo_s, hi_s = m.group(1), m.group(2) or m.group(1)
        if len(lo_s) > HOST_NAME_MAX or len(hi_s) > HOST_NAME_MAX:
            raise HostlistError(f"a number of more than {HOST_NAME_MAX} digits in {_short(term)}")
        lo, hi = int(lo_s), int(hi_s)
        if hi < lo:
            raise HostlistError(f"range {part!r} runs backwards in {_short(term)}")
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


def _terms(text: str) -> list[list[str | list[_Range]]]:
    """The parsed terms of a hostlist, with every name checked for its characters and
    length, and the host count checked against MAX_HOSTS, all without expanding."""
    if not isinstance(text, str) or not text.strip():
        raise HostlistError("empty hostlist")
    out = []
    total = 0
    for term in split_terms(text.strip()):
        term = term.strip()
        if not term:
            raise HostlistError(f"empty term in {_short(text)}")
        parts = _parse_term(term)
        longest = 0
        count = 1
        for p in parts:
            if isinstance(p, str):
                if not _LITERAL_OK.match(p):
                    raise HostlistError(f"bad host name {_short(term)} in {_short(text)}")
                longest += len(p)
            else:
                longest += max(r.longest for r in p)
                count *= sum(len(r) for r in p)
        if longest > HOST_NAME_MAX:
            raise HostlistError(
                f"{_short(term)} makes host names of {longest} characters; "
                f"a host name has at most {HOST_NAME_MAX}"
            )
        total += count
        if total > MAX_HOSTS:
            raise HostlistError(f"{_short(text)} names more than {MAX_HOSTS} hosts")
        out.append(parts)
    return out


def count(text: str) -> int:
    """How many hosts a hostlist names, without expanding it (and checked like ``expand``,
    except for duplicates, which only expansion shows)."""
    return sum(
        math.prod(1 if isinstance(p, str) else sum(len(r) for r in p) for p in parts)
        for parts in _terms(text)
    )


def expand(text: str) -> list[str]:
    """Expand a hostlist into host names, in Slurm's order.  Duplicates are an error.
    The count is checked first: nothing larger than MAX_HOSTS is ever expanded."""
    hosts: list[str] = []
    for parts in _terms(text):
        choices = [[p] if isinstance(p, str) else [v for r in p for v in r.values()] for p in parts]
        hosts.extend("".join(combo) for combo in itertools.product(*choices))
    seen: set[str] = set()
    for h in hosts:
        if h in seen:
            raise HostlistError(f"host {h!r} appears twice in {_short(text)}")
        seen.add(h)
    return hosts


def scale(text: str, count: int) -> str:
    """A hostlist of exactly ``count`` hosts that extends ``text`` by growing its first
    bracket, e.g. ``scale("gb-r[01-08]-t[01-18]", 8192)`` is
    ``"gb-r[01-455]-t[01-18],gb-r456-t[01-02]"``.  This is how ``--trays N``
    enlarges a preset while keeping its naming scheme: the bracket keeps its zero
    padding, so every name that fits it stays as it was (``gb-r01-t01``) and a number
    past it is as wide as it needs to be (``gb-r100-t01``), as Slurm reads
    ``gb-r[01-455]``; the spec's other name patterns (``nvl72-r{n:02d}``) grow the same
    way, so rack 100's trays and NVLink domain agree (``model.name_patterns.outgrown``
    says where a field is outgrown).
    """
    if count < 1:
        raise HostlistError("tray count must be at least 1")
    if count > MAX_HOSTS:
        raise HostlistError(f"more than {MAX_HOSTS} hosts")
    terms = split_terms(text.strip())
    if len(terms) != 1:
        raise HostlistError(f"cannot scale a multi-term hostlist {text!r}")
    parts = _parse_term(terms[0])
    brackets = [i for i, p in enumerate(parts) if not isinstance(p, str)]
    if not brackets:
        raise HostlistError(f"cannot scale {text!r}: it has no [range]")
    first = brackets[0]
    inner = 1
    for i in brackets[1:]:
        inner *= sum(len(r) for r in parts[i])
    full, rest = divmod(count, inner)
    ranges: list[_Range] = parts[first]  # type: ignore[assignment]
    lo, width = ranges[0].lo, ranges[0].width
    last = lo + full + (1 if rest else 0) - 1

    def fmt(p) -> str:
        if isinstance(p, str):
            return p
        if len(p) == 1 and p[0].lo == p[0].hi:
            return _fmt_range(p[0])
        return "[" + ",".join(_fmt_range(x) for x in p) + "]"

    def build(r: _Range) -> str:
        return "".join(fmt(p) for p in [*parts[:first], [r], *parts[first + 1 :]])

    out = []
    if full:
        out.append(build(_Range(lo, lo + full - 1, width)))
    if rest:
        second = parts[brackets[1]] if len(brackets) == 2 else None
        if isinstance(second, list) and len(second) == 1:  # one range: gb-r456-t[01-02]
            head = second[0]
            cut = [*parts[:first], [_Range(last, last, width)], *parts[first + 1 :]]
            cut[brackets[1]] = [_Range(head.lo, head.lo + rest - 1, head.width)]
            out.append("".join(fmt(p) for p in cut))
        else:
            out.extend(expand(build(_Range(last, last, width)))[:rest])
    return ",".join(out)


def name_shape(text: str) -> tuple[str, list[int]]:
    """The shape of the names a hostlist's first term makes: a regular expression (each
    bracket a number, ``(\\d+)``) and each bracket's zero padding (0: none), e.g.
    ``gb-r[01-113]-t[01-18]`` -> ``gb\\-r(\\d+)\\-t(\\d+)``, ``[2, 2]``."""
    regex, widths = "", []
    for part in _parse_term(split_terms(text.strip())[0]):
        if isinstance(part, str):
            regex += re.escape(part)
        else:
            regex += r"(\d+)"
            widths.append(max(r.width for r in part))
    return regex, widths


def _fmt_range(r: _Range) -> str:
    lo = str(r.lo).zfill(r.width) if r.width else str(r.lo)
    hi = str(r.hi).zfill(r.width) if r.width else str(r.hi)
    return lo if r.lo == r.hi else f"{lo}-{hi}"
