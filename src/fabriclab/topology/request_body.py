"""A request body within bounds: its size (from Content-Length before reading, then
counted while it streams in), then its JSON's nesting depth and number lengths (by a
linear scan before the json module parses it).

Python's json module recurses once per nesting level (RecursionError past ~1,000) and
converts integers through str -> int (ValueError past sys.get_int_max_str_digits(),
4,300 digits, and quadratic time before that), and it has no option to bound either;
neither has pydantic's JSON parser for big numbers.  Hence the scan here, done with
regular expressions that run in linear time, before any parsing.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from itertools import accumulate
from typing import Any

from .errors import RequestError

MAX_BODY_BYTES = 4 * 1024 * 1024  # ~50,000 instance -> node entries
MAX_DEPTH = 32  # a valid request nests 6 deep (engine.params.topologies.NAME.blockName)
MAX_NUMBER_DIGITS = 100

# A JSON string from its opening quote to its closing one, or to the end of the text if
# it is never closed.  Possessive quantifiers (Python 3.11) keep each match linear, and
# as a match always succeeds at a quote, the scan never restarts inside a string.
_STRING = re.compile(r'"[^"\\]*+(?:\\.?[^"\\]*+)*+"?', re.S)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_LONG_NUMBER = re.compile(rf"[0-9]{{{MAX_NUMBER_DIGITS + 1}}}")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


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
    bare = _STRING.sub('""', text)
    if _LONG_NUMBER.search(bare):
        raise RequestError(f"a number in the request has more than {MAX_NUMBER_DIGITS} digits", 422)
    brackets = _NOT_BRACKET.sub("", bare)
    if max(accumulate(map(_STEP.__getitem__, brackets)), default=0) > max_depth:
        raise RequestError(f"the request nests deeper than {max_depth} levels", 422)


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
