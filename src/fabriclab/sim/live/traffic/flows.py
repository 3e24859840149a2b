"""The traffic engine's flow table: the per-flow numpy arrays, grown as flows are added,
and the :class:`Flow` record the engine reports a flow as.

Flow ``i`` of the table has id ``i + 1``; its ``src``/``dst`` are ports in the flat
numbering of :class:`...fabric.datapaths.Snapshot`.  ``size`` -1 is a flow without an end,
``limit`` inf one without a rate cap of its own; ``delivered`` is payload bytes that
reached the destination, ``sent`` the most payload put on the wire so far (a resend
is not counted again: never past ``size``), ``frac`` the fraction of a byte carried to
the next step.  A flow with nowhere to go is ``retrying`` (:mod:`.retry`):
``timeout``/``retries`` are its queue pair's attributes, ``since`` when it lost its
route, ``tries`` the sends counted since; a flow that ``failed`` keeps its reason in
``why`` (by table index).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ....ib.transport import NCCL_RETRY_CNT, NCCL_TIMEOUT
from ...fabric.state import SimPort

RUNNING, DONE, STOPPED, RETRYING, FAILED = 0, 1, 2, 3, 4
STATES = {
    RUNNING: "running",
    DONE: "done",
    STOPPED: "stopped",
    RETRYING: "retrying",
    FAILED: "failed",
}
STATE_OF = {v: k for k, v in STATES.items()}
LIVE = (RUNNING, RETRYING)  # the states a flow can still leave by itself or by stop


@dataclass(frozen=True)
class Flow:
    """A flow as :meth:`.engine.TrafficEngine.flows` reports it.

    ``rate``: payload bytes per second now (0 unless running); ``sent``: payload bytes
    sent (never past ``size``), ``delivered``: of them, bytes that reached ``dst``;
    ``size``: bytes to deliver (None: until stopped); ``limit``: its own rate cap (None:
    max-min only); ``state``: running, retrying, done, stopped or failed; ``dropped``:
    where its packets are dropped now, e.g. "PortXmitDiscards at 'leaf'[3]" (None when
    they are delivered); ``reason``: why it is retrying or failed (None otherwise);
    ``timeout``/``retry_count``: its queue pair's local ACK timeout and retry count.
    """

    id: int
    src: SimPort
    dst: SimPort
    rate: float
    sent: int
    delivered: int
    size: int | None
    limit: float | None
    state: str
    dropped: str | None
    reason: str | None = None
    timeout: int = NCCL_TIMEOUT
    retry_count: int = NCCL_RETRY_CNT


class FlowTable:
    """Per-flow arrays that grow as flows are added (``n`` flows so far)."""

    FIELDS: ClassVar[dict[str, tuple]] = {
        "src": (np.int64, 0),
        "dst": (np.int64, 0),
        "size": (np.int64, -1),
        "limit": (np.float64, np.inf),
        "delivered": (np.int64, 0),
        "sent": (np.int64, 0),
        "frac": (np.float64, 0.0),
        "state": (np.int8, RUNNING),
        "rate": (np.float64, 0.0),
        "timeout": (np.int8, NCCL_TIMEOUT),
        "retries": (np.int8, NCCL_RETRY_CNT),
        "since": (np.float64, 0.0),
        "tries": (np.int16, 0),
    }

    # the arrays FIELDS lists, declared for the type checker (made in __init__)
    src: np.ndarray
    dst: np.ndarray
    size: np.ndarray
    limit: np.ndarray
    delivered: np.ndarray
    sent: np.ndarray
    frac: np.ndarray
    state: np.ndarray
    rate: np.ndarray
    timeout: np.ndarray
    retries: np.ndarray
    since: np.ndarray
    tries: np.ndarray

    def __init__(self) -> None:
        self.n = 0
        self.cap = 0
        self.why: dict[int, str] = {}  # a failed flow's reason
        for name, (dt, _) in self.FIELDS.items():
            setattr(self, name, np.zeros(0, dtype=dt))

    def extend(self, k: int) -> slice:
        """Room for ``k`` more flows; the slice they take."""
        need = self.n + k
        if need > self.cap:
            cap = max(need, 2 * self.cap, 64)
            for name, (dt, fill) in self.FIELDS.items():
                old = getattr(self, name)
                new = np.full(cap, fill, dtype=dt)
                new[: self.n] = old[: self.n]
                setattr(self, name, new)
            self.cap = cap
        s = slice(self.n, need)
        self.n = need
        return s
