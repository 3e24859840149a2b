"""A bound on request bodies, before any route reads them: a declared Content-Length
over :data:`MAX_BODY_BYTES` is answered 413 at once, and a body streamed without one is
cut off (413) as soon as it passes the bound.  Starlette reads bodies whole and has no
such bound of its own, hence this small ASGI middleware."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from starlette.requests import ClientDisconnect

MAX_BODY_BYTES = 2 << 20  # the largest body a route takes: a 1 MiB scenario, JSON-quoted


class BodyLimit:
    """ASGI middleware refusing bodies over ``limit`` bytes with 413."""

    def __init__(self, app: Any, limit: int = MAX_BODY_BYTES):
        self.app = app
        self.limit = limit

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None:
            text = declared.decode("latin-1").strip()
            if not text.isdigit() or len(text) > 18 or int(text) > self.limit:
                await _refuse(send, 413 if text.isdigit() else 400, text[:20])
                return
        seen = 0
        refused = False

        async def bounded() -> dict:
            # Past the bound the 413 is sent here, and the route is told the client
            # left: FastAPI turns any error while it reads a body into its own 400.
            nonlocal seen, refused
            if refused:
                return {"type": "http.disconnect"}
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.limit:
                    refused = True
                    await _refuse(send, 413, str(seen))
                    return {"type": "http.disconnect"}
            return msg

        async def quiet(msg: dict) -> None:
            if not refused:  # the 413 went already: whatever the route says is dropped
                await send(msg)

        with contextlib.suppress(ClientDisconnect):
            await self.app(scope, bounded, quiet)


async def _refuse(send: Any, status: int, declared: str) -> None:
    what = (
        f"request body over the limit of {MAX_BODY_BYTES} bytes"
        if status == 413
        else f"Content-Length {declared!r} is not a number"
    )
    body = json.dumps({"error": what}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
