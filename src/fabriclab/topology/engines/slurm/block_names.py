"""Block names for topology/block: topograph's ``blockName`` option (a node-name regexp
and a Go template) and the check that no two blocks end up with one name."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import re2

from .errors import SlurmTopologyError

if TYPE_CHECKING:
    from .blocks import Block

# topograph compiles nodeNameRegexp with Go's regexp, whose syntax is RE2's, and so does
# this: the same patterns are valid, and matching takes linear time (Python's re can take
# exponential time, e.g. '^(a|aa)+$' on 50 a's and a '!').  No stderr log of bad patterns.
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False

_GO_TEMPLATE = re.compile(r"\$(\$|\{([A-Za-z0-9_]+)\}|([A-Za-z0-9_]+))")


@dataclass
class BlockName:
    """Rename blocks from their nodes' names: ``node_name_regexp`` with ``format``
    (``${1}``, ``$name``), as topograph's ``blockName``."""

    node_name_regexp: str
    format: str

    def __post_init__(self):
        if not self.node_name_regexp:
            raise SlurmTopologyError("blockName.nodeNameRegexp must not be empty")
        if not self.format:
            raise SlurmTopologyError("blockName.format must not be empty")
        try:
            self.re = re2.compile(self.node_name_regexp, options=_RE2_OPTIONS)
        except re2.error as e:
            what = (
                e.args[0].decode(errors="replace")
                if e.args and isinstance(e.args[0], bytes)
                else str(e)
            )
            raise SlurmTopologyError(
                f"invalid blockName.nodeNameRegexp {self.node_name_regexp!r}: {what}"
            ) from None

    def name(self, default: str, domain: str, nodes: list[str]) -> str:
        """The name every node of the block gives (``default`` for a block of no node);
        SlurmTopologyError if a node does not match or two nodes disagree."""
        if not nodes:
            return default
        desc = f'block "{default}"' + (f' (domain "{domain}")' if domain else "")
        out = ""
        for node in nodes:
            match = self.re.search(node)
            if match is None:
                raise SlurmTopologyError(
                    f'node "{node}" in {desc} does not match nodeNameRegexp '
                    f'"{self.node_name_regexp}"'
                )
            got = _go_expand(self.format, match)
            if not got:
                raise SlurmTopologyError(
                    f'blockName format "{self.format}" produces an empty name '
                    f'for node "{node}" in {desc}'
                )
            if not out:
                out = got
            elif got != out:
                raise SlurmTopologyError(
                    f'nodes in {desc} produce different block names "{out}" and "{got}"'
                )
        return out


def _go_expand(template: str, match) -> str:
    """Go's ``regexp.Expand``: ``$1``/``${1}``/``$name``, ``$$`` for a dollar; an unknown
    group expands to nothing.  As Go's ``extract`` (regexp.go), a name is a group number
    only with at most 9 digits and no leading zero; else it is looked up as a name."""

    def substitute(reference: re.Match) -> str:
        if reference.group(1) == "$":
            return "$"
        name = reference.group(2) or reference.group(3)
        number = name.isdigit() and len(name) <= 9 and (name == "0" or name[0] != "0")
        try:
            value = match.group(int(name)) if number else match.group(name)
        except IndexError:  # no such group
            return ""
        return value or ""

    return _GO_TEMPLATE.sub(substitute, template)


def block_names(blocks: list[Block], block_name: BlockName | None) -> list[str]:
    """Each block's name: its id, or what ``block_name`` makes of its nodes; two blocks
    with one name are a SlurmTopologyError."""
    names: list[str] = []
    named_by: dict = {}
    for block in blocks:
        name = block_name.name(block.id, block.name, block.nodes) if block_name else block.id
        if name in named_by:
            raise SlurmTopologyError(
                f'blocks "{named_by[name]}" and "{block.id}" produce duplicate block name "{name}"'
            )
        named_by[name] = block.id
        names.append(name)
    return names
