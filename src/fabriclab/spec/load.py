"""Reading a spec from YAML (a file or a preset) with errors that point at the line."""

from __future__ import annotations

from importlib import resources
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ..errors import Problem, SpecError
from . import hostlist
from .schema import Spec

PRESET_PACKAGE = "fabriclab.spec.presets"


def preset_names() -> list[str]:
    files = resources.files(PRESET_PACKAGE)
    return sorted(p.name[:-5] for p in files.iterdir() if p.name.endswith(".yaml"))


def preset_text(name: str) -> str:
    return resources.files(PRESET_PACKAGE).joinpath(f"{name}.yaml").read_text()


class _Marks:
    """Line numbers of every key and item, by path, taken from the YAML node tree."""

    def __init__(self) -> None:
        self.lines: dict[tuple, int] = {}
        self.problems: list[Problem] = []

    def walk(self, node: yaml.Node, path: tuple, source: str) -> None:
        self.lines[path] = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            seen: set = set()
            for k, v in node.value:
                key = k.value
                if key in seen:
                    self.problems.append(
                        Problem(f"{source}:{k.start_mark.line + 1}", f"duplicate key {key!r}")
                    )
                seen.add(key)
                self.lines[path + (key,)] = k.start_mark.line + 1
                self.walk(v, path + (key,), source)
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                self.walk(v, path + (i,), source)

    def line_for(self, loc: tuple) -> int | None:
        loc = tuple(loc)
        while loc:
            if loc in self.lines:
                return self.lines[loc]
            loc = loc[:-1]
        return self.lines.get(())


def _loc_str(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top)"


def _clean_msg(err: dict) -> str:
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
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark else source
        raise SpecError([Problem(where, f"not valid YAML: {getattr(e, 'problem', e)}")]) from None
    if node is None:
        raise SpecError([Problem(source, "the spec is empty")])
    marks = _Marks()
    marks.walk(node, (), source)
    if marks.problems:
        raise SpecError(marks.problems)
    data: Any = yaml.SafeLoader(text).get_single_data()
    if not isinstance(data, dict):
        raise SpecError([Problem(f"{source}:1", "a spec is a mapping of keys (name, trays, fabric, …)")])
    try:
        spec = Spec.model_validate(data)
        spec._source = source
        spec._lines = marks.lines
        return spec
    except ValidationError as e:
        problems = []
        for err in e.errors():
            loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
            # pydantic reports union members as extra loc parts ('int', 'list[...]'); drop them
            loc = tuple(p for p in loc if not (isinstance(p, str) and ("[" in p or p in ("int", "str"))))
            line = marks.line_for(loc)
            where = f"{source}:{line}: {_loc_str(loc)}" if line else f"{source}: {_loc_str(loc)}"
            problems.append(Problem(where, _clean_msg(err)))
        # a union field that fails both ways reports twice; keep the first of each place
        seen, unique = set(), []
        for p in problems:
            if p.where not in seen:
                seen.add(p.where)
                unique.append(p)
        raise SpecError(unique) from None


_WHERE_TOKEN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]|\.")


def locate(spec: Spec, error: SpecError) -> SpecError:
    """The same error with each dotted spec path (``fabric.fat_tree.spines``) prefixed by
    the file and line it refers to."""
    if not spec._source:
        return error
    marks = _Marks()
    marks.lines = spec._lines
    out = []
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
        line = marks.line_for(tuple(loc)) if loc else None
        where = f"{spec._source}:{line}: {p.where}" if line else f"{spec._source}: {p.where}"
        out.append(Problem(where, p.what))
    return SpecError(out)


def load_spec(arg: str, *, trays: int | None = None) -> Spec:
    """A spec from a YAML path or a preset name; ``trays`` scales it (see ``scale_trays``)."""
    path = Path(arg)
    if path.is_file():
        try:
            text = path.read_text()
        except OSError as e:
            raise SpecError([Problem(arg, f"cannot read: {e.strerror}")]) from None
        spec = parse_spec_text(text, arg)
    elif arg in preset_names():
        spec = parse_spec_text(preset_text(arg), f"preset:{arg}")
    else:
        known = ", ".join(preset_names())
        raise SpecError([Problem(arg, f"no such file, and not a preset (presets: {known})")])
    if trays is not None:
        spec = scale_trays(spec, trays)
    return spec


def scale_trays(spec: Spec, count: int) -> Spec:
    """The spec with exactly ``count`` trays: the last tray group's hostlist grows (or is
    cut) in its first range, the other groups stay.  Only generated fabrics scale."""
    if spec.fabric.fat_tree is None:
        raise SpecError([Problem("--trays", "only a fat_tree fabric can be scaled")])
    if not spec.trays:
        raise SpecError([Problem("--trays", "the spec has no trays to scale")])
    if spec.nvlink is not None and spec.nvlink.domains:
        raise SpecError([Problem("--trays", "NVLink domains are listed one by one; "
                                 "use nvlink.trays_per_domain to scale")])
    fixed = sum(len(g.host_names()) for g in spec.trays[:-1])
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
    return new
