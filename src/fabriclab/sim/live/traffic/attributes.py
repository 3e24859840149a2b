"""A flow's own attributes checked: its size, its rate limit, and its queue pair's
``timeout`` and ``retry_count`` (one value for every flow of a command, or one per flow,
as a journal's)."""

from __future__ import annotations

import numpy as np

from ....errors import InputError
from ....ib.transport import NCCL_RETRY_CNT, NCCL_TIMEOUT, RETRY_CNT_MAX, TIMEOUT_MAX


def check(size, rate) -> None:
    """A flow's ``bytes`` (a whole number, at least 1) and ``rate`` (bytes/s, positive),
    each when given."""
    if size is not None and (
        isinstance(size, bool) or not isinstance(size, int | np.integer) or size < 1
    ):
        raise InputError(f"bytes must be a whole number of at least 1, not {size!r}", "traffic")
    if rate is not None and (
        isinstance(rate, bool)
        or not isinstance(rate, int | float | np.number)
        or not 0 < rate < np.inf
    ):
        raise InputError(f"rate must be a positive number of bytes/s, not {rate!r}", "traffic")


def qp_attributes(qp: dict) -> tuple:
    """``qp``'s ``timeout`` (0-31) and ``retry_count`` (0-7), NCCL's where not given;
    each a number, or an array of one per flow."""
    unknown = set(qp) - {"timeout", "retry_count"}
    if unknown:
        raise InputError(f"unknown flow option {sorted(unknown)[0]!r}", "traffic")
    return (
        _one(qp, "timeout", NCCL_TIMEOUT, TIMEOUT_MAX),
        _one(qp, "retry_count", NCCL_RETRY_CNT, RETRY_CNT_MAX),
    )


def _one(qp: dict, key: str, default: int, top: int):
    v = qp.get(key, default)
    if v is None:
        return default
    if isinstance(v, np.ndarray):
        if ((v < 0) | (v > top)).any():
            raise InputError(f"{key} must be a whole number from 0 to {top}", "traffic")
        return v
    if isinstance(v, bool) or not isinstance(v, int | np.integer) or not 0 <= v <= top:
        raise InputError(f"{key} must be a whole number from 0 to {top}, not {v!r}", "traffic")
    return int(v)
