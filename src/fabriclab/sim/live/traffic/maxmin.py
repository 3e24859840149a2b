"""Max-min fair rates of flows sharing links, by progressive filling ("water filling").

All unfrozen flows' rates rise together; when a link saturates, every flow crossing it
is frozen at the level reached; a flow with a rate limit freezes at its limit (a link of
its own).  Bertsekas & Gallager, *Data Networks* 2nd ed., 6.5.2; Radunović & Le Boudec,
"A Unified Framework for Max-Min and Min-Max Fairness with Applications" (IEEE/ACM ToN
2007) show water filling is exact for link capacities.

Written here rather than taken from a library: the solvers that exist (SimGrid's lmm
"linear maxmin solver") are C++ inside a simulator; this one is vectorised with numpy
over a flow x link incidence in CSR (by flow) and CSC (by link) form, so a million
flows cost a few numpy passes per distinct level.  Links whose fair share is within
``tol`` (relative) of the lowest saturate together, which bounds the number of passes;
a flow then gets at most ``tol`` less than its exact share, never more than a link
holds.
"""

from __future__ import annotations

import numpy as np

TOL = 1e-9


def rows(ptr: np.ndarray, which: np.ndarray) -> np.ndarray:
    """The positions of the CSR rows ``which`` (``ptr`` their offsets), concatenated."""
    starts = ptr[which]
    lens = ptr[which + 1] - starts
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    # position k of the output belongs to row r: start_r + (k - first output of r)
    first = np.cumsum(lens) - lens
    return np.repeat(starts - first, lens) + np.arange(total, dtype=np.int64)


def maxmin(
    flow_ptr: np.ndarray,
    flow_links: np.ndarray,
    link_ptr: np.ndarray,
    link_flows: np.ndarray,
    capacity: np.ndarray,
    weight: np.ndarray,
    limit: np.ndarray,
    active: np.ndarray,
    tol: float = TOL,
) -> np.ndarray:
    """Each flow's max-min fair rate.

    Flow f crosses links ``flow_links[flow_ptr[f]:flow_ptr[f+1]]``; link l carries flows
    ``link_flows[link_ptr[l]:link_ptr[l+1]]`` (the same incidence, by link).  A flow at
    rate r uses ``r * weight[f]`` of each link it crosses (its packets' headers);
    ``capacity[l]`` is what link l carries; ``limit[f]`` caps flow f (``inf``: none);
    flows not ``active`` get 0 and use nothing.  A flow crossing no link gets its limit.
    """
    nflows, nlinks = len(flow_ptr) - 1, len(capacity)
    rate = np.zeros(nflows)
    frozen = ~active.astype(bool)
    flow_of_entry = np.repeat(np.arange(nflows), np.diff(flow_ptr))  # CSR entry -> its flow
    if frozen.any():
        live_entry = active[flow_of_entry]
        ent_links, ent_flows = flow_links[live_entry], flow_of_entry[live_entry]
    else:
        ent_links, ent_flows = flow_links, flow_of_entry
    count = np.bincount(ent_links, minlength=nlinks).astype(np.int64)
    wsum = np.bincount(ent_links, weights=weight[ent_flows], minlength=nlinks)
    left = capacity.astype(float).copy()
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(count > 0, left / wsum, np.inf)
    # flows with a limit, lowest first; a pointer walks them as the level rises
    limited = np.flatnonzero(np.isfinite(limit) & ~frozen)
    limited = limited[np.argsort(limit[limited], kind="stable")]
    k = 0
    unfrozen = int((~frozen).sum())
    while unfrozen:
        while k < len(limited) and frozen[limited[k]]:
            k += 1
        lmin = float(share.min()) if nlinks else np.inf
        cmin = float(limit[limited[k]]) if k < len(limited) else np.inf
        level = min(lmin, cmin)
        if not np.isfinite(level):
            # flows that cross no link and have no limit: nothing holds them
            rate[~frozen] = np.inf
            break
        new = []
        if cmin <= level:
            j = k
            while j < len(limited) and limit[limited[j]] <= level:
                j += 1
            capped = limited[k:j]
            capped = capped[~frozen[capped]]
            rate[capped] = limit[capped]
            frozen[capped] = True
            new.append(capped)
            k = j
        if lmin <= level * (1 + tol):
            sat = np.flatnonzero(share <= level * (1 + tol))
            mark = np.zeros(nflows, dtype=bool)
            mark[link_flows[rows(link_ptr, sat)]] = True
            fl = np.flatnonzero(mark & ~frozen)
            rate[fl] = level
            frozen[fl] = True
            new.append(fl)
        done = np.concatenate(new) if new else np.zeros(0, dtype=np.int64)
        if len(done) == 0:  # cannot happen: the lowest share or limit always freezes one
            break
        unfrozen -= len(done)
        links = flow_links[rows(flow_ptr, done)]
        owner = np.repeat(done, np.diff(flow_ptr)[done])
        count -= np.bincount(links, minlength=nlinks)
        wsum -= np.bincount(links, weights=weight[owner], minlength=nlinks)
        left -= np.bincount(links, weights=weight[owner] * rate[owner], minlength=nlinks)
        np.maximum(left, 0.0, out=left)
        # every link's share anew: one pass over the links costs less than finding
        # the ones touched
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where(count > 0, left / np.where(count > 0, wsum, 1.0), np.inf)
    return rate
