"""A UFM-compatible REST API (to be written)."""

from __future__ import annotations

from fastapi import FastAPI

from ..auth import Auth
from ..source import Source


def install(app: FastAPI, source: Source, auth: Auth) -> None:
    """Add the UFM routes under ``/ufmRest`` and ``/ufmRestV3``."""
