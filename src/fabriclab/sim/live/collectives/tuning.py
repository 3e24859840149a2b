"""NCCL's cost model: its latency and bandwidth constants and the formulas that turn a
collective, an algorithm and a protocol into a time (NCCL 2.30.7, src/graph/tuning.cc
``ncclTunerConstantsDefaults``, ``ncclTopoTuneModel`` and ``ncclTopoGetAlgoTime``).

What NCCL takes from its topology search (the bandwidth per channel) fabriclab takes
from the fabric (:mod:`.estimate`); the rest is NCCL's arithmetic, kept as NCCL writes
it: a bus bandwidth per algorithm and protocol, NCCL's corrections of it, its
conversion to an algorithm bandwidth, and a latency per step of the algorithm.
Times are in microseconds and bandwidths in GB/s (1e9 bytes), as in NCCL.
"""

from __future__ import annotations

import math

# NCCL's algorithm and protocol names (src/init.cc ncclAlgoStr, ncclProtoStr), the
# indices of its tables
TREE, RING, COLLNET_DIRECT, COLLNET_CHAIN, NVLS, NVLS_TREE, PAT = range(7)
ALGOS = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
LL, LL128, SIMPLE = range(3)
PROTOS = ("LL", "LL128", "Simple")
# NCCL's collectives (src/init.cc ncclFuncStr)
FUNCS = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")
HW_NVLINK, HW_PCI, HW_NET = range(3)

# baseLatencies[algo][proto] (us)
BASE_LAT = (
    (6.8, 14.0, 8.4),  # Tree
    (6.6, 14.0, 8.4),  # Ring
    (0.0, 0.0, 0.0),  # CollNetDirect
    (0.0, 0.0, 0.0),  # CollNetChain
    (0.0, 0.0, 0.0),  # NVLS
    (0.0, 0.0, 0.0),  # NVLSTree
    (8.0, 8.0, 8.0),  # PAT
)
# hwLatencies[hw][algo][proto] (us)
HW_LAT = (
    (  # NVLink
        (0.6, 1.25, 4.0),
        (0.6, 1.9, 3.4),
        (0.0, 0.0, 3.7),
        (0.0, 0.0, 2.8),
        (0.0, 0.0, 25.0),
        (0.0, 0.0, 25.0),
        (0.0, 0.0, 4.0),
    ),
    (  # PCI
        (1.0, 1.9, 4.0),
        (1.0, 2.5, 5.7),
        (0.0, 0.0, 3.7),
        (0.0, 0.0, 2.8),
        (0.0, 0.0, 0.0),
        (0.0, 0.0, 0.0),
        (0.0, 0.0, 4.0),
    ),
    (  # network
        (5.0, 8.5, 14.0),
        (2.7, 4.0, 14.0),
        (0.0, 0.0, 31.0),
        (0.0, 0.0, 30.0),
        (0.0, 0.0, 18.0),
        (0.0, 0.0, 20.9),
        (0.0, 0.0, 14.0),
    ),
)
# by compute capability: Volta, Ampere, Hopper, Blackwell; then by nodes 1, 2, >2
LL_MAX_BW = ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (141.0, 45.0, 35.0), (282.0, 90.0, 70.0))
PER_CH_MAX_RING_LL128_BW = ((20.0,) * 3, (20.0,) * 3, (36.7,) * 3, (40.0,) * 3)
PER_CH_MAX_TREE_LL128_BW = ((20.0,) * 3, (20.0,) * 3, (36.7, 36.7, 29.0), (55.6, 31.67, 20.0))
PER_CH_MAX_TREE_BW = (
    (26.5, 18.5, 10.0),
    (24.0, 23.6, 17.8),
    (38.7, 41.4, 36.0),
    (70.0, 42.8, 24.0),
)
NVLS_EFFICIENCY = (0.0, 0.0, 0.85, 0.74)
NET_OVERHEAD = 1.0  # us, getNetOverhead on x86 Intel and other CPUs (AMD: 2.0)
COLLNET_ARITY_LAT = 0.4  # us per local rank, "arity serialization latency"
# treeCorrectionFactor[proto][log2(nBytes / 64)], for tree all-reduce of 64 B to 512 MB
# fmt: off
TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.7, 0.7, 0.7, 0.7, 0.6, 0.5,
     0.4, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.0, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.8, 0.8, 0.7, 0.6, 0.6,
     0.6, 0.6, 0.6, 0.6, 0.8, 0.9, 0.9, 0.9, 0.9, 1.0, 1.0, 1.0),
    (0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.8, 0.7, 0.6, 0.6, 0.5,
     0.5, 0.5, 0.5, 0.6, 0.7, 0.8, 0.7, 0.7, 0.8, 0.9, 0.9, 0.9),
)
# fmt: on
RING_PLATEAU = 1.4  # Simple ring all-reduce over nodes, compute capability 8.0 and up


def cc_index(compute_capability: int) -> int:
    """The row of the tables by compute capability (Volta, Ampere, Hopper, Blackwell)."""
    if compute_capability >= 100:
        return 3
    if compute_capability >= 90:
        return 2
    return 1 if compute_capability >= 80 else 0


