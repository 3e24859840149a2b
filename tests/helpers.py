"""Small helpers several test files share."""

from __future__ import annotations

import socket


def no_timestamp(text: str) -> list[str]:
    """ibnetdiscover's lines without its '# Topology file:' header (it holds the time)."""
    return [line for line in text.splitlines() if not line.startswith("# Topology file:")]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now (the kernel picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
