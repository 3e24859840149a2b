"""The web view's live feed, server-sent events (the WHATWG HTML standard's
``text/event-stream``): each new event of the fabric's log (``event: fabric``, its id as
the stream's ``id`` so that a browser reconnecting with ``Last-Event-ID`` misses none),
and the links whose state or utilisation changed (``event: links``: ``{"now": clock
seconds, "links": {"<port row>": [status, faults holding it, utilisation]}}``, or
``{"reload": true}`` when more changed than a message carries)."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
from fastapi import Request

from ..source import Source
from .meter import STATUS
from .reading import Reading

POLL = 0.25  # seconds between looks at the fabric
KEEPALIVE = 15.0  # seconds of silence before a comment line keeps proxies from closing
LIFETIME_MAX = 3600.0  # seconds a stream lasts at most (the browser then reconnects)
BACKLOG = 50  # events a new stream starts with
CHANGES_MAX = 5000  # links changed in one message at most, else "reload"
UTIL_STEP = 0.01  # a change of utilisation smaller than this is not sent


def frame(event: str, data: Any, ident: int | None = None) -> str:
    """One server-sent event."""
    head = f"id: {ident}\n" if ident is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


def _log_mark(source: Source) -> tuple[int, int] | None:
    try:
        st = os.stat(source.events_path)
    except OSError:
        return None
    return (st.st_ino, st.st_size)


async def feed(
    request: Request, source: Source, reading: Reading, since: int | None, lifetime: float
) -> AsyncIterator[str]:
    """The stream for one page, for ``lifetime`` seconds at most: events above id
    ``since`` (none: the last few), then what changes."""
    deadline = time.monotonic() + min(lifetime, LIFETIME_MAX)
    if since is None:
        backlog = await asyncio.to_thread(source.events, 0)
        since = int(backlog[-BACKLOG - 1]["id"]) if len(backlog) > BACKLOG else 0
    mark: tuple[int, int] | None = None
    last: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    quiet = time.monotonic()
    yield "retry: 1000\n\n"
    while time.monotonic() < deadline and not await request.is_disconnected():
        out = []
        now_mark = _log_mark(source)
        if now_mark != mark:
            mark = now_mark
            for ev in await asyncio.to_thread(source.events, since):
                since = int(ev["id"])
                out.append(frame("fabric", ev, since))
        topo, links = await asyncio.to_thread(reading.current)
        util = np.round(links.util / UTIL_STEP).astype(np.int32)
        cur = (links.status, links.fault, util)
        if last is not None and last[0].shape == cur[0].shape:
            changed = np.nonzero((last[0] != cur[0]) | (last[1] != cur[1]) | (last[2] != cur[2]))[0]
            if len(changed) > CHANGES_MAX:
                out.append(frame("links", {"now": links.now, "reload": True}))
            elif len(changed):
                rows = topo.layout.links[changed, 0].tolist()
                out.append(
                    frame("links", {"now": links.now, "links": _changes(links, changed, rows)})
                )
        last = cur
        if out:
            quiet = time.monotonic()
            yield "".join(out)
        elif time.monotonic() - quiet > KEEPALIVE:
            quiet = time.monotonic()
            yield ": keepalive\n\n"
        await asyncio.sleep(POLL)


def _changes(links: Any, changed: np.ndarray, rows: list[int]) -> dict[str, list]:
    st, fault, util = links.status[changed], links.fault[changed], links.util[changed]
    return {
        str(r): [STATUS[int(s)], int(f), round(float(u), 4)]
        for r, s, f, u in zip(rows, st.tolist(), fault.tolist(), util.tolist(), strict=True)
    }
