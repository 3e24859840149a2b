"""Reading a spec from YAML (a file or a preset) with errors that point at the line."""

from __future__ import annotations

import re
from importlib import resources
from typing import Any

from pydantic import ValidationError

from .. import inputs
from ..errors import Problem, SpecError
from ..limits import MAX_TRAYS, PROBLEMS_KEPT, SPEC_BYTES_MAX
from . import hostlist, yaml_guard
from .schema import Spec

PRESET_PACKAGE = "fabriclab.spec.presets"


def preset_names() -> list[str]:
    """The names of the specs shipped with fabriclab, sorted."""
    files = resources.files(PRESET_PACKAGE)
    return sorted(p.name[:-5] for p in files.iterdir() if p.name.endswith(".yaml"))


def preset_text(name: str) -> str:
    """The YAML text of a preset."""
    return resources.files(PRESET_PACKAGE).joinpath(f"{name}.yaml").read_text()


def _line_for(lines: dict[tuple, int], loc: tuple) -> int | None:
    """The line of ``loc``, or of the nearest enclosing key or item the text has."""
    loc = tuple(loc)
    while loc:
        if loc in lines:
            return lines[loc]
        loc = loc[:-1]
    return lines.get(())


def _loc_str(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top)"


def _clean_msg(err: Any) -> str:
    msg = err["msg"]
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix) :]
    if err["type"] == "extra_forbidden":
        return "unknown key"
    if err["type"] == "missing":
        return "required key is missing"
    return msg


def parse_spec_text(text: str, source: str) -> Spec:
    """Validate YAML text as a spec; all problems are raised together as SpecError."""
    data: Any = yaml_guard.load(text, source)
    if data is None:
        raise SpecError([Problem(source, "the spec is empty")])
    if not isinstance(data, dict):
        raise SpecError(
            [Problem(f"{source}:1", "a spec is a mapping of keys (name, trays, fabric, …)")]
        )
    try:
        spec = Spec.model_validate(data)
        spec._source = source
        spec._text = text
        return spec
    except ValidationError as e:
        # the first PROBLEMS_KEPT are located and reported; the rest are only counted
        everything = e.errors(include_url=False, include_input=False, include_context=False)
        errors = everything[:PROBLEMS_KEPT]
        locs: list[tuple] = []
        for err in errors:
            loc = tuple(
                p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-"))
            )
            # pydantic reports union members as extra loc parts ('int', 'list[...]'); drop them
            loc = tuple(
                p for p in loc if not (isinstance(p, str) and ("[" in p or p in ("int", "str")))
            )
            locs.append(loc)
        lines = yaml_guard.lines_for(text, set(locs))
        problems = []
        for err, loc in zip(errors, locs, strict=False):
            line = _line_for(lines, loc)
            where = f"{source}:{line}: {_loc_str(loc)}" if line else f"{source}: {_loc_str(loc)}"
            problems.append(Problem(where, _clean_msg(err)))
        # a union field that fails both ways reports twice; keep the first of each place
        seen, unique = set(), []
        for p in problems:
            if p.where not in seen:
                seen.add(p.where)
                unique.append(p)
        raise SpecError(unique, dropped=len(everything) - len(errors)) from None


_WHERE_TOKEN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]|\.")


def locate(spec: Spec, error: SpecError) -> SpecError:
    """The same error with each dotted spec path (``fabric.fat_tree.spines``) prefixed by
    the file and line it refers to."""
    if not spec._source:
        return error
    locs: list[tuple] = []
    for p in error.problems:
        loc: list = []
        pos = 0
        while pos < len(p.where):
            m = _WHERE_TOKEN.match(p.where, pos)
            if not m:
                loc = []
                break
            if m.group(1):
                loc.append(m.group(1))
            elif m.group(2):
                loc.append(int(m.group(2)))
            pos = m.end()
        locs.append(tuple(loc))
    lines = yaml_guard.lines_for(spec._text, {loc for loc in locs if loc}) if spec._text else {}
    out = []
    for p, at in zip(error.problems, locs, strict=False):
        line = _line_for(lines, at) if at else None
        where = f"{spec._source}:{line}: {p.where}" if line else f"{spec._source}: {p.where}"
        out.append(Problem(where, p.what))
    return SpecError(out, warnings=error.warnings, dropped=error.dropped)


def load_spec(arg: str, *, trays: int | None = None) -> Spec:
    """A spec from a YAML path or a preset name; ``trays`` scales it (see ``scale_trays``)."""
    kind = inputs.path_kind(arg, error=SpecError)
    if kind == "file":
        text = inputs.read_text(arg, SPEC_BYTES_MAX, "a spec", error=SpecError)
        spec = parse_spec_text(text, arg)
    elif arg in preset_names():
        spec = parse_spec_text(preset_text(arg), f"preset:{arg}")
    elif kind == "dir":
        raise SpecError([Problem(arg, "is a directory, not a spec file (nor a preset)")])
    else:
        known = ", ".join(preset_names())
        shown = arg if len(arg) <= 80 else arg[:60] + "…"
        raise SpecError([Problem(shown, f"no such file, and not a preset (presets: {known})")])
    if trays is not None:
        spec = scale_trays(spec, trays)
    return spec


def scale_trays(spec: Spec, count: int) -> Spec:
    """The spec with exactly ``count`` trays: the last tray group's hostlist grows (or is
    cut) in its first range, the other groups stay.  Only generated fabrics scale; the
    other networks, which name trays one by one, are left out of a scaled spec."""
    if spec.fabric.fat_tree is None:
        raise SpecError([Problem("--trays", "only a fat_tree fabric can be scaled")])
    if not spec.trays:
        raise SpecError([Problem("--trays", "the spec has no trays to scale")])
    if spec.nvlink is not None and spec.nvlink.domains:
        raise SpecError(
            [
                Problem(
                    "--trays",
                    "NVLink domains are listed one by one; use nvlink.trays_per_domain to scale",
                )
            ]
        )
    if count > MAX_TRAYS:
        raise SpecError(
            [
                Problem(
                    "--trays",
                    f"{count} trays; a fabric has room for {MAX_TRAYS} (one unicast LID each)",
                )
            ]
        )
    fixed = sum(hostlist.count(g.hosts) for g in spec.trays[:-1])
    want = count - fixed
    if want < 1:
        raise SpecError([Problem("--trays", f"the first tray groups already hold {fixed} trays")])
    last = spec.trays[-1]
    try:
        hosts = hostlist.scale(last.hosts, want)
    except hostlist.HostlistError as e:
        raise SpecError([Problem("--trays", str(e))]) from None
    new = spec.model_copy(deep=True)
    new.trays[-1].hosts = hosts
    if count != fixed + hostlist.count(last.hosts):
        # the other networks cable trays one by one: a scaled spec has none of them
        new.networks, new.services = [], []
    return new
