"""What the fabric server counts (MADs and their outcomes, control requests, MADs by
management class and method), for its closing line, the admin op ``stats`` and the
API's metrics."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class Stats:
    """What the server counts, for its closing line and the tests."""

    mads: int = 0
    answered: int = 0
    forwarded: int = 0
    timed_out: int = 0  # answered with the simulator's timeout status (routed nowhere)
    dropped: int = 0  # undeliverable: a response with nobody to take it, not answered
    malformed: int = 0
    traps: int = 0
    refused: int = 0  # control requests refused (who sent them, or a limit)
    outsiders: int = 0  # remote mode: datagrams from outside the allowed networks
    failed: int = 0  # control requests whose handling failed (answered with an error)
    unsent: int = 0  # datagrams to clients that could not be sent (not reading, gone)
    # MADs received by management class and method (the method's R bit included), keyed
    # class << 8 | method: every MAD whose header was read (not the wrong-sized ones)
    classes: dict[int, int] = field(default_factory=dict)

    def to_json(self) -> dict:
        """The counts as the admin op ``stats`` answers them (docs/protocol.md)."""
        out = asdict(self)
        out["classes"] = [
            {"class": f"0x{k >> 8:02x}", "method": f"0x{k & 0xFF:02x}", "mads": n}
            for k, n in sorted(self.classes.items(), key=lambda kv: (-kv[1], kv[0]))
        ]
        return out
