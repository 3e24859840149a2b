"""Deterministic GUIDs: the same spec gives the same GUIDs on every run and machine."""

from __future__ import annotations

import hashlib

from ..errors import Problem, SpecError


class GuidAllocator:
    """Hands out unique 64-bit GUIDs.

    ``hash`` scheme: ``prefix << 32 | first 32 bits of SHA-1(name)``, the seed lab's
    scheme (``e09d7303`` + sha1("sched-worker1 mlx5_0")[:8] = ``e09d7303b4f1abf5``).
    With 32 hash bits, a 32,768-HCA fabric has about a 12 % chance of one collision, so
    a name whose GUID (or one of the GUIDs it reserves) is taken is hashed again as
    ``"<name>#1"``, ``"<name>#2"``, … ; the result still depends only on the spec.
    """

    def __init__(self, scheme: str):
        self.scheme = scheme
        self.used: dict[int, str] = {}
        self._next: dict[int, int] = {}

    def reserve(self, guid: int, owner: str, where: str = "") -> None:
        """Take a GUID the spec gives for ``owner``; SpecError at ``where`` when taken."""
        if guid in self.used:
            raise SpecError(
                [
                    Problem(
                        where or owner, f"GUID 0x{guid:016x} is already used by {self.used[guid]}"
                    )
                ]
            )
        self.used[guid] = owner

    def allocate(self, prefix: int, name: str, span: int = 1, offsets: tuple[int, ...] = ()) -> int:
        """A GUID for ``name`` such that guid+0 … guid+span-1 and guid+each offset are free."""
        salt = 0
        while True:
            guid = self._candidate(prefix, name, salt)
            wanted = [guid + i for i in range(span)] + [guid + o for o in offsets]
            if all(g not in self.used and g <= 0xFFFF_FFFF_FFFF_FFFF for g in wanted):
                for g in wanted:
                    self.used[g] = name
                return guid
            salt += 1

    def _candidate(self, prefix: int, name: str, salt: int) -> int:
        if self.scheme == "sequential":
            n = self._next.get(prefix, 1)
            self._next[prefix] = n + 1
            return (prefix << 32) | (n << 4)  # room for port GUIDs and the AN (+8)
        text = name if salt == 0 else f"{name}#{salt}"
        digest = hashlib.sha1(text.encode()).hexdigest()[:8]
        return (prefix << 32) | int(digest, 16)


def hash_guid(prefix: int, name: str) -> int:
    """The unsalted hash-scheme GUID of a name (for documentation and tests)."""
    return (prefix << 32) | int(hashlib.sha1(name.encode()).hexdigest()[:8], 16)
