"""``/metrics``: the whole fabric in Prometheus's text format (to be written)."""

from __future__ import annotations

from fastapi import FastAPI

from .source import Source


def install(app: FastAPI, source: Source) -> None:
    """Add ``/metrics`` to ``app``."""
