"""nccl-tests' ``*_perf`` binaries run on the model: their command line read as
nccl-tests reads it (src/common.cu, v2.13.4-v2.16.x: getopt_long's options and
``parsesize``), their ranks from the launcher's environment, and their table rendered
by :mod:`...formats.nccl_tests`.

Ranks are processes x threads (``-t``) x GPUs per thread (``-g``).  The processes come
from the launcher: Slurm's ``SLURM_NTASKS``/``SLURM_PROCID``, Open MPI's
``OMPI_COMM_WORLD_SIZE``/``OMPI_COMM_WORLD_RANK``, PMI's ``PMI_SIZE``/``PMI_RANK``;
else one per node.  Only rank 0's process prints, as in nccl-tests.  The nodes are
``--nodes``, else Slurm's ``SLURM_JOB_NODELIST``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from ....errors import InputError, Problem
from ....formats import nccl_tests

# (short, long, takes a value); src/common.cu longopts
OPTIONS = (
    ("t", "nthreads"),
    ("g", "ngpus"),
    ("b", "minbytes"),
    ("e", "maxbytes"),
    ("i", "stepbytes"),
    ("f", "stepfactor"),
    ("n", "iters"),
    ("m", "agg_iters"),
    ("w", "warmup_iters"),
    ("N", "run_cycles"),
    ("p", "parallel_init"),
    ("c", "check"),
    ("o", "op"),
    ("d", "datatype"),
    ("r", "root"),
    ("z", "blocking"),
    ("y", "stream_null"),
    ("T", "timeout"),
    ("G", "cudagraph"),
    ("C", "report_cputime"),
    ("a", "average"),
    ("R", "local_register"),
)
LONG = {long: short for short, long in OPTIONS}
SHORT = {short for short, _ in OPTIONS}
OPS = ("sum", "prod", "max", "min", "avg", "mulsum")  # src/common.cu test_opnames
_SIZE = re.compile(r"^(\d+)([A-Za-z]?)")


def _bad(where: str, what: str) -> InputError:
    return InputError([Problem(where, what)])


def parse_size(text: str, where: str) -> int:
    """nccl-tests' parsesize: a number with an optional K, M or G (powers of 1024)."""
    m = _SIZE.match(text.strip())
    if not m:
        raise _bad(where, f"invalid size {text!r}")
    n, unit = int(m.group(1)), m.group(2).upper()
    mult = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(unit)
    if mult is None:
        raise _bad(where, f"invalid size {text!r}: the unit is K, M or G")
    return n * mult


@dataclass
class Args:
    """A ``*_perf`` command line."""

    binary: str
    nthreads: int = 1
    ngpus: int = 1
    min_bytes: int = 32 << 20
    max_bytes: int = 32 << 20
    step_bytes: int = 1 << 20
    factor: int = 1
    iters: int = 20
    agg_iters: int = 1
    warmup: int = 5
    check: int = 1
    op: str = "sum"
    datatype: str = "float"
    root: int = 0
    graph: int = 0
    extra: dict = field(default_factory=dict)

    def header(self) -> nccl_tests.Header:
        return nccl_tests.Header(
            self.nthreads,
            self.ngpus,
            self.min_bytes,
            self.max_bytes,
            self.factor,
            self.step_bytes,
            self.warmup,
            self.iters,
            self.agg_iters,
            self.check,
            self.graph,
        )


def _int(text: str, where: str, lo: int = 0) -> int:
    try:
        v = int(text)
    except ValueError:
        raise _bad(where, f"want an integer, not {text!r}") from None
    if v < lo:
        raise _bad(where, f"want {lo} or more, not {v}")
    return v


def parse_args(argv: list[str]) -> Args:
    """``BINARY [options]`` as nccl-tests reads them."""
    if not argv:
        raise _bad("nccl-tests", "name a binary: " + ", ".join(nccl_tests.BINARIES))
    binary = os.path.basename(argv[0])
    if binary not in nccl_tests.BINARIES:
        raise _bad(
            "nccl-tests", f"unknown binary {binary!r}; one of: {', '.join(nccl_tests.BINARIES)}"
        )
    a = Args(binary)
    words = list(argv[1:])
    while words:
        w = words.pop(0)
        if w.startswith("--"):
            name, eq, value = w[2:].partition("=")
            short = LONG.get(name)
            if short is None:
                raise _bad(binary, f"unknown option {w!r}")
            if not eq:
                if not words:
                    raise _bad(binary, f"option {w!r} needs a value")
                value = words.pop(0)
        elif w.startswith("-") and len(w) >= 2 and w[1] in SHORT:
            short, value = w[1], w[2:]
            if not value:
                if not words:
                    raise _bad(binary, f"option -{short} needs a value")
                value = words.pop(0)
        else:
            raise _bad(binary, f"unknown option or argument {w!r}")
        _set(a, short, value)
    if a.min_bytes > a.max_bytes:
        raise _bad(binary, f"minBytes {a.min_bytes} is above maxBytes {a.max_bytes}")
    return a


