"""What the page does to the fabric, failing and restoring a link: ``POST
/api/v1/faults`` and ``POST /api/v1/faults/up`` of fabriclab's own API.  Added here, in
their minimal form, only when the app has no such routes yet (:mod:`..own` owns them)."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import FastAPI
from pydantic import BaseModel, Field

from ..source import Source


class FaultIn(BaseModel):
    """A fault to put on the fabric (docs/protocol.md, ``fault``)."""

    kind: Literal["down", "flap", "degrade", "errors", "drop", "nvlink"]
    target: str = Field(max_length=400)
    options: dict[str, Any] = Field(default_factory=dict)


class UpIn(BaseModel):
    """What to bring back up (the faults holding it are cleared)."""

    target: str = Field(max_length=400)


def install(app: FastAPI, source: Source) -> None:
    """Add the two routes the page needs unless the app has them."""
    have = {getattr(r, "path", None) for r in app.routes}
    if "/api/v1/faults" in have:
        return

    bad: dict[int | str, dict[str, Any]] = {
        400: {"description": "the fabric refused it (one-line error)"}
    }

    @app.post("/api/v1/faults", status_code=201, tags=["faults"], responses=bad)
    def add_fault(body: FaultIn) -> dict[str, Any]:
        """Put a fault on the fabric; the fault record."""
        return source.request("fault", kind=body.kind, target=body.target, options=body.options)

    @app.post("/api/v1/faults/up", tags=["faults"], responses=bad)
    def bring_up(body: UpIn) -> dict[str, Any]:
        """Bring ``target`` up: the ids of the faults cleared."""
        return source.request("fault", kind="up", target=body.target)
