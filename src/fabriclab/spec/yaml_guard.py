"""Untrusted YAML, loaded safely and in one pass: libyaml's event stream is checked as it
comes (nesting depth, node count with every alias counted in full, keys, tags, numbers)
and the data is built from the same events, so nothing unchecked is ever composed or
constructed.  The line of a spec path is found by the same kind of pass, only when an
error needs it.

Why not ``yaml.load``: PyYAML's loaders compose the whole node tree first, recursively
(deep nesting ends in RecursionError), with aliases shared (a 1 KB "billion laughs"
document loads cheaply, but every consumer that walks it, pydantic included, walks 10**9
nodes), and they have no option to bound either.  Scalars are still resolved and
constructed by PyYAML's own resolver and SafeConstructor; only the tree walk is here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import yaml

from ..errors import FabriclabError, Problem, SpecError
from ..limits import INT_DIGITS_MAX, YAML_DEPTH_MAX, YAML_KEY_CHARS_MAX, YAML_NODES_MAX

_STD = "tag:yaml.org,2002:"
_STR, _INT, _MERGE = _STD + "str", _STD + "int", _STD + "merge"
# The tags a document may carry explicitly: YAML's core types.  Everything else
# (!!python/…, !!binary, !!timestamp, !!set, local tags) has no meaning here.
_SCALAR_TAGS = {_STD + t for t in ("str", "int", "float", "bool", "null")}
_ALLOWED_TAGS = {None, "!", _STD + "map", _STD + "seq"} | _SCALAR_TAGS
# YAML 1.1 implicit types never meant here: a host called 2024-01-01 stays text, and no
# invalid date ("2024-13-45") reaches datetime.
_DROPPED = {_STD + "timestamp", _STD + "value"}

_Parser = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when PyYAML was built with it


class _Resolver(yaml.resolver.Resolver):
    yaml_implicit_resolvers = {  # noqa: RUF012  (PyYAML looks resolvers up on the class)
        first: [(tag, rx) for tag, rx in pairs if tag not in _DROPPED]
        for first, pairs in yaml.resolver.Resolver.yaml_implicit_resolvers.items()
    }


_RESOLVE = _Resolver().resolve
_CTOR = yaml.constructor.SafeConstructor()
_CONSTRUCT = {tag: _CTOR.yaml_constructors[tag] for tag in _SCALAR_TAGS}


def _tag(tag: str | None) -> str:
    return "!!" + tag[len(_STD) :] if tag and tag.startswith(_STD) else str(tag)


class _Frame:
    __slots__ = (
        "anchor",
        "key",
        "key_next",
        "line",
        "merges",
        "path",
        "raw_key",
        "seen",
        "size",
        "value",
    )

    def __init__(self, value: dict | list, anchor: str | None, path: tuple, line: int):
        self.value = value
        self.anchor = anchor
        self.size = 1  # nodes inside, itself included, aliases counted in full
        self.path = path
        self.key_next = True  # mappings: the next node is a key
        self.key: Any = None
        self.raw_key: str | None = None
        self.seen: set[str] | None = set() if isinstance(value, dict) else None
        self.merges: list[dict] = []
        self.line = line


_MERGE_KEY = object()


def _walk(
    text: str,
    source: str,
    error: type[FabriclabError],
    *,
    build: bool = True,
    on_node: Callable[[tuple, int], bool] | None = None,
) -> Any:
    """Check the event stream of ``text`` and, with ``build``, return its data.  With
    ``on_node``, report each node's path and line (a mapping value's line is its key's);
    it returns True to stop the walk."""

    def fail(mark, what: str) -> FabriclabError:
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        return error([Problem(where, what)])

    anchors: dict[str, tuple[int, Any]] = {}
    stack: list[_Frame] = []
    total = 0
    docs = 0
    root: Any = None
    value: Any = None
    parser = _Parser(text)
    Scalar, Alias = yaml.ScalarEvent, yaml.AliasEvent
    MapStart, SeqStart = yaml.MappingStartEvent, yaml.SequenceStartEvent
    MapEnd, SeqEnd = yaml.MappingEndEvent, yaml.SequenceEndEvent
    try:
        while True:
            ev = parser.get_event()
            if ev is None:
                break
            kind = type(ev)
            if kind is MapEnd or kind is SeqEnd:
                done = stack.pop()
                value = done.value
                if done.merges:  # YAML merge keys: the mapping's own keys win, then the first merge
                    merged: dict = {}
                    for m in reversed(done.merges):
                        merged.update(m)
                    merged.update(value)
                    value = merged
                if done.anchor is not None:
                    anchors[done.anchor] = (done.size, value)
                size = done.size
                if not stack:
                    root = value
                    continue
                outer = stack[-1]
                outer.size += size
                _attach(outer, value, ev, fail)
                continue
            if (
                kind is not Scalar
                and kind is not Alias
                and kind is not MapStart
                and kind is not SeqStart
            ):
                if kind is yaml.DocumentStartEvent:
                    docs += 1
                    if docs > 1:
                        raise fail(ev.start_mark, "more than one YAML document; expected one")
                continue

            parent: _Frame | None = stack[-1] if stack else None
            is_key = parent is not None and parent.seen is not None and parent.key_next
            if is_key and kind is not Scalar:
                what = (
                    "an alias" if kind is Alias else "a mapping" if kind is MapStart else "a list"
                )
                raise fail(ev.start_mark, f"a key must be plain text, not {what}")

            if kind is Alias:
                if ev.anchor not in anchors:
                    raise fail(
                        ev.start_mark,
                        f"alias *{ev.anchor} is not defined before its use (or refers to itself)",
                    )
                size, value = anchors[ev.anchor]
            else:
                size, value = 1, None  # the scalar or collection's value is made below
                if ev.tag not in _ALLOWED_TAGS:
                    raise fail(ev.start_mark, f"tag {_tag(ev.tag)} is not allowed here")
            total += size
            if total > YAML_NODES_MAX:
                raise fail(
                    ev.start_mark,
                    f"more than {YAML_NODES_MAX} YAML nodes, aliases counted in full: too large",
                )

            if kind is Scalar:
                value, tag = _scalar(ev, is_key, fail, build)
                if ev.anchor is not None:
                    anchors[ev.anchor] = (1, value)
                if is_key:
                    assert parent is not None and parent.seen is not None  # is_key says so
                    raw = ev.value
                    if raw in parent.seen:
                        raise fail(ev.start_mark, f"duplicate key {raw[:80]!r}")
                    parent.seen.add(raw)
                    parent.key = _MERGE_KEY if tag == _MERGE else value
                    parent.raw_key = raw
                    parent.key_next = False
                    parent.size += 1
                    if on_node is not None and on_node((*parent.path, raw), ev.start_mark.line + 1):
                        return None
                    continue

            # a value: where it sits
            path: tuple = ()
            if on_node is not None:
                if parent is None:
                    path = ()
                    stop = on_node(path, ev.start_mark.line + 1)
                elif parent.seen is not None:
                    path = (*parent.path, parent.raw_key)
                    stop = False
                else:
                    path = (*parent.path, len(parent.value))
                    stop = on_node(path, ev.start_mark.line + 1)
                if stop:
                    return None

            if kind is MapStart or kind is SeqStart:
                if len(stack) >= YAML_DEPTH_MAX:
                    raise fail(ev.start_mark, f"nesting depth over {YAML_DEPTH_MAX}: too deep")
                stack.append(
                    _Frame({} if kind is MapStart else [], ev.anchor, path, ev.start_mark.line + 1)
                )
                continue
            if parent is None:
                root = value
                continue
            parent.size += size
            _attach(parent, value, ev, fail)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        if isinstance(e, yaml.reader.ReaderError):  # a character YAML does not allow
            where = f"{source}:{text.count(chr(10), 0, e.position) + 1}"
            raise error(
                [
                    Problem(
                        where,
                        f"not valid YAML: character {e.character!r} at offset "
                        f"{e.position}: {e.reason}",
                    )
                ]
            ) from None
        what = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise fail(mark, f"not valid YAML: {what}") from None
    finally:
        parser.dispose()
    return root


def _attach(parent: _Frame, value: Any, ev, fail) -> None:
    if parent.seen is None:
        parent.value.append(value)  # type: ignore[union-attr]
        return
    if parent.key is _MERGE_KEY:
        items = value if isinstance(value, list) else [value]
        if not all(isinstance(m, dict) for m in items):
            raise fail(ev.start_mark, "a merge key (<<) takes a mapping or a list of mappings")
        parent.merges.extend(items)
    else:
        parent.value[parent.key] = value
    parent.key_next = True


_IMPLICIT_FIRST = frozenset(
    _Resolver.yaml_implicit_resolvers
)  # first characters of typed plain scalars


def _scalar(ev, is_key: bool, fail, build: bool) -> tuple[Any, str | None]:
    value = ev.value
    if is_key and len(value) > YAML_KEY_CHARS_MAX:
        raise fail(ev.start_mark, f"a key of {len(value)} characters: too long")
    tag = ev.tag
    if tag is None:
        if not ev.implicit[0] or (value and value[0] not in _IMPLICIT_FIRST):
            return value, _STR  # quoted, or plain text no implicit type starts with
        if (
            build
            and value.isdigit()
            and value.isascii()
            and (value[0] != "0" or value == "0")
            and len(value) <= INT_DIGITS_MAX
        ):
            return int(value), _INT  # a plain decimal (a leading 0 would be octal in YAML 1.1)
        tag = _RESOLVE(yaml.ScalarNode, value, ev.implicit)
    elif tag == "!":
        tag = _STR
    if tag == _INT and len(value) > INT_DIGITS_MAX:
        # int() of thousands of digits is refused by Python (and slow before that)
        raise fail(
            ev.start_mark,
            f"a number of {len(value)} digits: at most {INT_DIGITS_MAX} are read (64 bits need 20)",
        )
    if not build or tag == _STR:
        return value, tag
    if tag == _MERGE:
        return value, tag
    try:
        return _CONSTRUCT[tag](_CTOR, yaml.ScalarNode(tag, value)), tag
    except (ValueError, KeyError, IndexError, TypeError, OverflowError, yaml.YAMLError):
        raise fail(ev.start_mark, f"{value[:40]!r} is not a valid {_tag(tag)}") from None


def load(text: str, source: str, error: type[FabriclabError] = SpecError) -> Any:
    """The data of a YAML text, checked as above; problems are ``error``s with the line."""
    return _walk(text, source, error)


def lines_for(text: str, paths: set[tuple]) -> dict[tuple, int]:
    """The line of each of ``paths`` (and of their prefixes) that the text has."""
    wanted = {p[:i] for p in paths for i in range(len(p) + 1)}
    found: dict[tuple, int] = {}

    def note(path: tuple, line: int) -> bool:
        if path in wanted and path not in found:
            found[path] = line
            return len(found) == len(wanted)
        return False

    try:
        _walk(text, "", SpecError, build=False, on_node=note)
    except FabriclabError:
        pass
    return found