def _choice(names) -> Callable[[str, str], str]:
    def read(value: str, where: str) -> str:
        if value not in names:
            raise _bad(where, f"unknown value {value!r}; one of: {', '.join(names)}")
        return value

    return read


def _count(lo: int) -> Callable[[str, str], int]:
    return lambda value, where: _int(value, where, lo)


# each option nccl-tests shows: the field it sets and how its value reads
SETTERS: dict[str, tuple[str, Callable[[str, str], object]]] = {
    "t": ("nthreads", _count(1)),
    "g": ("ngpus", _count(1)),
    "b": ("min_bytes", parse_size),
    "e": ("max_bytes", parse_size),
    "i": ("step_bytes", parse_size),
    "f": ("factor", _count(1)),
    "n": ("iters", _count(1)),
    "m": ("agg_iters", _count(1)),
    "w": ("warmup", _count(0)),
    "c": ("check", _count(0)),
    "o": ("op", _choice(OPS)),
    "d": ("datatype", _choice(tuple(nccl_tests.TYPES))),
    "r": ("root", _count(0)),
    "G": ("graph", _count(0)),
}


def _set(a: Args, short: str, value: str) -> None:
    where = f"{a.binary} -{short}"
    if short in SETTERS:
        name, read = SETTERS[short]
        setattr(a, name, read(value, where))
    else:  # taken and shown nowhere in the table
        a.extra[short] = value


@dataclass(frozen=True)
class Launch:
    """The job around the binary: its nodes, processes, and which one this is."""

    nodes: list[str]
    nprocs: int
    proc: int

    def procs_per_node(self) -> int:
        return self.nprocs // len(self.nodes)


_SIZE_VARS = ("SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
_RANK_VARS = ("SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK")


def launch(nodes: str | None, env: Mapping[str, str]) -> Launch:
    """The job's nodes (``nodes``, else Slurm's node list) and processes (the
    launcher's, else one per node)."""
    text = nodes or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not text:
        raise _bad("--nodes", "no nodes: give --nodes, or run under Slurm (SLURM_JOB_NODELIST)")
    from .placement import parse_nodes

    hosts = [h for h, _ in parse_nodes(text)]
    nprocs, proc = len(hosts), 0
    for var in _SIZE_VARS:
        if env.get(var):
            nprocs = _int(env[var], var, 1)
            break
    for var in _RANK_VARS:
        if env.get(var):
            proc = _int(env[var], var)
            break
    if nprocs % len(hosts):
        raise _bad("nccl-tests", f"{nprocs} processes do not spread evenly over {len(hosts)} nodes")
    if proc >= nprocs:
        raise _bad("nccl-tests", f"process {proc} of {nprocs}")
    return Launch(hosts, nprocs, proc)


MAX_ROWS = 10_000  # sizes of one run (nccl-tests has no bound; a table this long is a mistake)
MAX_BYTES = 1 << 50  # the largest size (1 PiB; a GPU holds a few hundred GB)


def sweep(a: Args) -> list[int]:
    """The sizes nccl-tests steps through."""
    if a.max_bytes > MAX_BYTES:
        raise _bad(f"{a.binary} -e", f"{a.max_bytes} bytes: at most {MAX_BYTES}")
    out: list[int] = []
    for s in nccl_tests.sizes(a.min_bytes, a.max_bytes, a.factor, a.step_bytes):
        if len(out) == MAX_ROWS:
            raise _bad(a.binary, f"more than {MAX_ROWS} sizes from -b, -e, -f and -i")
        out.append(s)
    return out


def gpus_per_node(a: Args, job: Launch) -> int:
    return job.procs_per_node() * a.nthreads * a.ngpus


def devices(a: Args, job: Launch, gpu_name: str, pid: int) -> list[nccl_tests.Device]:
    """The ``# Rank`` lines: rank r on node r // per node, its GPU r mod per node."""
    per = gpus_per_node(a, job)
    per_proc = a.nthreads * a.ngpus
    out = []
    for r in range(len(job.nodes) * per):
        local = r % per
        out.append(
            nccl_tests.Device(
                r,
                pid + r // per_proc,
                job.nodes[r // per],
                local,
                (0, 0x18 + 0x10 * local, 0),
                gpu_name,
            )
        )
    return out


def render(
    a: Args, job: Launch, times_us: list[float], nranks: int, gpu_name: str, pid: int
) -> str:
    """The table of a run whose rows took ``times_us`` (one per size of the sweep)."""
    rows = []
    for size, t in zip(sweep(a), times_us, strict=True):
        r = nccl_tests.row(a.binary, size, nranks, t, t, a.datatype, a.op, a.root)
        if not a.check:
            r = replace(
                r,
                out_of_place=replace(r.out_of_place, wrong=None),
                in_place=replace(r.in_place, wrong=None),
            )
        rows.append(r)
    return nccl_tests.render(a.header(), devices(a, job, gpu_name, pid), rows)
