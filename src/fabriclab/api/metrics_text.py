"""The Prometheus text format (0.0.4) written fast, for ``/metrics``'s big families: a
family's samples joined at C level from label strings made once (``{a="x",b="y"} ``) and
values from a NumPy column, in pieces, and gzipped on a second thread; the conventions
are ``prometheus_client``'s (``# HELP``/``# TYPE``, label values escaped, floats as Go
prints them)."""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from operator import add

import numpy as np
from prometheus_client.utils import floatToGoString

CHUNK = 32768  # samples written at once


def escape(value: str) -> str:
    """A label value as the text format wants it (backslash, quote and newline escaped)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def family(name: str, help_: str, kind: str, labels: list[str], values: Iterable) -> bytes:
    """One family's text: its ``# HELP`` and ``# TYPE`` lines and a sample per label set
    (``labels[i]``: ``{a="x",b="y"}`` and a space; ``values[i]``: its value, an int or a
    text), each line built by C-level joins."""
    return b"".join(family_chunks(name, help_, kind, labels, values))


def family_chunks(
    name: str, help_: str, kind: str, labels: list[str], values: Iterable | np.ndarray
) -> Iterator[bytes]:
    """:func:`family` in pieces of at most :data:`CHUNK` samples (so that a scrape holds
    one piece at a time); a piece of one value throughout (an error counter's zeros,
    Active ports, links of one rate) is one join.  Floats are written as Go writes them."""
    yield f"# HELP {name} {help_}\n# TYPE {name} {kind}\n".encode()
    if isinstance(values, np.ndarray):
        floats = values.dtype.kind == "f"
        for i in range(0, len(labels), CHUNK):
            part = values[i : i + CHUNK]
            lab = labels[i : i + CHUNK]
            if part.size and (part == part[0]).all():
                v = part[0].item()
                text = floatToGoString(v) if floats else str(v)
                yield (name + (text + "\n" + name).join(lab) + text + "\n").encode()
            else:
                yield _lines(name, lab, go_floats(part) if floats else part.tolist())
        return
    values = list(values)
    for i in range(0, len(labels), CHUNK):
        yield _lines(name, labels[i : i + CHUNK], values[i : i + CHUNK])


def _lines(name: str, labels: list[str], values: list) -> bytes:
    body = ("\n" + name).join(map(add, labels, map(str, values)))
    return (name + body + "\n").encode()


def go_floats(values: np.ndarray) -> list[str]:
    """Float values as Go prints them (few distinct ones: each formatted once)."""
    seen: dict[float, str] = {}
    out = []
    for v in values.tolist():
        s = seen.get(v)
        if s is None:
            s = seen[v] = floatToGoString(v)
        out.append(s)
    return out


def times4(words: np.ndarray) -> np.ndarray | list[int]:
    """Words as bytes (x 4), exact even past 2^62 words (where uint64 would wrap)."""
    if words.size and int(words.max()) >= 1 << 62:
        return [w * 4 for w in words.tolist()]
    return words * np.uint64(4)


def gzipped(chunks: Iterator[bytes], level: int = 1) -> Iterator[bytes]:
    """``chunks`` as one gzip stream, each piece compressed on a second thread while the
    next is written (zlib lets go of the GIL while it compresses)."""
    z = zlib.compressobj(level, zlib.DEFLATED, 31)
    with ThreadPoolExecutor(1, thread_name_prefix="metrics-gzip") as pool:
        pending = None
        for c in chunks:
            nxt = pool.submit(z.compress, c)
            if pending is not None and (out := pending.result()):
                yield out
            pending = nxt
        if pending is not None and (out := pending.result()):
            yield out
    yield z.flush()
