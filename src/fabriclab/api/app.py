"""The API's one FastAPI app: authentication in front of everything, the error
translation, and each part's routes (``/metrics``, the UFM-compatible ``/ufmRest``...,
fabriclab's ``/api/v1`` and the web view at ``/``)."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse

from .. import __version__
from . import errors, metrics, own, ufm, web
from .auth import Auth
from .bodylimit import BodyLimit
from .errors import ApiError
from .source import Source


def make_app(source: Source, auth: Auth | None = None) -> FastAPI:
    """The app serving fabric ``source`` (``auth``: who may use it; none: everybody)."""
    auth = auth or Auth()
    app = FastAPI(
        title="fabriclab API",
        version=__version__,
        description=(
            "A running fabriclab fabric seen from above: Prometheus metrics with "
            "infiniband_exporter's names, a UFM-compatible REST API, fabriclab's own API "
            "and a live web view."
        ),
    )
    app.state.source = source
    app.state.auth = auth
    errors.install(app)
    app.add_middleware(BodyLimit)

    @app.middleware("http")
    async def authenticate(request: Request, call_next):
        try:
            request.state.user = auth.user_of(
                request.url.path, request.headers.get("authorization")
            )
        except ApiError as e:
            return errors.answer(e.status, e.message, e.headers)
        return await call_next(request)

    @app.get("/healthz", response_class=PlainTextResponse, tags=["fabriclab"])
    def healthz() -> str:
        """``OK`` while the API runs (no credentials needed)."""
        return "OK"

    metrics.install(app, source)
    ufm.install(app, source, auth)
    own.install(app, source)
    web.install(app, source)
    return app
