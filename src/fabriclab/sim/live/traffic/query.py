"""The flows a listing asks for, picked and summed over the flow table in numpy (a
listing of tens of thousands of flows sends a summary and a page, not every flow).

:func:`select` picks flows by state, source and destination port and id;
:func:`summary` counts them by state and adds up their bytes and rates; :func:`flows_at`
gives flows as the API shows them.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ....errors import InputError, Problem
from ...fabric.datapaths import DELIVERED, ENDS, Routes, Snapshot
from . import retry
from .flows import FAILED, RETRYING, RUNNING, STATE_OF, STATES, Flow, FlowTable


def select(
    f: FlowTable,
    states: Iterable[str] | None,
    src: Iterable[int] | None,
    dst: Iterable[int] | None,
    ids: Iterable[int] | None,
) -> np.ndarray:
    """The table indices of the flows of ``f`` in one of ``states`` (names), from one of
    the flat ports ``src``, to one of ``dst``, with one of ``ids`` (each None: any)."""
    n = f.n
    keep = np.ones(n, dtype=bool)
    if states is not None:
        codes = []
        for s in states:
            if s not in STATE_OF:
                known = ", ".join(STATES.values())
                raise InputError([Problem("--state", f"{s!r}: want one of {known}")])
            codes.append(STATE_OF[s])
        keep &= np.isin(f.state[:n], codes)
    if src is not None:
        keep &= np.isin(f.src[:n], np.fromiter(src, dtype=np.int64))
    if dst is not None:
        keep &= np.isin(f.dst[:n], np.fromiter(dst, dtype=np.int64))
    if ids is not None:
        want = np.fromiter(ids, dtype=np.int64) - 1
        mask = np.zeros(n, dtype=bool)
        mask[want[(want >= 0) & (want < n)]] = True
        keep &= mask
    return np.flatnonzero(keep)


def summary(f: FlowTable, which: np.ndarray | None = None) -> dict:
    """``flows`` (how many), ``states`` (how many in each state, every state named),
    ``sent`` and ``delivered`` (payload bytes, all flows together) and ``rate`` (payload
    bytes per second of the running ones) of the flows ``which`` (table indices; None:
    all)."""
    idx = np.arange(f.n) if which is None else which
    st = f.state[idx]
    counts = np.bincount(st.astype(np.int64), minlength=len(STATES))
    delivered = f.delivered[idx]
    return {
        "flows": len(idx),
        "states": {name: int(counts[code]) for code, name in STATES.items()},
        "sent": int(np.maximum(f.sent[idx], delivered).sum()),
        "delivered": int(delivered.sum()),
        "rate": float(f.rate[idx][st == RUNNING].sum()),
    }


def flows_at(
    f: FlowTable, snap: Snapshot, routes: Routes | None, routed: int, which: Iterable[int]
) -> list[Flow]:
    """The flows at table indices ``which`` (flow id - 1) as :meth:`.engine.TrafficEngine.flows` gives them: ``routes`` those of the first ``routed`` flows."""
    out = []
    for i in which:
        i = int(i)
        state = int(f.state[i])
        dropped = reason = None
        if routes is not None and i < routed and state == RETRYING:
            end, at = int(routes.end[i]), int(routes.at[i])
            if end != DELIVERED:
                where = snap.ports[at].ref() if at >= 0 else "?"  # type: ignore[union-attr]
                dropped = f"{ENDS[end]} at {where}"
                reason = retry.reason(snap, end, at, int(f.src[i]), int(f.dst[i]))
        elif state == FAILED:
            reason = f.why.get(i)
        size, limit = int(f.size[i]), float(f.limit[i])
        out.append(
            Flow(
                id=i + 1,
                src=snap.ports[int(f.src[i])],  # type: ignore[arg-type]
                dst=snap.ports[int(f.dst[i])],  # type: ignore[arg-type]
                rate=float(f.rate[i]) if state == RUNNING else 0.0,
                sent=int(max(f.sent[i], f.delivered[i])),
                delivered=int(f.delivered[i]),
                size=None if size < 0 else size,
                limit=None if np.isinf(limit) else limit,
                state=STATES[state],
                dropped=dropped,
                reason=reason,
                timeout=int(f.timeout[i]),
                retry_count=int(f.retries[i]),
            )
        )
    return out
