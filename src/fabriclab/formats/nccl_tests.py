"""nccl-tests' output, as its ``*_perf`` binaries print it: the run's header, the devices,
the table of sizes with out-of-place and in-place time, algorithm and bus bandwidth,
and the trailer, rendered from a run's figures (and read back, for the tests).

The layout is nccl-tests' own "classic" one (NVIDIA/nccl-tests ``src/common.cu``, tags
v2.13.4 to v2.16.x: the printf formats of ``PRINT`` in ``run``, ``BenchTime`` and
``TimeTest``), which most published logs show and public parsers read (NVIDIA cloudai's
``nccl_test`` report strategies, microsoft/superbenchmark's ``cuda_nccl_bw_performance``,
Azure's ``azure_nccl_allreduce.nhc``).  The sizes, counts and bandwidths follow each
binary's ``GetCollByteCount`` and ``GetBw`` (``src/<op>.cu``; doc/PERFORMANCE.md):
algbw = size / time in GB/s (1e9 bytes), busbw = algbw times the op's factor.
"""

# The formats are nccl-tests' printf formats verbatim, applied with Python's printf-style
# % (the same conversions as C's), so that each can be checked against its source line.
# ruff: noqa: UP031

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

# binary -> (bus bandwidth factor kind, whether a reduction op is shown, whether a
# root is): src/<op>.cu's GetBw and RunTest (all_gather, alltoall and
# broadcast print "none" as redop; only broadcast and reduce have a root)
BINARIES: dict[str, tuple[str, bool, bool]] = {
    "all_reduce_perf": ("allreduce", True, False),
    "all_gather_perf": ("gather", False, False),
    "reduce_scatter_perf": ("gather", True, False),
    "alltoall_perf": ("gather", False, False),
    "broadcast_perf": ("one", False, True),
    "reduce_perf": ("one", True, True),
    "sendrecv_perf": ("one", True, False),
}
# nccl-tests' type names and sizes (common.cu test_typenames, wordSize)
TYPES = {
    "int8": 1,
    "uint8": 1,
    "int32": 4,
    "uint32": 4,
    "int64": 8,
    "uint64": 8,
    "half": 2,
    "float": 4,
    "double": 8,
    "bfloat16": 2,
}


def bus_factor(binary: str, nranks: int) -> float:
    """busbw / algbw of ``binary`` on ``nranks`` ranks (src/<op>.cu GetBw): 2(n-1)/n for
    all-reduce, (n-1)/n for all-gather, reduce-scatter and all-to-all, 1 otherwise."""
    kind = BINARIES[binary][0]
    if kind == "allreduce":
        return 2.0 * (nranks - 1) / nranks
    if kind == "gather":
        return (nranks - 1) / nranks
    return 1.0


