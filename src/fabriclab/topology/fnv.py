"""FNV-1a, 64 bits, as Go's hash/fnv ``New64a``: topograph hashes long label values and
requests with it, and fabriclab must give the same values.

Written here (four lines) rather than taken from a package: the FNV packages for Python
are small one-person projects, and the algorithm is fixed by its two constants.
"""

from __future__ import annotations

# The 64-bit FNV offset basis and prime (draft-eastlake-fnv, section 5; Go's hash/fnv
# offset64 and prime64).
_OFFSET_BASIS = 0xCBF29CE484222325
_PRIME = 0x100000001B3
_MASK = 0xFFFFFFFFFFFFFFFF


def fnv1a64(data: bytes) -> int:
    """The FNV-1a 64-bit hash of ``data``."""
    value = _OFFSET_BASIS
    for byte in data:
        value = ((value ^ byte) * _PRIME) & _MASK
    return value
