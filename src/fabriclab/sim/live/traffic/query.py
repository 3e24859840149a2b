"""The flows a listing asks for, picked and summed over the flow table in numpy (a
listing of tens of thousands of flows sends a summary and a page, not every flow).

:func:`select` picks flows by state, source and destination port and id;
:func:`summary` counts them by state and adds up their bytes and rates.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ....errors import InputError, Problem
from .flows import RUNNING, STATE_OF, STATES, FlowTable


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
