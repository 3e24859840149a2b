"""Names made from the spec's name patterns (``IB-LEAF-{n:02d}``, ``nvl{n}``, the trays'
hostlists), and where a cluster's size outgrows a pattern's zero-padded field."""

from __future__ import annotations

import re
import string
from collections.abc import Iterable

from ..errors import Problem
from ..limits import NAME_MAX
from ..spec import hostlist
from ..spec.schema import Spec
from .assembly import spec_error
from .cluster import Cluster

_PADDED = re.compile(r"0(\d+)d?")  # a format spec that zero-pads a number: 02d, 03


def name_from_pattern(pattern: str, where: str, **fields) -> str:
    """``pattern`` filled in with ``fields``; a SpecError at ``where`` (the pattern's spec
    path) when a field is unknown or the name comes out longer than a name may be."""
    # the schema has bounded every width and precision in the pattern (check_pattern)
    try:
        name = pattern.format(**fields)
    except (KeyError, IndexError, ValueError, TypeError, OverflowError, AttributeError) as e:
        raise spec_error(where, f"bad name pattern {pattern!r}: {e}") from None
    if len(name) > NAME_MAX:
        raise spec_error(
            where,
            f"pattern {pattern!r} makes the {len(name)}-character name {name[:30]!r}…; "
            f"a name has at most {NAME_MAX}",
        )
    return name


# A pattern's field that outgrows its zero padding (field 2 wide, value 100) is filled
# in as wide as the value needs (``{n:02d}`` gives ``nvl72-r100``; a hostlist's
# ``[01-113]`` gives ``gb-r100``, as Slurm reads it): every name that fits keeps its
# width, and trays and NVLink domains numbered alike widen at the same number.  Names
# are never re-padded to the wider width: a name that fits never changes as a spec grows.


def _format_template(pattern: str) -> tuple[re.Pattern, list[int]] | None:
    """A format pattern as a regular expression of its names, and each field's zero
    padding (0: none); None when it cannot be read so."""
    regex, widths = "", []
    try:
        parsed = list(string.Formatter().parse(pattern))
    except ValueError:
        return None
    for literal, field, spec, _ in parsed:
        regex += re.escape(literal)
        if field is None:
            continue
        padded = _PADDED.fullmatch(spec or "")
        if not (padded or spec in ("", "d")):
            return None
        regex += r"(\d+)"
        widths.append(int(padded.group(1)) if padded else 0)
    return re.compile(regex), widths


def _hostlist_template(text: str) -> tuple[re.Pattern, list[int]] | None:
    """A hostlist's first term as a regular expression of its names (each bracket a
    number), and each bracket's zero padding (0: none)."""
    try:
        regex, widths = hostlist.name_shape(text)
    except hostlist.HostlistError:
        return None
    return re.compile(regex), widths


def _outgrown(
    template: tuple[re.Pattern, list[int]] | None, names: Iterable[str]
) -> tuple[str, int, int] | None:
    """The first name whose number is wider than its field's zero padding, the padding,
    and the widest such number's digits; None when every name fits."""
    if template is None:
        return None
    regex, widths = template
    first, width, wide = None, 0, 0
    for name in names:
        m = regex.fullmatch(name)
        if m is None:
            continue
        for digits, pad in zip(m.groups(), widths, strict=True):
            if pad and len(digits) > pad:
                first = first or name
                width, wide = pad, max(wide, len(digits))
    return (first, width, wide) if first else None


def outgrown(spec: Spec, cluster: Cluster) -> list[Problem]:
    """One warning per name pattern of ``spec`` (the trays' hostlists, ``nvlink.name``,
    the fat tree's ``names``) whose zero-padded field the built ``cluster`` outgrows:
    the pattern, the first name past it, and the new width."""
    checks: list[tuple[str, str, tuple[re.Pattern, list[int]] | None, list[str]]] = []
    hosts = [t.host for t in cluster.trays]
    start = 0
    for i, group in enumerate(spec.trays):
        count = hostlist.count(group.hosts)
        template = _hostlist_template(group.hosts)
        checks.append((f"trays[{i}].hosts", group.hosts, template, hosts[start : start + count]))
        start += count
    nv = spec.nvlink
    if nv is not None and nv.trays_per_domain:
        names = [d.name for d in cluster.domains]
        checks.append(("nvlink.name", nv.name, _format_template(nv.name), names))
    ft = spec.fabric.fat_tree
    if ft is not None:
        for role in ("leaf", "spine", "core"):
            pattern = getattr(ft.names, role)
            names = [n.name or "" for n in cluster.fabric.switches() if n.role == role]
            where = f"fabric.fat_tree.names.{role}"
            checks.append((where, pattern, _format_template(pattern), names))
    out = []
    for where, pattern, template, names in checks:
        hit = _outgrown(template, names)
        if hit:
            first, width, wide = hit
            out.append(
                Problem(
                    where,
                    f"{pattern} outgrows its {width}-digit field: from {first} on the number "
                    f"is {wide} digits wide (the names that fit keep {width})",
                )
            )
    return out
