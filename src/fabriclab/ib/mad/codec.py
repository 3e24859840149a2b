"""One generic codec for MAD layouts described as data.

A layout is a list of fields ``(name, bit offset, bit width)`` in the InfiniBand
specification's convention: bit 0 is the most significant bit of byte 0, and every
field is big-endian.  (libibmad keeps the same facts in ``fields.c`` with its own
32-bit-word bit numbering; the offsets here are the specification's, the names are
libibmad's, so that tools' dumps and these tables use the same words.)

The whole attribute is treated as one big integer: a field is a shift and a mask.  That
keeps encode and decode one short routine each, and Python's integers make a 512-bit
attribute as cheap to slice as a machine word.
"""

from __future__ import annotations

import keyword
from collections.abc import Iterable, Mapping


class Layout:
    """A fixed-size structure of big-endian bit fields."""

    __slots__ = ("_bits", "_spec", "fields", "name", "size")

    def __init__(self, name: str, size: int, fields: Iterable[tuple[str, int, int]]):
        self.name = name
        self.size = size  # bytes
        self._bits = size * 8
        self._spec: dict[str, tuple[int, int]] = {}  # name -> (shift, mask)
        self.fields: list[tuple[str, int, int]] = []
        taken = [False] * self._bits
        for fname, off, width in fields:
            if fname in self._spec:
                raise ValueError(f"{name}: field {fname} twice")
            if off < 0 or width <= 0 or off + width > self._bits:
                raise ValueError(f"{name}.{fname}: bits {off}+{width} outside {self._bits}")
            for b in range(off, off + width):
                if taken[b]:
                    raise ValueError(f"{name}.{fname}: bit {b} overlaps another field")
                taken[b] = True
            self._spec[fname] = (self._bits - off - width, (1 << width) - 1)
            self.fields.append((fname, off, width))

    def __contains__(self, name: str) -> bool:
        return name in self._spec

    def unpack(self, data: bytes) -> dict[str, int]:
        """Every field of ``data`` (at least ``size`` bytes; extra bytes are ignored)."""
        v = int.from_bytes(data[: self.size], "big")
        return {n: (v >> s) & m for n, (s, m) in self._spec.items()}

    def getter(self, *names: str, offset: int = 0):
        """A function returning the named fields of the layout found at ``offset`` of
        ``data`` as a tuple: one integer conversion for all of them (the server's per-MAD
        header read)."""
        # Generated straight-line code (as collections.namedtuple does): a loop or a
        # generator here costs more than the rest of a MAD's handling.
        parts = ", ".join(f"(v >> {s}) & {m}" for s, m in (self._spec[n] for n in names))
        src = (
            f"def get(data):\n"
            f"    v = from_bytes(data[{offset}:{offset + self.size}], 'big')\n"
            f"    return ({parts},)\n"
        )
        scope: dict = {"from_bytes": int.from_bytes}
        exec(src, scope)
        return scope["get"]

    def packer(self, *names: str):
        """A function packing the fields ``names`` (all others zero), given by name as
        keyword arguments: the fabric's encoding of a whole attribute from its state
        without building a dict.

        Unlike ``pack`` it does not check ranges: it is for values already held in
        fields of the same width (the fabric's own state), where a check per field would
        cost more than the encoding."""
        for n in names:
            if n not in self._spec:
                raise KeyError(f"{self.name} has no field {n}")
            if not n.isidentifier() or keyword.iskeyword(n):
                raise ValueError(f"{self.name}.{n} cannot be a keyword argument")
        args = ", ".join(names)
        expr = " | ".join(f"({n} << {self._spec[n][0]})" for n in names) or "0"
        params = f"*, {args}" if names else ""
        src = f"def pack({params}):\n    return ({expr}).to_bytes({self.size}, 'big')\n"
        scope: dict = {}
        exec(src, scope)
        return scope["pack"]

    def width(self, name: str) -> int:
        """The width of field ``name``, in bits."""
        return self._spec[name][1].bit_length()

    def splice(self, data: bytes, name: str, value: int) -> bytes:
        """``data`` with one field replaced; a byte-aligned field is spliced in place of
        its bytes (the common case: LocalPortNum in every PortInfo answer)."""
        s, m = self._spec[name]
        width = m.bit_length()
        if s % 8 == 0 and width % 8 == 0:
            end = self.size - s // 8
            start = end - width // 8
            return data[:start] + value.to_bytes(width // 8, "big") + data[end:]
        return self.pack({name: value}, base=data) + data[self.size :]

    def get(self, data: bytes, name: str) -> int:
        """Field ``name`` of ``data``."""
        s, m = self._spec[name]
        return (int.from_bytes(data[: self.size], "big") >> s) & m

    def pack(self, values: Mapping[str, int], base: bytes | None = None) -> bytes:
        """``size`` bytes with ``values`` written over ``base`` (zeros by default).

        A value that does not fit its field is a programming error (ValueError): the
        wire never silently truncates what the model says.
        """
        v = int.from_bytes(base[: self.size], "big") if base else 0
        spec = self._spec
        for n, x in values.items():
            try:
                s, m = spec[n]
            except KeyError:
                raise KeyError(f"{self.name} has no field {n}") from None
            if x < 0 or x > m:
                raise ValueError(f"{self.name}.{n} = {x} does not fit {m.bit_length()} bits")
            v = (v & ~(m << s)) | (x << s)
        return v.to_bytes(self.size, "big")

    def __repr__(self) -> str:
        return f"<Layout {self.name} {self.size} bytes, {len(self.fields)} fields>"
