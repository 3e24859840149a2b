"""The commands that time collectives: collective, nccl-tests."""

from __future__ import annotations

import os

import typer

from .common import (
    JsonOpt,
    NameOpt,
    TraysOpt,
    after_dashes,
    command,
    fabric_name,
    group,
    load_cluster,
    print_json,
    say,
    show,
    table,
    write,
)

PANEL = "Collectives"
MAX_APPLY = 1 << 20  # runs of each size put on the fabric (the admin op's bound)
ADMIN_SIZES = 64  # sizes in one admin request (its bound)
PROGRESS_TRAYS = 1024  # a spec this large is worked out with progress lines
commands = group("Collectives timed over the modelled fabric.", panel=PANEL)

SpecOpt = typer.Argument(
    None, help="A spec YAML file or a preset name (none: the running fabric, --name)."
)
OpOpt = typer.Option(
    ...,
    "--op",
    help="all-reduce, all-gather, reduce-scatter, all-to-all, broadcast, reduce or send-recv.",
)
SizeOpt = typer.Option(
    ..., "--size", help="Bytes, as nccl-tests takes them: 8, 64K, 1M, 8G (powers of 1024)."
)
NodesOpt = typer.Option(
    ...,
    "--nodes",
    help="The trays, a Slurm hostlist; an entry may end :GPUS (gb-r01-t01:0-1).",
)
GpusOpt = typer.Option(
    None, "--gpus-per-node", min=1, max=64, help="GPUs per tray (default: all of them)."
)
AlgoOpt = typer.Option("auto", "--algo", help="ring, tree, nvls, collnet or auto (NCCL's choice).")
ProtoOpt = typer.Option("auto", "--proto", help="simple, ll, ll128 or auto (NCCL's choice).")


def _estimates(spec: str | None, name: str | None, trays: int | None, request: dict) -> dict:
    """The answer to ``request`` (the admin op ``collective``'s fields) on a spec or on
    the running fabric."""
    if spec is None:
        from ..sim.run import admin

        fabric, sizes, docs = fabric_name(name), request["sizes"], []
        for k in range(0, len(sizes), ADMIN_SIZES):  # the admin op takes 64 sizes at once
            part = dict(request, sizes=sizes[k : k + ADMIN_SIZES], links=request["links"] and not k)
            answer = admin.request(fabric, {"op": "collective", **part})
            docs += answer["estimates"]
        return dict(answer, estimates=docs)
    if request.get("apply"):
        from ..errors import InputError, Problem

        raise InputError([Problem("--apply", "needs a running fabric: leave out SPEC")])
    from ..sim.fabric.datapaths import Snapshot
    from ..sim.live.collectives import run

    cluster = load_cluster(spec, trays)
    big = len(cluster.trays) >= PROGRESS_TRAYS
    if big:  # seconds of work at 8,192 trays: say what it is doing
        say(f"routing {len(cluster.trays)} trays' fabric as a subnet manager would ...")
    sim = run.routed_fabric(cluster)
    if big:
        say("estimating ...")
    req = run.Request(
        request["collective"],
        request["sizes"][0],
        request["nodes"],
        request.get("gpus_per_node"),
        request.get("algo", "auto"),
        request.get("proto", "auto"),
        request.get("env"),
    )
    _, docs = run.sweep(cluster, sim, Snapshot(sim), req, request["sizes"], request["links"])
    return {"estimates": docs}


def _size(text: str) -> int:
    from ..errors import InputError, Problem
    from ..sim.live.collectives.perf import MAX_BYTES, parse_size

    n = parse_size(text, "--size")
    if n > MAX_BYTES:
        raise InputError([Problem("--size", f"{n} bytes: at most {MAX_BYTES}")])
    return n


