"""Where the API reads the fabric: one request at a time to its admin socket (the JSON
lines of docs/protocol.md), the ``watch`` files the server writes for it, and its event
log; the layout read once, the state at most once per ``max_age`` however many
requests want it at once."""

from __future__ import annotations

import bisect
import json
import os
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from .. import eventlog
from ..errors import FabriclabError, InputError, Problem
from ..sim.run import admin
from ..sim.run.records import Instance, NotRunning
from ..statedir import open_state_file, state_dir
from .view import Layout, State

Send = Callable[[dict], Any]
T = TypeVar("T")
STATE_MAX_BYTES = 1 << 31  # a state file larger than this is not read (a damaged one)
LAYOUT_MAX_BYTES = 1 << 30
EVENTS_KEPT = 100_000  # the newest events kept in memory (older ones: the log is read)


class FabricUnavailable(FabriclabError):
    """The fabric is not up, or stopped while it was being read."""


class Source:
    """A running fabric ``name``, reached through ``send`` (a request in, its result
    out, an InputError for an error answer) and its event log at ``events_path``."""

    def __init__(self, name: str, send: Send, events_path: Path):
        self.name = name
        self._send = send
        self.events_path = events_path
        self._lock = threading.Lock()
        self._layout: Layout | None = None
        self._state: State | None = None
        self._derived_lock = threading.Lock()
        self._derived: dict[Callable[[Layout], Any], Any] = {}
        self._derived_from: Layout | None = None
        self._events_lock = threading.Lock()
        self._tail = eventlog.Tail(events_path)
        self._kept: deque[dict[str, Any]] = deque(maxlen=EVENTS_KEPT)
        self._severities: Counter[str] = Counter()  # every event read, by severity
        self._restarts = 0

    @classmethod
    def remote(cls, name: str, timeout: float = 60.0) -> Source:
        """The fabric ``name`` that is up on this machine, as the CLI reaches it."""
        folder = state_dir()
        path = admin.admin_path(folder, name)

        def send(req: dict) -> Any:
            try:
                Instance.load(name)
            except NotRunning as e:
                raise FabricUnavailable(e.problems) from None
            return admin.call(path, req, timeout)

        return cls(name, send, eventlog.events_path(folder, name))

    def request(self, op: str, **fields: Any) -> Any:
        """The result of one admin request (an InputError answer raised as it came)."""
        return self._send({"op": op, **fields})

    def layout(self) -> Layout:
        """The fabric's layout (read once)."""
        with self._lock:
            if self._layout is None:
                self._layout = self._read_layout()
            return self._layout

    def derived(self, make: Callable[[Layout], T]) -> T:
        """What ``make`` makes of the layout (a part's labels, records, topology), made
        once per layout: again only when the fabric comes back with another one."""
        layout = self.layout()
        with self._derived_lock:
            if self._derived_from is not layout:
                self._derived, self._derived_from = {}, layout
            if make not in self._derived:
                self._derived[make] = make(layout)
            return self._derived[make]

    def state(self, max_age: float = 0.0) -> State:
        """The fabric's state now, or as read less than ``max_age`` seconds ago."""
        layout = self.layout()
        with self._lock:
            s = self._state
            if s is not None and time.monotonic() - s.taken < max_age:
                return s
            ans = self.request("watch", part="state")
            try:
                data = _load_array(Path(ans["path"]))
            except InputError as e:  # the server's own file: not the request's fault
                raise FabricUnavailable(e.problems) from None
            if data.shape[0] != layout.port_count or data.shape[1] != len(ans["columns"]):
                self._layout = None  # the fabric was restarted with another spec
                raise FabricUnavailable(
                    [Problem(self.name, "the fabric changed while it was read: ask again")]
                )
            self._state = State(
                list(ans["columns"]),
                data,
                float(ans["now"]),
                bool(ans["virtual"]),
                time.monotonic(),
            )
            return self._state

    def events(self, since: int = 0) -> list[dict[str, Any]]:
        """The events logged with an id above ``since``, oldest first: from the last
        :data:`EVENTS_KEPT` kept in memory (the log's new lines read as it grows), or the
        log read whole for older ones."""
        with self._events_lock:
            self._read_events()
            kept = list(self._kept) if not self._kept or since >= self._kept[0]["id"] - 1 else None
        if kept is None:
            return [e for e in eventlog.stream(self.events_path) if _id(e) > since]
        start = bisect.bisect_right([_id(e) for e in kept], since)
        return kept[start:]

    def event_counts(self) -> tuple[int, Counter[str]]:
        """The id of the last event read, and how many events of each severity the log
        has held (counted from zero again when the fabric begins a new log)."""
        with self._events_lock:
            self._read_events()
            return self._tail.since, Counter(self._severities)

    def _read_events(self) -> None:
        """Take the events logged since the last look (the caller holds the lock)."""
        got = self._tail.new()
        if self._tail.restarts != self._restarts:  # the fabric began a new log
            self._restarts = self._tail.restarts
            self._kept.clear()
            self._severities.clear()
        self._kept.extend(got)
        self._severities.update(str(e.get("severity", "")) for e in got)

    def _read_layout(self) -> Layout:
        ans = self.request("watch", part="layout")
        try:
            return Layout(json.loads(_read(Path(ans["path"]), LAYOUT_MAX_BYTES)))
        except InputError as e:
            raise FabricUnavailable(e.problems) from None
        except (ValueError, KeyError, TypeError) as e:
            why = f"not a fabric layout: {e}"
            raise FabricUnavailable([Problem(ans["path"], why)]) from None


def _id(event: dict) -> int:
    i = event.get("id")
    return i if isinstance(i, int) else 0


def _read(path: Path, limit: int) -> bytes:
    fd = open_state_file(path, os.O_RDONLY)
    with os.fdopen(fd, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise InputError([Problem(str(path), f"larger than {limit} bytes")])
    return data


def _load_array(path: Path) -> np.ndarray:
    """The state array at ``path``, read straight from the file (no copy of its bytes
    first: at 32,768 HCAs it is 58 MB)."""
    fd = open_state_file(path, os.O_RDONLY)
    with os.fdopen(fd, "rb") as f:
        if os.fstat(f.fileno()).st_size > STATE_MAX_BYTES:
            raise InputError([Problem(str(path), f"larger than {STATE_MAX_BYTES} bytes")])
        try:
            arr = np.lib.format.read_array(f, allow_pickle=False)
        except ValueError as e:
            raise InputError([Problem(str(path), f"not a state array: {e}")]) from None
    if arr.dtype != np.uint64 or arr.ndim != 2:
        raise InputError([Problem(str(path), "not a state array: want 2-D uint64")])
    return arr
