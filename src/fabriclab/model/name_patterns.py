"""Names made from the spec's name patterns (``IB-LEAF-{n:02d}``, ``nvl{n}``)."""

from __future__ import annotations

from ..limits import NAME_MAX
from .assembly import spec_error


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
