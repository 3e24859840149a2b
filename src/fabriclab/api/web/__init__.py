"""The live web view (to be written)."""

from __future__ import annotations

from fastapi import FastAPI

from ..source import Source


def install(app: FastAPI, source: Source) -> None:
    """Add the page at ``/`` and what it reads."""
