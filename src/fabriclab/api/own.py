"""fabriclab's own API, ``/api/v1`` (to be written)."""

from __future__ import annotations

from fastapi import FastAPI

from .source import Source


def install(app: FastAPI, source: Source) -> None:
    """Add ``/api/v1`` to ``app``."""
