"""A cable of an explicit fabric as the spec writes it, ``NODE[PORT] -- NODE[PORT]
[4xNDR]``: parsed and rendered (``LinkSpec``), and one end alone (``parse_endpoint``),
matched in time linear in any input."""

from __future__ import annotations

import re

from ...limits import HOST_NAME_MAX, NAME_MAX
from .fields import Strict, check_rate, check_width

# Names and port numbers bounded, and the text stripped and bounded before matching, so
# that matching stays linear on any input.
_ENDPOINT = (
    r"(?P<{0}>[^\[\]]{{1," + str(HOST_NAME_MAX + NAME_MAX + 1) + r"}})\[(?P<{0}p>\d{{1,3}})\]"
)
_LINK_RE = re.compile(
    _ENDPOINT.format("a")
    + r"\s*--\s*"
    + _ENDPOINT.format("b")
    + r"(?:\s+(?P<w>\d{1,2}x|\?\?)(?P<s>[A-Za-z0-9]{1,8}|\?\?\?))?$"
)
_LINK_CHARS_MAX = 2 * (HOST_NAME_MAX + NAME_MAX + 8) + 32
_ENDPOINT_RE = re.compile(_ENDPOINT.format("a") + "$")


def parse_endpoint(text: str) -> tuple[str, int] | None:
    """One end of a link, ``NODE[PORT]`` as the links of a spec write it: (node, port),
    or None when ``text`` is not in that form."""
    text = text.strip()
    if len(text) > _LINK_CHARS_MAX:
        return None
    m = _ENDPOINT_RE.match(text)
    return (m.group("a").strip(), int(m.group("ap"))) if m else None


class LinkSpec(Strict):
    """A cable of an explicit fabric: ``NODE[PORT] -- NODE[PORT] [4xNDR]``."""

    a: str
    a_port: int
    b: str
    b_port: int
    width: str | None = None
    speed: str | None = None

    @classmethod
    def parse(cls, text: str) -> LinkSpec:
        """A link from its text; ValueError saying what is wrong."""
        text = text.strip()
        if len(text) > _LINK_CHARS_MAX:
            raise ValueError(
                f"a link of {len(text)} characters: expected 'NODE[PORT] -- NODE[PORT] [4xNDR]'"
            )
        m = _LINK_RE.match(text)
        if not m:
            raise ValueError(f"bad link {text!r}: expected 'NODE[PORT] -- NODE[PORT] [4xNDR]'")
        w = m.group("w") and (m.group("w") if m.group("w") == "??" else check_width(m.group("w")))
        s = m.group("s") and (m.group("s") if m.group("s") == "???" else check_rate(m.group("s")))
        return cls(
            a=m.group("a").strip(),
            a_port=int(m.group("ap")),
            b=m.group("b").strip(),
            b_port=int(m.group("bp")),
            width=w,
            speed=s,
        )

    def render(self) -> str:
        """The link as text ``parse`` reads back."""
        rate = f" {self.width}{self.speed}" if self.width and self.speed else ""
        return f"{self.a}[{self.a_port}] -- {self.b}[{self.b_port}]{rate}"


def parse_links(v):
    """A spec's ``links``: each given as text parsed into a LinkSpec."""
    if not isinstance(v, list):
        raise ValueError("links must be a list")
    out = []
    for _i, item in enumerate(v):
        if isinstance(item, str):
            out.append(LinkSpec.parse(item))
        else:
            out.append(item)
    return out
