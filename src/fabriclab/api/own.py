"""fabriclab's own API, ``/api/v1``: what UFM has no resource for (faults, traffic,
scenarios, the clock, the fabric's spec and the server's counts), each route one admin
request of docs/protocol.md, its answer as the socket gives it."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from ..errors import InputError, Problem
from .errors import ApiError
from .source import Source

PREFIX = "/api/v1"
Short = Annotated[str, Field(max_length=40)]
TEXT_MAX = 1 << 20  # a scenario's text (the admin socket's line holds at most 1 MiB)
_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"description": "The request names nothing, or a value is wrong (one line)"},
    401: {"description": "Credentials are configured and the request has none"},
    413: {"description": "The body is too large"},
    422: {"description": "The body does not fit the request's model"},
    503: {"description": "The fabric is not up"},
}

_MISSING: dict[int | str, dict[str, Any]] = {404: {"description": "No such fault"}}


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class FaultOptions(_Body):
    """Every option of some kind of fault (which kind takes which: docs/live.md)."""

    period: float | Short | None = Field(None, description="flap: a duration")
    count: int | None = Field(None, description="flap: how many times")
    width: str | None = Field(None, description="degrade: 2x, 1x", max_length=8)
    speed: str | None = Field(None, description="degrade: HDR, EDR, ...", max_length=8)
    ber: float | None = Field(None, description="errors: a bit-error rate")
    down_after: int | None = Field(None, description="errors: recoveries before down")
    rate: float | None = Field(None, description="drop: percent of MADs lost")
    seed: int | None = Field(None, description="drop: the loss's seed")
    gpus: Short | list[int] | None = Field(None, description="nvlink: the GPUs", max_length=72)


class FaultBody(_Body):
    """A fault to inject, as ``fabriclab fault KIND TARGET`` takes it."""

    kind: Literal["down", "up", "flap", "degrade", "errors", "drop", "nvlink"]
    target: str = Field(min_length=1, max_length=400, examples=["LAB-IBLEAF-01[5]"])
    options: FaultOptions = Field(default_factory=FaultOptions, examples=[{"period": "2s"}])


class TargetBody(_Body):
    """What to bring back up."""

    target: str = Field(min_length=1, max_length=400, examples=["LAB-IBLEAF-01[5]"])


class TrafficOptions(_Body):
    """How much and how fast a flow goes, and its queue pair's attributes (docs/live.md)."""

    bytes: int | Short | None = Field(None, description="4096, 64Mi, 10G")
    rate: float | Short | None = Field(None, description="12.5GB/s, 100Gb/s")
    timeout: int | None = Field(None, description="the queue pair's timeout, 0-31")
    retry_count: int | None = Field(None, description="its retry count, 0-7")


class TrafficBody(_Body):
    """A traffic command, as ``fabriclab traffic VERB ARGS`` takes it."""

    verb: Literal["send", "ring", "all-to-all", "stop"]
    args: list[str] = Field(default_factory=list, max_length=4, examples=[["sched-worker[1-2]"]])
    options: TrafficOptions = Field(default_factory=TrafficOptions, examples=[{"rate": "1GB/s"}])


class ScenarioBody(_Body):
    """A scenario file's text (docs/live.md), checked whole before it starts."""

    text: str = Field(min_length=1, max_length=TEXT_MAX)
    source: str = Field("api", max_length=200)


class AdvanceBody(_Body):
    """How far to move a virtual clock: seconds, or a duration such as ``"2s"``."""

    seconds: float | Short = Field(examples=[10, "500ms"])


def install(app: FastAPI, source: Source) -> None:
    """Add ``/api/v1`` to ``app``."""
    r = APIRouter(prefix=PREFIX, tags=["fabriclab"], responses=_ERRORS)

    @r.get("/faults", summary="The faults in force")
    def faults() -> list[dict[str, Any]]:
        return source.request("faults")

    @r.post("/faults", status_code=201, summary="Inject a fault (kind up: bring a link back)")
    def inject(body: FaultBody) -> dict[str, Any]:
        options = body.options.model_dump(exclude_none=True)
        return source.request("fault", kind=body.kind, target=body.target, options=options)

    @r.post("/faults/up", summary="Bring a target's links back: clear what holds them down")
    def up(body: TargetBody) -> dict[str, Any]:
        return source.request("fault", kind="up", target=body.target)

    @r.delete("/faults/{fault_id:int}", summary="Clear one fault", responses=_MISSING)
    def clear(fault_id: int) -> dict[str, Any]:
        try:
            if not 0 <= fault_id < 1 << 62:
                raise InputError([Problem(str(fault_id), "no such fault")])
            return {"cleared": source.request("clear", id=fault_id)}
        except InputError as e:
            raise ApiError(404, str(e)) from None

    @r.delete("/faults", summary="Clear every fault")
    def clear_all() -> dict[str, Any]:
        return {"cleared": source.request("clear")}

    @r.get("/traffic", summary="The flows (a summary and the first `limit`)")
    def flows(
        state: str | None = Query(None, max_length=100, description="running,retrying,..."),
        from_: str | None = Query(None, alias="from", max_length=400),
        to: str | None = Query(None, max_length=400),
        limit: int = Query(100, ge=0, le=100_000),
    ) -> dict[str, Any]:
        options: dict[str, Any] = {"limit": limit}
        for key, value in (("state", state), ("from", from_), ("to", to)):
            if value is not None:
                options[key] = value
        return source.request("traffic", verb="list", options=options)

    @r.post("/traffic", summary="Start or stop flows")
    def traffic(body: TrafficBody) -> dict[str, Any]:
        options = body.options.model_dump(exclude_none=True)
        return source.request("traffic", verb=body.verb, args=body.args, options=options)

    @r.get("/scenarios", summary="The scenarios still running")
    def scenarios() -> list[dict[str, Any]]:
        return source.request("scenarios")

    @r.post("/scenarios", status_code=201, summary="Run a scenario")
    def scenario(body: ScenarioBody) -> dict[str, Any]:
        return source.request("scenario", text=body.text, source=body.source)

    @r.get("/clock", summary="The fabric's clock")
    def clock() -> dict[str, Any]:
        return source.request("clock")

    @r.post("/clock/advance", summary="Move a virtual clock on")
    def advance(body: AdvanceBody) -> dict[str, Any]:
        return source.request("advance", seconds=body.seconds)

    @r.get("/spec", summary="What the fabric is: its cluster, trays, NVLink domains, sizes")
    def spec() -> dict[str, Any]:
        lay = source.layout()
        switches = int(lay.node_switch.sum())
        return {
            "fabric": lay.fabric,
            "cluster": lay.cluster,
            "description": lay.doc.get("description", ""),
            "trays": lay.trays,
            "domains": lay.domains,
            "switches": switches,
            "cas": lay.node_count - switches,
            "ports": lay.port_count,
            "links": len(lay.links),
        }

    @r.get("/stats", summary="What the fabric server has counted")
    def stats() -> dict[str, Any]:
        return source.request("stats")

    @r.get("/events", summary="The events logged after `since`, oldest first")
    def events(
        since: int = Query(0, ge=0, le=1 << 62), limit: int = Query(1000, ge=1, le=100_000)
    ) -> list[dict[str, Any]]:
        return source.events(since)[:limit]

    app.include_router(r)

    @app.get(PREFIX, include_in_schema=False)
    def index(request: Request) -> JSONResponse:
        routes = sorted({getattr(x, "path", "") for x in request.app.routes})
        return JSONResponse({"routes": [p for p in routes if p.startswith(PREFIX + "/")]})
