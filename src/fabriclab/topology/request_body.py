"""A request body within bounds: its size (from Content-Length before reading, then
counted while it streams in), then its JSON's nesting depth and number lengths (by a
linear scan before the json module parses it).

Python's json module recurses once per nesting level and converts integers through
str -> int, with no option to bound either; neither has pydantic's JSON parser for big
numbers.  Hence the linear scan of :func:`fabriclab.inputs.json_bounds` before any
parsing.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from ..inputs import json_bounds
from .errors import RequestError

MAX_BODY_BYTES = 4 * 1024 * 1024  # ~50,000 instance -> node entries
MAX_DEPTH = 32  # a valid request nests 6 deep (engine.params.topologies.NAME.blockName)
MAX_NUMBER_DIGITS = 100


async def read(
    chunks: AsyncIterator[bytes], content_length: str | None, limit: int = MAX_BODY_BYTES
) -> bytes:
    """The body, refused with 413 as soon as it is known to be over ``limit``: from its
    Content-Length before reading any of it, else while counting what streams in."""
    if content_length is not None:
        declared = content_length.strip()
        if not declared.isdigit():
            raise RequestError(f"Content-Length is not a number: {declared[:20]!r}")
        if len(declared) > len(str(limit)) or int(declared) > limit:
            raise RequestError(
                f"request body of {declared[:20]} bytes is over the limit of {limit} bytes", 413
            )
    parts, size = [], 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise RequestError(f"request body is over the limit of {limit} bytes", 413)
        parts.append(chunk)
    return b"".join(parts)


def check(text: str, max_depth: int = MAX_DEPTH) -> None:
    """Refuse (422) JSON nested deeper than ``max_depth`` or with a number longer than
    MAX_NUMBER_DIGITS digits, without parsing it; strings are skipped."""
    problem = json_bounds(text, max_depth, MAX_NUMBER_DIGITS)
    if problem is not None:
        raise RequestError(f"the request {problem}", 422)


def _no_constants(name: str) -> Any:
    raise RequestError(f"invalid JSON: {name} is not a JSON number")


def parse(body: bytes, max_depth: int = MAX_DEPTH) -> Any:
    """The JSON value of a UTF-8 body (RFC 8259 §8.1), within the bounds of ``check``."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RequestError(f"invalid JSON: not UTF-8 (byte {e.start})") from None
    check(text, max_depth)
    try:
        return json.loads(text, parse_constant=_no_constants)
    except json.JSONDecodeError as e:
        raise RequestError(f"invalid JSON: {e}") from None
