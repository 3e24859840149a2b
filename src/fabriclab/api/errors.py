"""The API's errors: every failure is an HTTP status and a JSON body ``{"error": "<one
line>"}``, never a traceback; fabriclab's own errors and FastAPI's validation errors
are translated here, in one place."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match, Route

from ..errors import FabriclabError, InputError
from ..topology.server import one_line
from .source import FabricUnavailable

log = logging.getLogger("fabriclab.api")


class ApiError(Exception):
    """An answer other than success: ``status`` and a one-line message (``headers``:
    e.g. ``WWW-Authenticate`` on a 401)."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers


def answer(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """The JSON error answer."""
    return JSONResponse({"error": one_line(message)}, status_code=status, headers=headers)


def allowed(req: Request) -> list[str]:
    """The methods some route of the app takes at the request's path."""
    methods: set[str] = set()
    for route in req.app.routes:
        if isinstance(route, Route) and route.matches(req.scope)[0] != Match.NONE:
            methods |= route.methods or set()
    return sorted(methods)


def install(app: FastAPI) -> None:
    """Translate every error the app's routes can raise into :func:`answer`."""

    @app.exception_handler(ApiError)
    async def _api(_req: Request, e: ApiError):
        return answer(e.status, e.message, e.headers)

    @app.exception_handler(FabricUnavailable)
    async def _gone(_req: Request, e: FabricUnavailable):
        return answer(503, str(e))

    @app.exception_handler(InputError)
    async def _input(_req: Request, e: InputError):
        # an error answer of the fabric's admin socket: what the request asked is wrong
        return answer(400, str(e))

    @app.exception_handler(FabriclabError)
    async def _fabriclab(_req: Request, e: FabriclabError):
        return answer(400, str(e))

    @app.exception_handler(RequestValidationError)
    async def _invalid(_req: Request, e: RequestValidationError):
        errs = e.errors()
        first: dict[str, Any] = dict(errs[0]) if errs else {"loc": (), "msg": "invalid request"}
        if first.get("type") == "json_invalid":
            why = (first.get("ctx") or {}).get("error", "")
            return answer(400, f"request body: not valid JSON{f' ({why})' if why else ''}")
        loc = [str(p) for p in first.get("loc", ())]
        where = ".".join(loc[1:] if loc[:1] == ["body"] else loc) or "request body"
        return answer(422, f"{where}: {first.get('msg', 'invalid')}")

    @app.exception_handler(StarletteHTTPException)
    async def _http(req: Request, e: StarletteHTTPException):
        headers = getattr(e, "headers", None)
        if e.status_code == 405:  # every method the path takes (Starlette names one route's)
            headers = {"Allow": ", ".join(allowed(req))}
        return answer(e.status_code, str(e.detail), headers)

    @app.exception_handler(Exception)
    async def _bug(_req: Request, e: Exception):
        log.exception("unexpected error")
        return answer(500, f"fabriclab api: unexpected {type(e).__name__} (see the log)")
