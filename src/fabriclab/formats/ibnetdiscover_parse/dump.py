"""A parsed ibnetdiscover dump (``Dump``) and the way in: ``parse`` tells the format
(default or ``-p``), has it read, and makes the fabric; ``read_file`` and ``parse_file``
do the same from a file, size-checked first."""

from __future__ import annotations

from dataclasses import dataclass, field

from ... import inputs
from ...errors import InputError, Problem
from ...limits import DUMP_BYTES_MAX
from ...model.fabric import Fabric, Port
from .default_format import DefaultFormatParser
from .ports_format import PortsFormatParser, looks_like_ports
from .to_fabric import to_fabric


@dataclass
class Dump:
    """A parsed ibnetdiscover file."""

    fabric: Fabric
    source: str
    kind: str  # "topology" or "ports"
    from_guid: int | None = None
    from_port_guid: int | None = None
    generated: str | None = None
    warnings: list[Problem] = field(default_factory=list)
    warnings_dropped: int = 0  # warnings beyond the kept ones, counted only

    @property
    def from_port(self) -> Port | None:
        """The port the dump was taken from, when the header names it."""
        if self.from_port_guid is None:
            return None
        node = self.fabric.by_guid.get(self.from_guid or -1)
        if node is None:
            return None
        for p in node.iter_ports():
            if p.guid == self.from_port_guid and p.peer is not None:
                return p
        return next((p for p in node.iter_ports() if p.peer is not None), None)


def parse(text: str, source: str = "<input>") -> Dump:
    """Parse ibnetdiscover output (default or ``-p``, detected) into a fabric."""
    lines = text.splitlines()
    truncated = None
    if lines and not text.endswith(("\n", "\r")) and lines[-1].strip():
        truncated = (
            f"the last line ends without a newline: the file looks truncated; "
            f"line skipped ({lines[-1].strip()[:40]!r})"
        )
        lines[-1] = ""
    kind = "ports" if looks_like_ports(lines) else "topology"
    p: PortsFormatParser | DefaultFormatParser = (
        PortsFormatParser(source) if kind == "ports" else DefaultFormatParser(source)
    )
    if truncated is not None:
        p.warn(len(lines), truncated)
    p.read(lines)
    if not p.recs:
        raise InputError(
            [Problem(source, "no nodes found: not ibnetdiscover output")],
            warnings=p.log.items,
            warnings_dropped=p.log.dropped,
        )
    fab = to_fabric(p)
    return Dump(
        fab, source, kind, p.from_guid, p.from_port_guid, p.generated, p.log.items, p.log.dropped
    )


def read_file(path: str) -> str:
    """A dump's text: size-checked before reading; a binary file is refused at once
    (ibnetdiscover prints text; any undecodable byte becomes U+FFFD)."""
    return inputs.read_text(
        path, DUMP_BYTES_MAX, "ibnetdiscover output", strict=False, prefix="no nodes found: "
    )


def parse_file(path: str) -> Dump:
    """``parse`` of a file read by ``read_file``."""
    return parse(read_file(path), path)
