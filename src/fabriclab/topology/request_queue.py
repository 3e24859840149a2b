"""The topology API's request queue: each request runs after a trailing delay (a repeat
of the same request within it replaces the pending one and restarts the delay, as
topograph's TrailingDelayQueue aggregates requests), on a small fixed pool of worker
threads fed by one scheduler thread; results are kept for a bounded count and age.

Bounds (each documented in docs/topology.md, the topology API):

- at most ``max_waiting`` requests (and ``max_waiting_bytes`` of their bodies) wait or
  run at once; one more is refused (``QueueFull``, the API answers 429);
- at most ``max_results`` results are kept (topograph keeps 100: ``RequestHistorySize``
  in pkg/server/trailing_delay_queue.go), each for at most ``result_ttl`` seconds; the
  oldest go first, and an evicted request's id answers 404 as an unknown one does.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from .errors import RequestError

RESULT_HISTORY = 100  # topograph's RequestHistorySize
RESULT_TTL = 3600.0
MAX_WAITING = 1024
MAX_WAITING_BYTES = 64 * 1024 * 1024
WORKERS = 2


class QueueFull(RequestError):
    """Too many requests wait or run (the API answers 429)."""

    def __init__(self, message: str):
        super().__init__(message, 429)


@dataclass
class Result:
    """A request's outcome: 200 with its data, or a status and a message."""

    status: int  # 200, or the request's error status
    message: str = ""
    data: bytes | None = None


@dataclass
class _Waiting:
    due: float
    item: Any
    size: int


@dataclass
class _Done:
    result: Result
    seq: int  # which run produced it: a later run's result is never overwritten
    at: float


class RequestQueue:
    """``submit(uid, item, size)`` runs ``handle(item) -> Result`` once ``delay``
    seconds have passed without another submit of ``uid``."""

    def __init__(
        self,
        handle: Callable[[Any], Result],
        delay: float,
        *,
        workers: int = WORKERS,
        max_waiting: int = MAX_WAITING,
        max_waiting_bytes: int = MAX_WAITING_BYTES,
        max_results: int = RESULT_HISTORY,
        result_ttl: float = RESULT_TTL,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.handle, self.delay, self.clock = handle, delay, clock
        self.max_waiting, self.max_waiting_bytes = max_waiting, max_waiting_bytes
        self.max_results, self.result_ttl = max_results, result_ttl
        self._cond = threading.Condition()
        self._waiting: dict[str, _Waiting] = {}  # not yet due
        self._heap: list[tuple[float, int, str]] = []  # (due, seq, uid); stale entries skipped
        self._running: dict[str, int] = {}  # uid -> runs handed to the pool, not finished
        self._load = [0, 0]  # requests and body bytes waiting or running
        self._results: OrderedDict[str, _Done] = OrderedDict()  # oldest first
        self._seq = itertools.count()
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="topology-worker")
        self._scheduler: threading.Thread | None = None
        self._closed = False

    # --- the clients' side ------------------------------------------------------------
    def submit(self, uid: str, item: Any, size: int) -> None:
        """Queue ``item`` as request ``uid`` (replacing a pending one), or QueueFull."""
        with self._cond:
            old = self._waiting.get(uid)
            count = self._load[0] + (0 if old else 1)
            volume = self._load[1] + size - (old.size if old else 0)
            if count > self.max_waiting or volume > self.max_waiting_bytes:
                raise QueueFull(
                    f"too many requests waiting ({self._load[0]}, {self._load[1]} bytes); "
                    "try again later"
                )
            self._load = [count, volume]
            due = self.clock() + self.delay
            self._waiting[uid] = _Waiting(due, item, size)
            heapq.heappush(self._heap, (due, next(self._seq), uid))
            if self._scheduler is None:
                self._scheduler = threading.Thread(
                    target=self._schedule, name="topology-scheduler", daemon=True
                )
                self._scheduler.start()
            self._cond.notify()

    def get(self, uid: str) -> Result | None:
        """The result, ``Result(202)`` while the request waits or runs, None if unknown."""
        with self._cond:
            if uid in self._waiting or uid in self._running:
                return Result(202, f"request ID {uid} has been created")
            self._evict()
            done = self._results.get(uid)
            return done.result if done else None

    def close(self) -> None:
        """Stop scheduling; requests not yet running are dropped."""
        with self._cond:
            self._closed = True
            self._cond.notify()
            scheduler = self._scheduler
        if scheduler is not None:
            scheduler.join()
        self._pool.shutdown(wait=False, cancel_futures=True)

    # --- the scheduler and the workers -------------------------------------------------
    def _schedule(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._closed:
                        return
                    now = self.clock()
                    while self._heap and self._stale(self._heap[0]):
                        heapq.heappop(self._heap)
                    if self._heap and self._heap[0][0] <= now:
                        _, seq, uid = heapq.heappop(self._heap)
                        waiting = self._waiting.pop(uid)
                        self._running[uid] = self._running.get(uid, 0) + 1
                        break
                    self._cond.wait(self._heap[0][0] - now if self._heap else None)
            self._pool.submit(self._work, uid, seq, waiting)

    def _stale(self, entry: tuple[float, int, str]) -> bool:
        waiting = self._waiting.get(entry[2])
        return waiting is None or waiting.due != entry[0]

    def _work(self, uid: str, seq: int, waiting: _Waiting) -> None:
        result = Result(500, "internal error: the request's run did not finish")
        try:
            result = self.handle(waiting.item)
        finally:  # whatever happened, the request is no longer waiting or running
            self._finish(uid, seq, waiting, result)

    def _finish(self, uid: str, seq: int, waiting: _Waiting, result: Result) -> None:
        with self._cond:
            self._running[uid] -= 1
            if not self._running[uid]:
                del self._running[uid]
            self._load = [self._load[0] - 1, self._load[1] - waiting.size]
            old = self._results.get(uid)
            if old is None or old.seq < seq:
                self._results[uid] = _Done(result, seq, self.clock())
                self._results.move_to_end(uid)
            self._evict()

    def _evict(self) -> None:
        oldest = self.clock() - self.result_ttl
        while self._results and (
            len(self._results) > self.max_results or next(iter(self._results.values())).at < oldest
        ):
            self._results.popitem(last=False)