def log2i(n: int) -> int:
    """NCCL's log2i: the floor of log2, 0 for n below 1."""
    return n.bit_length() - 1 if n > 0 else 0


def nsteps(func: int, nranks: int) -> int:
    """The steps of a ring: 2(n-1) for all-reduce, n-1 for all-gather and
    reduce-scatter, n for broadcast and reduce."""
    if func == FUNCS.index("AllReduce"):
        return 2 * (nranks - 1)
    if func in (FUNCS.index("AllGather"), FUNCS.index("ReduceScatter")):
        return nranks - 1
    return nranks


def bus_bandwidth(
    func: int, algo: int, proto: int, bw: float, nchannels: int, nnodes: int, cc: int
) -> float:
    """NCCL's bus bandwidth of ``algo``/``proto`` (GB/s) from the Simple bus bandwidth
    the channels carry together, ``bw`` (NCCL: nChannels x the channel's bandwidth),
    with NCCL's protocol and algorithm corrections and per-channel caps."""
    row, col = cc_index(cc), min(nnodes, 3) - 1
    ll_max = LL_MAX_BW[row][col] if nnodes > 1 else LL_MAX_BW[row][0]
    bus = bw
    if algo == RING and proto == LL:
        bus = min(ll_max, bus * 0.5)
    if algo == RING and proto == LL128:
        bus = min(bus * 0.92, nchannels * PER_CH_MAX_RING_LL128_BW[row][col])
    if algo == TREE and func == FUNCS.index("AllReduce"):
        bus = min(bus * 0.92, nchannels * PER_CH_MAX_TREE_BW[row][col])
    if algo == TREE and proto == LL:
        bus = min(bus / 3.8, ll_max)
    if algo == TREE and proto == LL128:
        bus = min(
            bus * (7.0 / 9.0 if nnodes == 1 else 120.0 / 128.0),
            nchannels * PER_CH_MAX_TREE_LL128_BW[row][col],
        )
    return bus


def alg_ratio(algo: int, nranks: int, steps: int) -> float:
    """NCCL's bus-to-algorithm bandwidth ratio: n/nsteps for ring and NVLS, 0.5 for
    the others."""
    return nranks / steps if algo in (RING, NVLS, NVLS_TREE) else 0.5


def latency(func: int, algo: int, proto: int, nranks: int, nnodes: int, nvlink: bool) -> float:
    """NCCL's latency (us) of one operation of ``func`` by ``algo``/``proto`` over
    ``nranks`` ranks on ``nnodes`` nodes, the ranks of a node joined by NVLink or PCI."""
    ppn = nranks / nnodes
    intra_hw = HW_NVLINK if nvlink else HW_PCI
    hw = intra_hw if nnodes == 1 else HW_NET
    lat = BASE_LAT[algo][proto]
    intra = HW_LAT[intra_hw][algo][proto]
    inter = HW_LAT[HW_NET][TREE if ppn == 1 else algo][proto]
    steps = nsteps(func, nranks)
    if algo == RING:
        if func in (FUNCS.index("Reduce"), FUNCS.index("Broadcast")):
            step = HW_LAT[hw][TREE if proto == SIMPLE else RING][proto]
            return lat + steps * step
        overhead = (NET_OVERHEAD * (3 if proto == SIMPLE else 1)) if nnodes > 1 else 0.0
        intra = max(intra, overhead)
        inter_steps = (
            0 if nnodes == 1 else (2 if func == FUNCS.index("AllReduce") else 1) * (nnodes - 1)
        )
        return lat + (steps - inter_steps) * intra + inter_steps * inter
    local = int(ppn)
    if algo == TREE:
        return lat + 2 * ((local - 1) * intra + log2i(nnodes) * inter)
    if algo == COLLNET_DIRECT:
        return lat + 2 * (min(1, local - 1) * intra + (local - 1) * COLLNET_ARITY_LAT) + inter
    if algo == COLLNET_CHAIN:
        return lat + 2 * (local - 1) * intra + inter
    if algo == NVLS:
        return intra + (inter if nnodes > 1 else 0.0)
    if algo == NVLS_TREE:
        return lat + intra + 2 * log2i(nnodes) * inter
    return lat + log2i(nnodes) * (inter / 3.5) + nranks * 2.8  # PAT


def time_us(
    func: int,
    algo: int,
    proto: int,
    nbytes: int,
    lat: float,
    algbw: float,
    nranks: int,
    nnodes: int,
    nchannels: int,
) -> float:
    """``ncclTopoGetAlgoTime``: latency plus bytes over the algorithm bandwidth, with
    the tree correction of all-reduce sizes and the ring's plateau over nodes; inf
    when the algorithm carries nothing."""
    if algbw <= 0:
        return math.inf
    bw = algbw
    log_size = log2i(nbytes >> 6)
    if (
        algo == TREE
        and func == FUNCS.index("AllReduce")
        and 0 <= log_size < len(TREE_CORRECTION[0])
    ):
        bw *= TREE_CORRECTION[proto][log_size]
    if (
        algo == RING
        and proto == SIMPLE
        and nnodes > 1
        and func == FUNCS.index("AllReduce")
        and nbytes // (nchannels * nranks) >= 64
    ):
        lat *= RING_PLATEAU
    return lat + nbytes / (1000 * bw)
