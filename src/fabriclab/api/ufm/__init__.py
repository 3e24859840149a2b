"""A UFM-compatible REST API: the subset of NVIDIA UFM Enterprise's REST API that public
UFM clients use (resources, events, alarms, port isolation, actions and jobs), on a
running fabriclab fabric, under ``/ufmRest`` and ``/ufmRestV2`` (HTTP Basic or a token)
and ``/ufmRestV3`` (an access token); docs/ufm.md says every route and where fabriclab departs from UFM."""

from __future__ import annotations

from fastapi import FastAPI

from ..auth import Auth
from ..source import Source
from .routes import Ufm, router

# /ufmRestV2 (UFM: a client certificate or a /dologin session) takes what /ufmRest takes
# here, HTTP Basic or a token: ufmctl sends its token there as Basic
PREFIXES = ("/ufmRest", "/ufmRestV2", "/ufmRestV3")


def install(app: FastAPI, source: Source, auth: Auth) -> None:
    """Add the UFM routes under each of PREFIXES (``auth`` is checked by
    the app's middleware; the routes read the user it found)."""
    routes = router(Ufm(source))
    for prefix in PREFIXES:
        app.include_router(routes, prefix=prefix)
