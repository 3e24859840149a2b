"""The live web view: the page at ``/`` (the front-end built from ``web/`` into
``static/``), and the JSON it reads: ``/api/v1/graph`` (the fabric drawn by tiers,
:mod:`.graph`), ``/api/v1/ports/<guid>_<port>`` (a port's state and counters) and
``/api/v1/events/stream`` (the live feed, :mod:`.stream`)."""

from __future__ import annotations

import asyncio
from importlib import resources
from typing import Any, Literal

from fastapi import FastAPI, Query, Request
from fastapi.responses import FileResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel

from ..errors import ApiError
from ..source import Source
from . import stream
from .graph import graph
from .reading import Reading

STATIC = resources.files(__package__) / "static"
NOT_BUILT = (
    "the web view's files are not built: install fabriclab with npm on the PATH "
    "(its build runs npm ci and esbuild in web/)"
)


class ErrorOut(BaseModel):
    """Every error answer: a one-line message."""

    error: str


UNAVAILABLE: dict[int | str, dict[str, Any]] = {
    503: {"model": ErrorOut, "description": "the fabric is not up"}
}
NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorOut, "description": "no such thing"}
}


class Graph(BaseModel):
    """The fabric as the page draws it (cytoscape.js elements' data, with positions)."""

    view: str
    focus: str | None
    now: float
    nodes: list[dict[str, Any]]
    edges: list[dict[str, Any]]
    counts: dict[str, int]


class PortPeer(BaseModel):
    name: str
    node: str
    port: int
    target: str


class Port(BaseModel):
    """A port's place, states, utilisation and counters now."""

    name: str
    node: str
    node_guid: str
    port: int
    target: str
    lid: int
    logical_state: str
    physical_state: str
    held: int
    width: str
    speed: str
    utilisation: float
    now: float
    counters: dict[str, int]
    peer: PortPeer | None


def install(app: FastAPI, source: Source) -> None:
    """Add the page at ``/`` and what it reads."""
    reading = Reading(source)
    app.state.web = reading

    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        index = STATIC / "index.html"
        if not index.is_file():
            raise ApiError(503, NOT_BUILT)
        return FileResponse(str(index), media_type="text/html")

    if STATIC.is_dir():
        app.mount("/static", StaticFiles(directory=str(STATIC)), name="static")

    @app.get(
        "/api/v1/graph",
        response_model=Graph,
        tags=["web view"],
        responses={**NOT_FOUND, **UNAVAILABLE},
    )
    def get_graph(
        view: Literal["auto", "full", "summary", "pods"] = Query(
            "auto",
            description="full: every switch, tray and cable; summary: hosts collapsed per "
            "leaf; pods: pods and top-tier groups (three tiers and more); auto: the "
            "fullest that stays readable",
        ),
        focus: str | None = Query(
            None, max_length=200, description="summary: a leaf to expand; pods: pod-<n>"
        ),
    ) -> dict:
        """The fabric drawn by tiers, each link coloured by state and utilisation."""
        topo, links = reading.current()
        return graph(topo, links, view, focus)

    @app.get(
        "/api/v1/ports/{name}",
        response_model=Port,
        tags=["web view"],
        responses={**NOT_FOUND, **UNAVAILABLE},
    )
    def get_port(name: str) -> dict:
        """Port ``<node guid>_<port number>``: its state, utilisation and counters."""
        return reading.port(name)

    @app.get(
        "/api/v1/events/stream",
        tags=["web view"],
        response_class=StreamingResponse,
        responses={200: {"content": {"text/event-stream": {}}}, **UNAVAILABLE},
    )
    async def events_stream(
        request: Request,
        since: int | None = Query(None, ge=0, description="events above this id"),
        seconds: float = Query(
            stream.LIFETIME_MAX, gt=0, le=stream.LIFETIME_MAX, description="how long it lasts"
        ),
    ) -> StreamingResponse:
        """Server-sent events: the fabric's events as they are logged and the links
        that change (a ``Last-Event-ID`` header, as a browser reconnecting sends it,
        goes before ``since``)."""
        last = request.headers.get("last-event-id", "")
        start = int(last) if last.isdigit() else since
        await _check(reading)
        return StreamingResponse(
            stream.feed(request, source, reading, start, seconds),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )


async def _check(reading: Reading) -> None:
    """Fail before the stream starts when the fabric cannot be read."""
    await asyncio.to_thread(reading.current)