@command(commands)
def collective(
    spec: str | None = SpecOpt,
    op: str = OpOpt,
    size: str = SizeOpt,
    nodes: str = NodesOpt,
    gpus_per_node: int | None = GpusOpt,
    algo: str = AlgoOpt,
    proto: str = ProtoOpt,
    apply: bool = typer.Option(
        False, "--apply", help="Put its bytes on the running fabric as traffic-engine flows."
    ),
    trays: int | None = TraysOpt,
    name: str | None = NameOpt,
    json_out: bool = JsonOpt,
) -> None:
    """Estimate a collective on trays of a spec or of the running fabric: its time,
    algorithm and bus bandwidth (nccl-tests' definitions), NCCL's choice of algorithm
    and protocol and why, and the bytes on each InfiniBand port it loads.  NCCL_*
    variables in the environment act on it (NCCL_IB_HCA, NCCL_ALGO, NCCL_PROTO,
    NCCL_MIN_NCHANNELS, NCCL_MAX_NCHANNELS, NCCL_CROSS_NIC, NCCL_COLLNET_ENABLE).

    Example: fabriclab collective gb200-su --op all-reduce --size 1G --nodes 'gb-r0[1-2]-t01'
    """
    from ..sim.live.collectives.knobs import environment

    request = {
        "collective": op,
        "sizes": [_size(size)],
        "nodes": nodes,
        "gpus_per_node": gpus_per_node,
        "algo": algo,
        "proto": proto,
        "env": environment(os.environ),
        "links": True,
        "apply": 1 if apply else 0,
    }
    answer = _estimates(spec, name, trays, request)
    d = answer["estimates"][0]
    if json_out:
        print_json({**d, **({"flows": answer["flows"]} if "flows" in answer else {})})
        return
    show(
        f"{d['op']} of {d['size']} B on {d['ranks']} ranks in {d['nodes']} NVLink group(s), "
        f"{d['channels']} channel(s)"
    )
    show(
        f"time {d['time_s'] * 1e6:.1f} us, algbw {d['algbw_GBps']:.2f} GB/s, "
        f"busbw {d['busbw_GBps']:.2f} GB/s"
    )
    show(f"algorithm {d['algorithm']}, protocol {d['protocol']}: {d['why']}")
    links = d["links"]
    if links:
        rows = [
            (
                x["from"],
                x["to"] or "",
                str(x["bytes"]),
                f"{x['GBps']:.2f}",
                f"{x['capacity_GBps']:.2f}",
            )
            for x in links
        ]
        cols = ("from", "to", "bytes", "GB/s", "capacity GB/s")
        table(f"InfiniBand ports loaded ({len(links)})", cols, rows, right=cols[2:])
    if "flows" in answer:
        f = answer["flows"]
        say(f"applied: {f['count']} flow(s) from id {f['first']}")


@command(commands, "nccl-tests")
def nccl_tests(
    words: list[str] = typer.Argument(
        ..., help="[SPEC] then, after --, a *_perf binary's name and its options."
    ),
    nodes: str | None = typer.Option(
        None, "--nodes", help="The trays (default: Slurm's SLURM_JOB_NODELIST, else --on)."
    ),
    on: str | None = typer.Option(
        None, "--on", help="The tray the binary runs on (its node list when there is no other)."
    ),
    apply: bool = typer.Option(
        False, "--apply", help="Put each row's bytes on the running fabric (warmup and iterations)."
    ),
    trays: int | None = TraysOpt,
    name: str | None = NameOpt,
) -> None:
    """Print what nccl-tests' all_reduce_perf, all_gather_perf, ... print, timed on the
    model: the header, each rank's line, the out-of-place and in-place table and the
    average bus bandwidth.  NCCL_* variables in the environment act on it; under Slurm
    or mpirun only process 0 prints.

    Example: fabriclab nccl-tests gb200-su --nodes 'gb-r0[1-2]-t01' -- all_reduce_perf -b 8 -e 8G -f 2 -g 4
    """
    from ..formats import nccl_tests as fmt
    from ..sim.live.collectives import perf
    from ..sim.live.collectives.estimate import OP_OF_BINARY
    from ..sim.live.collectives.knobs import environment

    words = after_dashes(words)
    spec = None
    if words and os.path.basename(words[0]) not in fmt.BINARIES:
        spec, words = words[0], after_dashes(words[1:])
    args = perf.parse_args(words)
    job = perf.launch(nodes or (None if os.environ.get("SLURM_JOB_NODELIST") else on), os.environ)
    per = perf.gpus_per_node(args, job)
    nranks = per * len(job.nodes)
    sizes = [fmt.size_and_count(args.binary, s, nranks, args.datatype)[0] for s in perf.sweep(args)]
    runs = (args.warmup + args.iters * args.agg_iters) * 2 if apply else 0
    if runs > MAX_APPLY:
        from ..errors import InputError, Problem

        raise InputError([Problem("--apply", f"{runs} runs of each size: at most {MAX_APPLY}")])
    request = {
        "collective": OP_OF_BINARY[args.binary],
        "sizes": sizes or [0],
        "nodes": ",".join(job.nodes),
        "gpus_per_node": per,
        "env": environment(os.environ),
        "links": False,
        "apply": runs,
    }
    answer = _estimates(spec, name, trays, request)
    if job.proc != 0:
        return
    times = [d["time_s"] * 1e6 for d in answer["estimates"]][: len(sizes)]
    gpu = answer["estimates"][0]["gpu"]
    write(perf.render(args, job, times, nranks, gpu, os.getpid()), None)