def size_and_count(binary: str, size: int, nranks: int, type_: str = "float") -> tuple[int, int]:
    """The size (B) and count (elements) a row shows for the asked ``size``
    (GetCollByteCount): all-gather, reduce-scatter and all-to-all split it among the
    ranks, each rank's part a multiple of 16 bytes, and show the per-rank count."""
    elt = TYPES[type_]
    count = size // elt
    if BINARIES[binary][0] == "gather":
        base = (count // nranks) & ~(16 // elt - 1)
        return base * nranks * elt, base
    return count * elt, count


def sizes(min_bytes: int, max_bytes: int, factor: int = 1, step: int = 1 << 20) -> Iterator[int]:
    """The sizes swept (TimeTest): times ``factor`` when it is above 1, else plus ``step``."""
    size = min_bytes
    while size <= max_bytes:
        yield size
        size = size * factor if factor > 1 else size + step
        if size <= 0:
            return


@dataclass(frozen=True)
class Header:
    """The run's first line: ``-t``, ``-g``, ``-b``, ``-e``, ``-f``/``-i``, ``-w``,
    ``-n``, ``-m``, ``-c``, ``-G``."""

    nthread: int = 1
    ngpus: int = 1
    min_bytes: int = 33554432
    max_bytes: int = 33554432
    factor: int = 1
    step_bytes: int = 1048576
    warmup: int = 5
    iters: int = 20
    agg_iters: int = 1
    validation: int = 1
    graph: int = 0


@dataclass(frozen=True)
class Device:
    """One rank's line: ``#  Rank r Group g Pid p on host device d [pci] name``."""

    rank: int
    pid: int
    host: str
    device: int
    pci: tuple[int, int, int]  # domain, bus, device
    name: str
    group: int = 0


@dataclass(frozen=True)
class Timing:
    """One half of a row: the time (µs), algbw and busbw (GB/s), and the wrong elements
    (None: not checked, ``-c 0``)."""

    time_us: float
    algbw: float
    busbw: float
    wrong: int | None = 0


@dataclass(frozen=True)
class Row:
    size: int
    count: int
    type: str
    redop: str
    root: int
    out_of_place: Timing
    in_place: Timing


def timing(binary: str, size: int, nranks: int, time_us: float, wrong: int | None = 0) -> Timing:
    """A row half from its time: algbw = size / time, busbw by the op's factor."""
    algbw = size / 1e9 / (time_us / 1e6) if time_us > 0 else 0.0
    return Timing(time_us, algbw, algbw * bus_factor(binary, nranks), wrong)


def row(
    binary: str,
    size: int,
    nranks: int,
    out_us: float,
    in_us: float,
    type_: str = "float",
    op: str = "sum",
    root: int = 0,
) -> Row:
    """The row nccl-tests prints for the asked ``size`` timed at ``out_us`` out of place
    and ``in_us`` in place."""
    _, has_op, has_root = BINARIES[binary]
    shown, count = size_and_count(binary, size, nranks, type_)
    return Row(
        shown,
        count,
        type_,
        op if has_op else "none",
        root if has_root else -1,
        timing(binary, shown, nranks, out_us),
        timing(binary, shown, nranks, in_us),
    )


def _time(us: float) -> str:
    """BenchTime's time column: fewer decimals as it grows."""
    if us >= 10000.0:
        return "%7.0f" % us
    if us >= 100.0:
        return "%7.1f" % us
    return "%7.2f" % us


def _half(t: Timing) -> str:
    if t.wrong is None:
        return "  %7s  %6.2f  %6.2f  %5s" % (_time(t.time_us), t.algbw, t.busbw, "N/A")
    return "  %7s  %6.2f  %6.2f  %5g" % (_time(t.time_us), t.algbw, t.busbw, t.wrong)


def render(
    header: Header,
    devices: Iterable[Device],
    rows: Iterable[Row],
    errors: int = 0,
    avg_busbw: float | None = None,
) -> str:
    """The whole output of a run; ``avg_busbw`` (default: the mean of every busbw of the
    table, in place and out of place, as nccl-tests takes it)."""
    h = header
    step, kind = (h.factor, "factor") if h.factor > 1 else (h.step_bytes, "bytes")
    out = [
        "# nThread %d nGpus %d minBytes %d maxBytes %d step: %d(%s) warmup iters: %d "
        "iters: %d agg iters: %d validation: %d graph: %d\n"
        % (
            h.nthread,
            h.ngpus,
            h.min_bytes,
            h.max_bytes,
            step,
            kind,
            h.warmup,
            h.iters,
            h.agg_iters,
            h.validation,
            h.graph,
        ),
        "#\n",
        "# Using devices\n",
    ]
    for d in devices:
        out.append(
            "#  Rank %2d Group %2d Pid %6d on %10s device %2d [%04x:%02x:%02x] %s\n"
            % (d.rank, d.group, d.pid, d.host, d.device, *d.pci, d.name)
        )
    out.append("#\n")
    out.append(
        "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place"
        "          \n" % ("", "", "", "", "")
    )
    out.append(
        "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n"
        % (("size", "count", "type", "redop", "root") + ("time", "algbw", "busbw", "#wrong") * 2)
    )
    out.append(
        "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n"
        % (("(B)", "(elements)", "", "", "") + ("(us)", "(GB/s)", "(GB/s)", "") * 2)
    )
    busbws = []
    for r in rows:
        line = "%12d  %12d  %8s  %6s  %6s" % (r.size, r.count, r.type, r.redop, "%6i" % r.root)
        out.append(line + _half(r.out_of_place) + _half(r.in_place) + "\n")
        busbws += [r.out_of_place.busbw, r.in_place.busbw]
    if avg_busbw is None:
        avg_busbw = sum(busbws) / len(busbws) if busbws else 0.0
    out.append("# Out of bounds values : %d %s\n" % (errors, "FAILED" if errors else "OK"))
    out.append("# Avg bus bandwidth    : %g %s\n" % (avg_busbw, ""))
    out.append("#\n")
    out.append("\n")  # ncclGetLastError(): empty when nothing failed
    return "".join(out)


_ROW = re.compile(
    r"^\s*(\d+)\s+(\d+)\s+(\S+)\s+(\S+)\s+(-?\d+)"
    + r"\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)" * 2
    + r"\s*$"
)


def parse_rows(text: str) -> list[Row]:
    """The table's rows of an nccl-tests output (the figures as printed)."""
    rows = []
    for line in text.splitlines():
        m = _ROW.match(line)
        if m is None:
            continue
        g = m.groups()
        halves = [
            Timing(
                float(g[i]),
                float(g[i + 1]),
                float(g[i + 2]),
                None if g[i + 3] == "N/A" else int(g[i + 3]),
            )
            for i in (5, 9)
        ]
        rows.append(Row(int(g[0]), int(g[1]), g[2], g[3], int(g[4]), *halves))
    return rows
