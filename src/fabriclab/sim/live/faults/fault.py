"""A fault as asked (kind, target, options) and how far it has got: the record the
book of faults keeps, the journal saves and ``fault list`` shows."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Fault:
    """A fault as asked (kind, target text, options) and how far it has got."""

    id: int
    kind: str
    target: str
    options: dict
    since: float  # clock seconds when it was injected
    progress: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        """The fault as the API, the journal and ``fault list`` show it."""
        return {
            "id": self.id,
            "kind": self.kind,
            "target": self.target,
            "options": self.options,
            "since": self.since,
            "progress": self.progress,
        }
