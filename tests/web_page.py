"""What the web view's browser test and benchmark share: the API served by uvicorn in a
thread on 127.0.0.1, a Source whose requests take turns with the test's own calls on
the live fabric, and Debian's headless Chromium driven by Playwright (nothing
downloaded: the browser is the system's, and missing it is an error, not a skip)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import uvicorn
from helpers import free_port, wait_for

from fabriclab.api.app import make_app
from fabriclab.api.source import Source

# Debian's chromium-headless-shell (scripts/install-system-deps.sh installs it)
CHROMIUM = Path("/usr/lib/chromium/chromium-headless-shell")


def locked_source(source: Source, lock: threading.Lock) -> Source:
    """``source`` with each request holding ``lock`` (the live fabric of tests/api_fabric
    answers in the caller's thread: the server's and the test's calls take turns)."""

    def send(req: dict) -> Any:
        with lock:
            fields = {k: v for k, v in req.items() if k != "op"}
            return source.request(req["op"], **fields)

    return Source(source.name, send, source.events_path)


@contextmanager
def serve(source: Source) -> Iterator[str]:
    """The API on ``source`` at http://127.0.0.1:<free port>/ while in the block."""
    port = free_port()
    config = uvicorn.Config(
        make_app(source),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        timeout_graceful_shutdown=2,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="web-api", daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started or not thread.is_alive(), 30, "uvicorn to start")
        assert server.started, "uvicorn did not start (see the log above)"
        yield f"http://127.0.0.1:{port}/"
    finally:
        server.should_exit = True
        thread.join(10)


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium (Debian's), through Playwright."""
    from playwright.sync_api import sync_playwright

    assert CHROMIUM.is_file(), (
        f"{CHROMIUM} is missing: install Debian's chromium-headless-shell "
        "(scripts/install-system-deps.sh does)"
    )
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM))
        try:
            yield browser
        finally:
            browser.close()


def first_draw(page: Any, url: str, timeout_ms: float = 60_000) -> float:
    """Open ``url`` and wait for the graph's first render: its time in seconds from the
    navigation's start (the graph's JSON fetched, cytoscape's first ``render``)."""
    page.goto(url)
    page.wait_for_function(
        "() => window.fabriclab && window.fabriclab.drawn !== null", timeout=timeout_ms
    )
    return page.evaluate("() => window.fabriclab.drawn") / 1000.0
