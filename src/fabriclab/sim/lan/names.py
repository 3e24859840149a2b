"""The names of a fabric's network namespaces: ``fl.FABRIC.NODE``, one for every
endpoint and switch of its other networks."""

from __future__ import annotations

from pyroute2 import netns


def prefix(fabric: str) -> str:
    """What every namespace of fabric ``fabric`` is named with."""
    return f"fl.{fabric}."


def namespace(fabric: str, node: str) -> str:
    """The namespace of endpoint or switch ``node`` of ``fabric``."""
    return prefix(fabric) + node


def existing(fabric: str) -> list[str]:
    """The fabric's namespaces that exist now."""
    p = prefix(fabric)
    return sorted(n for n in netns.listnetns() if n.startswith(p))
