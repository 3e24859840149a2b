"""A collective's time on the modelled fabric: NCCL's cost model (:mod:`.tuning`) fed
with what the fabric carries instead of what NCCL's topology search assumes.

For each algorithm the ranks' placement allows, the flows it puts on InfiniBand
(:mod:`.patterns`) are routed over the forwarding tables (the subnet manager's, or
fabriclab's own routing on a spec) and given their max-min fair rates where they meet
(:mod:`...sim.live.traffic.maxmin`).  NCCL splits the data equally over its channels,
so the slowest channel sets the pace: the bus bandwidth the fabric gives an algorithm
is the channels' number times the rate of the slowest, and a group's NVLink (each
GPU's links, each way) bounds it as well.  NCCL's protocol corrections, latencies and
choice of the fastest (algorithm, protocol) follow.  An oversubscribed tier, a failed
or narrowed link on a path, HCAs left out by ``NCCL_IB_HCA`` and flows that cross
rails all show as a slower channel.

All-to-all and send-recv are NCCL's point-to-point operations, not in its tuning
tables: their time is one ring/Simple step's latency plus the slower of what the
flows take over InfiniBand and what the NVLink peers take.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ....errors import InputError, Problem
from ....formats import nccl_tests
from ...fabric.datapaths import Snapshot
from . import patterns, tuning
from .carry import Fabric, carry
from .knobs import Knobs
from .placement import Placement
from .sharp import roots_for

# the operations, their NCCL collective (None: point to point) and nccl-tests binary
OPS = {
    "all-reduce": ("AllReduce", "all_reduce_perf"),
    "all-gather": ("AllGather", "all_gather_perf"),
    "reduce-scatter": ("ReduceScatter", "reduce_scatter_perf"),
    "all-to-all": (None, "alltoall_perf"),
    "broadcast": ("Broadcast", "broadcast_perf"),
    "reduce": ("Reduce", "reduce_perf"),
    "send-recv": (None, "sendrecv_perf"),
}
OP_OF_BINARY = {b: op for op, (_, b) in OPS.items()}
ALGO_NAMES = {"ring": tuning.RING, "tree": tuning.TREE, "nvls": tuning.NVLS}
ALGO_NAMES["collnet"] = tuning.COLLNET_DIRECT
PROTO_NAMES = {"simple": tuning.SIMPLE, "ll": tuning.LL, "ll128": tuning.LL128}
# the algorithms each collective may use (tuning.cc ncclTopoTuneModel)
ALLOWED = {
    "AllReduce": (tuning.TREE, tuning.RING, tuning.COLLNET_DIRECT, tuning.NVLS),
    "AllGather": (tuning.RING, tuning.NVLS),
    "ReduceScatter": (tuning.RING, tuning.NVLS),
    "Broadcast": (tuning.RING,),
    "Reduce": (tuning.RING,),
}
SIMPLE_ONLY = (tuning.COLLNET_DIRECT, tuning.NVLS)
NVLS_CHANNELS = 16  # NCCL_NVLS_NCHANNELS' default (src/transport/nvls.cc)


@dataclass
class Choice:
    """One (algorithm, protocol) NCCL could run, and its time for a size."""

    algo: int
    proto: int
    time_us: float
    bus_GBps: float


@dataclass
class Estimate:
    """A collective of ``size`` bytes: its time, bandwidths, what ran it, and the
    InfiniBand ports its bytes leave by."""

    op: str
    size: int
    nranks: int
    time_us: float
    algbw_GBps: float
    busbw_GBps: float
    algorithm: str
    protocol: str
    why: str
    channels: int
    choices: list[Choice] = field(default_factory=list)
    fabric: Fabric | None = None
    flow_bytes: np.ndarray | None = None  # per flow of ``fabric``


class Plan:
    """A collective ``op`` of a placement under NCCL's knobs: what each algorithm can
    carry, worked out once; :meth:`estimate` then costs any size."""

    def __init__(
        self,
        snap: Snapshot,
        placement: Placement,
        op: str,
        knobs: Knobs,
        algo: str = "auto",
        proto: str = "auto",
        sharp_nodes: np.ndarray | None = None,
        adaptive: bool = False,
    ):
        self.snap, self.pl, self.op, self.knobs = snap, placement, op, knobs
        self.adaptive = adaptive  # flows spread over equal-cost paths
        self.func, self.binary = OPS[op]
        self.algos = knobs.algos
        if algo != "auto":
            self.algos = {ALGO_NAMES[algo]}
        self.protos = knobs.protos
        if proto != "auto":
            self.protos = {PROTO_NAMES[proto]}
        pl = placement
        k = max((len(g.nics) for g in pl.groups), default=1)
        # 16 channels or more, as many on each HCA (NCCL's search gives each NIC its
        # channels); within one group NCCL's NVLS channel count
        nch = k * -(-16 // k) if pl.nnodes > 1 else NVLS_CHANNELS
        self.nch = min(max(nch, knobs.min_channels), knobs.max_channels)
        multi = [g.nvlink_GBps for g in pl.groups if len(g.ranks) > 1]
        self.nvlink_GBps = min(multi) if multi else math.inf
        self.unavailable: dict[int, str] = {}
        self.fabrics: dict[int, Fabric] = {}
        self.sharp_nodes = sharp_nodes
        if self.func is not None:
            self._collective()
        else:
            self._p2p()

    # --- what each algorithm carries -------------------------------------------------

    def _collective(self) -> None:
        pl, func = self.pl, self.func
        assert func is not None
        for a in ALLOWED[func]:
            why = self._why_not(a)
            if why is not None:
                self.unavailable[a] = why
                continue
            if pl.nnodes == 1:
                continue  # NVLink only: no InfiniBand flows
            spread = self.adaptive
            if a == tuning.RING:
                pat = patterns.ring(self.snap, pl, self.nch, self.knobs.cross_nic)
            elif a == tuning.TREE:
                pat = patterns.tree(self.snap, pl, self.nch, self.knobs.cross_nic)
            else:
                roots, why = roots_for(self.snap, pl, self.nch, self.sharp_nodes)
                if roots is None:
                    self.unavailable[a] = why or "no aggregation tree"
                    continue
                pat = patterns.collnet(self.snap, pl, self.nch, roots)
                spread = False  # SHARP's trees are links of their own
            fab = carry(self.snap, pat, self.nch, spread)
            if fab.dropped:
                self.unavailable[a] = fab.dropped
            self.fabrics[a] = fab

    def _why_not(self, a: int) -> str | None:
        pl = self.pl
        if self.algos is not None and a not in self.algos:
            return "left out by NCCL_ALGO or --algo"
        if a == tuning.NVLS:
            if pl.nnodes > 1:
                return "the ranks span more than one NVLink group (multi-node NVLS needs CollNet)"
            if pl.nranks < 2 or pl.compute_capability < 90:
                return "needs NVSwitch multicast: 2 or more Hopper or Blackwell GPUs"
        if a == tuning.COLLNET_DIRECT:
            if not self.knobs.collnet:
                return "NCCL_COLLNET_ENABLE is not 1"
            if pl.nnodes < 2:
                return "the ranks share one NVLink group"
        return None

    def _bus_simple(self, a: int) -> float:
        """The Simple-protocol bus bandwidth (GB/s) algorithm ``a`` gets (NCCL's
        nChannels x bandwidth per channel)."""
        pl, nvl = self.pl, self.nvlink_GBps
        if a == tuning.NVLS:
            eff = tuning.NVLS_EFFICIENCY[tuning.cc_index(pl.compute_capability)]
            ppn = pl.nranks
            scale = 2.0 if self.func == "AllReduce" else (ppn - 1) / ppn
            return nvl * eff * (self.nch - 1) / self.nch * scale
        if pl.nnodes == 1:
            return nvl
        fab = self.fabrics[a]
        if a != tuning.COLLNET_DIRECT:
            # NCCL's nChannels x what a channel's link gives it: for a tree too (NCCL's
            # ratio 0.5 then halves it), where a node with children shares its HCA
            # among more flows
            return min(fab.bus_GBps, nvl)
        # an aggregation tree's links carry the data once each way: what the channels
        # carry is the algorithm bandwidth, NCCL's bus bandwidth that over its ratio for
        # CollNet (0.5)
        return min(fab.bus_GBps, nvl) / tuning.alg_ratio(a, pl.nranks, 1)

    # --- point to point ----------------------------------------------------------------

    def _p2p(self) -> None:
        pl = self.pl
        n = pl.nranks
        a, b = patterns.all_pairs(n) if self.op == "all-to-all" else patterns.next_pairs(n)
        self.p2p_nvlink_peers = 0
        for g in pl.groups:
            if len(g.ranks) > 1:
                self.p2p_nvlink_peers = max(
                    self.p2p_nvlink_peers, len(g.ranks) - 1 if self.op == "all-to-all" else 1
                )
        if pl.nnodes > 1:
            pat = patterns.peers(self.snap, pl, a, b)
            fab = carry(self.snap, pat, 1, self.adaptive)
            self.fabrics[-1] = fab
            if fab.dropped:
                raise InputError([Problem(self.op, fab.dropped)])

    # --- cost --------------------------------------------------------------------------

    def estimate(self, size: int) -> Estimate:
        """The collective of ``size`` bytes (nccl-tests' printed size)."""
        func = self.func
        if func is None:
            return self._estimate_p2p(size)
        pl = self.pl
        fi = tuning.FUNCS.index(func)
        steps = tuning.nsteps(fi, pl.nranks)
        choices = []
        for a in ALLOWED[func]:
            if a in self.unavailable:
                continue
            bus_simple = self._bus_simple(a)
            for p in range(3):
                if self.protos is not None and p not in self.protos:
                    continue
                if a in SIMPLE_ONLY and p != tuning.SIMPLE:
                    continue
                if a in SIMPLE_ONLY:
                    bus = bus_simple
                else:
                    bus = tuning.bus_bandwidth(
                        fi, a, p, bus_simple, self.nch, pl.nnodes, pl.compute_capability
                    )
                algbw = bus * tuning.alg_ratio(a, pl.nranks, steps)
                lat = tuning.latency(fi, a, p, pl.nranks, pl.nnodes, pl.nvlink)
                t = tuning.time_us(fi, a, p, size, lat, algbw, pl.nranks, pl.nnodes, self.nch)
                choices.append(Choice(a, p, t, bus))
        if not choices:
            raise InputError([Problem("collective", self._none_left())])
        best = min(choices, key=lambda c: c.time_us)  # the first of equals, as NCCL
        return self._result(size, best, choices)

    def _none_left(self) -> str:
        said = "; ".join(f"{tuning.ALGOS[a]}: {w}" for a, w in self.unavailable.items())
        return f"no algorithm can run {self.func} here ({said})"

    def _result(self, size: int, best: Choice, choices: list[Choice]) -> Estimate:
        pl = self.pl
        t = best.time_us if size else 0.0
        algbw = size / (t * 1e3) if t > 0 else 0.0
        factor = nccl_tests.bus_factor(self.binary, pl.nranks)
        ranked = sorted(choices, key=lambda c: c.time_us)
        nxt = ranked[1] if len(ranked) > 1 else None
        why = f"{tuning.ALGOS[best.algo]}/{tuning.PROTOS[best.proto]} {best.time_us:.1f} us"
        why += f", the fastest of {len(choices)}"
        if nxt is not None:
            why += (
                f" (next {tuning.ALGOS[nxt.algo]}/{tuning.PROTOS[nxt.proto]} {nxt.time_us:.1f} us)"
            )
        for a, w in self.unavailable.items():
            why += f"; {tuning.ALGOS[a]}: {w}"
        fab = self.fabrics.get(best.algo)
        flow_bytes = None
        if fab is not None:
            per_channel = size * self._edge_factor(best.algo) / self.nch
            flow_bytes = fab.pattern.share * per_channel
        return Estimate(
            self.op,
            size,
            pl.nranks,
            t,
            algbw,
            algbw * factor,
            tuning.ALGOS[best.algo],
            tuning.PROTOS[best.proto],
            why,
            self.nch,
            choices,
            fab,
            flow_bytes,
        )

    def _edge_factor(self, a: int) -> float:
        """Bytes each flow of a channel carries per byte of the collective, per
        channel's share: a ring edge carries the bus bytes; a tree or aggregation
        edge the data once each way."""
        if a != tuning.RING:
            return 1.0
        return nccl_tests.bus_factor(self.binary, self.pl.nranks)

    def _estimate_p2p(self, size: int) -> Estimate:
        pl = self.pl
        n = pl.nranks
        chunk = size / n if self.op == "all-to-all" else float(size)
        hw = tuning.HW_NET if pl.nnodes > 1 else tuning.HW_NVLINK
        lat = (
            tuning.BASE_LAT[tuning.RING][tuning.SIMPLE]
            + tuning.HW_LAT[hw][tuning.RING][tuning.SIMPLE]
        )
        t_nvl = (
            self.p2p_nvlink_peers * chunk / (self.nvlink_GBps * 1e3)
            if self.p2p_nvlink_peers
            else 0.0
        )
        fab = self.fabrics.get(-1)
        t_ib, flow_bytes = 0.0, None
        if fab is not None and len(fab.rate):
            flow_bytes = fab.pattern.share * chunk
            t_ib = float(np.max(flow_bytes / (fab.rate / 1e6)))
        t = lat + max(t_nvl, t_ib) if size and n > 1 else 0.0
        algbw = size / (t * 1e3) if t > 0 else 0.0
        factor = nccl_tests.bus_factor(self.binary, n)
        bound = "InfiniBand" if t_ib >= t_nvl else "NVLink"
        why = f"point to point, {len(fab.rate) if fab else 0} InfiniBand flow(s); {bound} bounds it"
        return Estimate(
            self.op, size, n, t, algbw, algbw * factor, "P2P", "Simple", why, 1, [], fab, flow_bytes
        )
