"""The ``fabriclab`` command: a thin layer over spec → model → formats.

Every error a user can cause is printed as ``error: <where>: <what>`` lines on stderr
with exit status 2; tracebacks are only shown with FABRICLAB_DEBUG=1.
"""

from __future__ import annotations

import os
import sys
from enum import Enum
from pathlib import Path

import typer
import yaml
from rich.console import Console
from rich.table import Table

from .errors import FabriclabError, InputError, Problem, SpecError, shown
from .formats import ibnetdiscover, ibsim_net, nvidia_smi, rdma_core
from .limits import MAX_TRAYS
from .model.build import build
from .model.cluster import Cluster
from .model.to_spec import spec_from_fabric
from .sim.wire.admission import DEFAULT_MAX_CLIENTS
from .spec.load import load_spec, locate, preset_names

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Emulated GPU-cluster networks: NVLink domains and an InfiniBand fabric, in the "
    "real tools' formats.",
)
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

TraysOpt = typer.Option(
    None, "--trays", min=1, max=MAX_TRAYS, help="Scale the spec to this many trays."
)


def _cluster(spec: str, trays: int | None = None) -> Cluster:
    s = load_spec(spec, trays=trays)
    try:
        return build(s)
    except SpecError as e:
        raise locate(s, e) from None


def _warn(problems: list[Problem], dropped: int = 0) -> None:
    """Warnings on stderr: the first few, then how many more (see errors.shown)."""
    for line in shown(problems, "warning", dropped):
        err.print(line, markup=False)


def _say(line: str) -> None:
    """A line for the user on stderr (progress, warnings)."""
    err.print(line, markup=False)


def _write(text: str, output: Path | None) -> None:
    if output is None or str(output) == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    try:
        output.write_text(text)
    except OSError as e:
        raise InputError([Problem(str(output), f"cannot write: {e.strerror}")]) from None


def _now() -> float | None:
    """SOURCE_DATE_EPOCH pins the header timestamp, for reproducible output."""
    v = os.environ.get("SOURCE_DATE_EPOCH")
    if v is None:
        return None
    # reproducible-builds.org: "an integer number of seconds since the epoch"; bounded to
    # the years ctime() can print (up to 9999) before it is used
    s = v.strip()
    if not (s.isascii() and s.isdigit() and len(s) <= 12 and int(s) <= 253402300799):
        raise InputError(
            [
                Problem(
                    "SOURCE_DATE_EPOCH",
                    f"not a number of seconds since 1970 (up to the year 9999): {v[:40]!r}",
                )
            ]
        )
    return float(s)


@app.command()
def presets() -> None:
    """List the built-in specs."""
    table = Table(title="fabriclab presets")
    for col in ("preset", "description", "trays", "GPUs", "HCAs", "switches", "tiers"):
        table.add_column(col, justify="left" if col in ("preset", "description") else "right")
    for name in preset_names():
        spec = load_spec(name)
        c = build(spec)
        table.add_row(
            name,
            spec.description,
            str(len(c.trays)),
            str(sum(len(t.gpus) for t in c.trays)),
            str(sum(len(t.hcas) for t in c.trays)),
            str(len(c.fabric.switches())),
            str(len(c.tiers())),
        )
    out.print(table)


@app.command()
def validate(
    spec: str = typer.Argument(..., help="A spec YAML file or a preset name."),
    trays: int | None = TraysOpt,
) -> None:
    """Check a spec; exit 0 when valid, 2 with one error line per problem."""
    c = _cluster(spec, trays)
    f = c.fabric
    out.print(
        f"ok: {c.name}: {len(c.trays)} trays, {len(f.switches())} switches, "
        f"{len(f.cas())} CAs, {f.link_count()} links"
    )


@app.command()
def inspect(
    spec: str = typer.Argument(..., help="A spec YAML file or a preset name."),
    trays: int | None = TraysOpt,
) -> None:
    """Summarize a cluster: trays, GPUs, HCAs, switch tiers, links, NVLink domains."""
    c = _cluster(spec, trays)
    f = c.fabric
    gpus = sum(len(t.gpus) for t in c.trays)
    hcas = sum(len(t.hcas) for t in c.trays)
    summary = Table(
        title=f"{c.name}: {c.description}" if c.description else c.name, show_header=False
    )
    summary.add_column("what")
    summary.add_column("count", justify="right")
    summary.add_row("trays", str(len(c.trays)))
    summary.add_row("GPUs", str(gpus))
    summary.add_row("HCAs (tray)", str(hcas))
    other = len(f.cas()) - hcas
    if other:
        summary.add_row("other CAs", str(other))
    summary.add_row("switches", str(len(f.switches())))
    summary.add_row("links", str(f.link_count()))
    summary.add_row("NVLink domains", str(len(c.domains)))
    out.print(summary)

    tiers = Table(title="switch tiers")
    for col in ("tier", "role", "switches", "links down", "links up", "oversubscription"):
        tiers.add_column(col, justify="right" if col not in ("role",) else "left")
    for t in c.tiers():
        ratio = f"{t.oversubscription:g}:1" if t.oversubscription else "-"
        tiers.add_row(str(t.tier), t.role, str(t.switches), str(t.down), str(t.up), ratio)
    out.print(tiers)

    rates_seen: dict[str, int] = {}
    for a, _ in f.links():
        k = f"{a.width.token}{a.speed.token}"
        rates_seen[k] = rates_seen.get(k, 0) + 1
    if rates_seen:
        lr = Table(title="link rates")
        lr.add_column("rate")
        lr.add_column("links", justify="right")
        for k, v in sorted(rates_seen.items()):
            lr.add_row(k, str(v))
        out.print(lr)

    if c.domains:
        dom = Table(title="NVLink domains")
        for col in ("domain", "cluster UUID", "trays", "GPUs", "clique", "partitions"):
            dom.add_column(col, justify="right" if col in ("trays", "GPUs", "clique") else "left")
        shown = c.domains if len(c.domains) <= 20 else c.domains[:20]
        for d in shown:
            parts = ", ".join(f"{pid} ({len(g)} GPUs)" for pid, g in d.partitions.items()) or "-"
            dom.add_row(
                d.name,
                d.cluster_uuid,
                str(len(d.trays)),
                str(d.gpu_count),
                str(d.clique) if d.default_partition else "0",
                parts,
            )
        if len(c.domains) > 20:
            dom.add_row(f"… {len(c.domains) - 20} more", "", "", "", "", "")
        out.print(dom)


class RenderFormat(str, Enum):
    ibnetdiscover = "ibnetdiscover"
    ibnetdiscover_ports = "ibnetdiscover-ports"
    ibsim_net = "ibsim-net"
    nvidia_smi = "nvidia-smi"


class RdmaCore(str, Enum):
    """The rdma-core releases whose output the renderers can follow (formats.rdma_core)."""

    v44 = "44"
    v56 = "56"


assert tuple(int(r.value) for r in RdmaCore) == rdma_core.RELEASES


@app.command()
def render(
    spec: str = typer.Argument(..., help="A spec YAML file or a preset name."),
    format: RenderFormat = typer.Argument(..., help="Which tool's output to produce."),
    from_: str | None = typer.Option(
        None,
        "--from",
        help="Run as if on this tray (HOST, HOST:HCA[:PORT]) or CA; default: the first tray.",
    ),
    output: Path | None = typer.Option(
        None, "-o", "--output", help="Write here instead of stdout."
    ),
    max_hops: bool = typer.Option(
        False, "-m", "--max-hops", help="ibnetdiscover -m: report hops and MADs."
    ),
    trays: int | None = TraysOpt,
    rdma_core_release: RdmaCore | None = typer.Option(
        None,
        "--rdma-core",
        help="ibnetdiscover: print as this rdma-core release does (44: Debian 12, 56: Debian "
        "13; they differ on XDR links); default: the installed one's.",
    ),
    tool_args: list[str] | None = typer.Argument(
        None,
        help="After --: the tool's own arguments (nvidia-smi: --query-gpu=… --format=csv[,noheader], or -q).",
    ),
) -> None:
    """Print what a real tool would print for this fabric."""
    c = _cluster(spec, trays)
    if format == RenderFormat.ibsim_net:
        _write(ibsim_net.render(c.fabric, title=c.name), output)
        return
    if format == RenderFormat.nvidia_smi:
        host = (from_ or c.trays[0].host).split(":")[0].split("/")[0] if c.trays else None
        tray = c.tray(host) if host else None
        if tray is None:
            raise InputError([Problem("--from", f"no tray {host!r} in this cluster")])
        _write(nvidia_smi.render(tray, tool_args or []), output)
        return
    port, problem = c.locate(from_)
    if port is None:
        raise InputError([Problem("--from", problem or "no such node")])
    release = rdma_core.release(int(rdma_core_release.value) if rdma_core_release else None)
    if format == RenderFormat.ibnetdiscover:
        text = ibnetdiscover.render(
            c.fabric, port, now=_now(), report_max_hops=max_hops, rdma_core=release
        )
    else:
        text = ibnetdiscover.render_ports(c.fabric, port, rdma_core=release)
    _write(text, output)


class Engine(str, Enum):
    slurm_tree = "slurm-tree"
    slurm_block = "slurm-block"
    slurm_yaml = "slurm-yaml"
    k8s_labels = "k8s-labels"
    kueue = "kueue"
    kwok = "kwok"


@app.command()
def topology(
    spec: str | None = typer.Argument(None, help="A spec or preset (or use --ibnetdiscover)."),
    engine: Engine = typer.Option(Engine.slurm_tree, "--engine", "-e", help="What to produce."),
    ib_files: list[Path] | None = typer.Option(
        None, "--ibnetdiscover", help="ibnetdiscover output of a real cluster (repeatable)."
    ),
    smi_file: Path | None = typer.Option(
        None, "--nvidia-smi", help="pdsh-prefixed nvidia-smi answers: 'host: <uuid>, <clique>'."
    ),
    nodes: str | None = typer.Option(
        None, "--nodes", help="The scheduler's nodes: a file or a hostlist."
    ),
    compat: str | None = typer.Option(
        None, "--compat", help="'topograph': byte-identical to topograph, quirks included."
    ),
    names: bool = typer.Option(
        False, "--names", help="Switch names (LAB-IBLEAF-01) instead of ids."
    ),
    block_sizes: str | None = typer.Option(
        None, "--block-sizes", help="slurm-block: e.g. 18,36,72 (default: inferred)."
    ),
    block_name: str | None = typer.Option(
        None, "--block-name", help="slurm-block: REGEXP=FORMAT, e.g. '^gb-r([0-9]+)=rack${1}'."
    ),
    topologies: Path | None = typer.Option(
        None, "--topologies", help="slurm-yaml: YAML of named topologies."
    ),
    skeleton: bool = typer.Option(False, "--skeleton", help="Slurm output without node lists."),
    label_format: str = typer.Option("json", "--format", help="k8s-labels: json or script."),
    output: Path | None = typer.Option(
        None, "-o", "--output", help="Write here instead of stdout."
    ),
    trays: int | None = TraysOpt,
    live: str | None = typer.Option(
        None,
        "--name",
        "-n",
        help="A running fabric ('fabriclab up'): its links, switches, trays and NVLink "
        "faults as they are now (its ibnetdiscover and nvidia-smi answers).",
    ),
    live_from: str | None = typer.Option(
        None, "--from", help="With --name: the tray ibnetdiscover runs on (default: the first up)."
    ),
) -> None:
    """Scheduler topology (Slurm, Kubernetes labels, Kueue, KWOK) from a spec, a real
    cluster's ibnetdiscover and nvidia-smi output, or a running fabric (--name).  Exit 0:
    complete; 1: produced, but something was left out (see the warnings); 2: nothing
    could be produced."""
    import tempfile

    from .topology.command import topology_command

    ib_paths = [str(p) for p in ib_files or []]
    smi_path = str(smi_file) if smi_file else None
    tmp = None
    if live is not None:
        if spec or ib_paths or smi_path:
            raise InputError(
                [
                    Problem(
                        "--name",
                        "reads the running fabric: give no spec, --ibnetdiscover "
                        "or --nvidia-smi with it",
                    )
                ]
            )
        from .sim.run import admin

        views = admin.request(live, {"op": "topology-inputs", "from": live_from})
        tmp = tempfile.TemporaryDirectory(prefix="fabriclab-topology-")
        ib_path, smi_live = (
            Path(tmp.name) / f"{live}.ibnetdiscover",
            Path(tmp.name) / f"{live}.nvidia-smi",
        )
        ib_path.write_text(views["ibnetdiscover"])
        smi_live.write_text(views["nvidia_smi"])
        ib_paths, smi_path = [str(ib_path)], str(smi_live)
    elif live_from is not None:
        raise InputError([Problem("--from", "goes with --name (a running fabric)")])
    text, report = topology_command(
        spec=spec,
        engine=engine.value,
        ib_files=ib_paths,
        smi_file=smi_path,
        nodes=nodes,
        compat=compat,
        names=names,
        block_sizes=block_sizes,
        block_name=block_name,
        topologies=str(topologies) if topologies else None,
        skeleton=skeleton,
        label_format=label_format,
        trays=trays,
        cluster_loader=_cluster,
    )
    if tmp is not None:
        tmp.cleanup()
    _warn(report.problems)
    _write(text, output)
    if report.left_out:
        raise typer.Exit(1)


@app.command("serve-topology")
def serve_topology(
    spec: str | None = typer.Argument(
        None, help="A spec or preset to answer for (or --ibnetdiscover)."
    ),
    ib_files: list[Path] | None = typer.Option(
        None, "--ibnetdiscover", help="ibnetdiscover output (repeatable)."
    ),
    smi_file: Path | None = typer.Option(
        None, "--nvidia-smi", help="pdsh-prefixed nvidia-smi answers."
    ),
    compat: str | None = typer.Option(
        None, "--compat", help="'topograph': answer exactly as topograph."
    ),
    names: bool = typer.Option(False, "--names", help="Switch names instead of ids."),
    models_dir: Path | None = typer.Option(
        None, "--models-dir", help="topograph simulation models, for the test and *-sim providers."
    ),
    host: str = typer.Option(
        "127.0.0.1",
        "--host",
        help="Address to listen on; any but a loopback address needs a token.",
    ),
    port: int = typer.Option(49021, "--port", min=1, max=65535),
    token: str | None = typer.Option(
        None,
        "--token",
        envvar="FABRICLAB_TOPOLOGY_TOKEN",
        show_envvar=True,
        help="Clients must send 'Authorization: Bearer "
        "TOKEN' (prefer the environment variable: a command line is "
        "visible to every local user).",
    ),
    delay: float = typer.Option(
        2.0, "--aggregation-delay", help="Seconds to wait for repeats of a request."
    ),
    trays: int | None = TraysOpt,
) -> None:
    """Serve topograph's HTTP API (/v1/generate, /v1/topology, /v1/lookup, /healthz)."""
    from .topology import server
    from .topology.command import given_inputs, local_provider

    if compat not in (None, "topograph"):
        raise InputError([Problem("--compat", "the one compatibility mode is 'topograph'")])
    token = token or None
    if token is None and not server.is_loopback(host):
        raise InputError(
            [
                Problem(
                    "--host",
                    f"{host} is not a loopback address: the API would be open to "
                    "the network; give a token (FABRICLAB_TOPOLOGY_TOKEN or --token)",
                )
            ]
        )
    if not 0 <= delay <= 3600:
        raise InputError([Problem("--aggregation-delay", "must be 0 to 3600 seconds")])
    inputs = given_inputs(
        spec, [str(p) for p in ib_files or []], str(smi_file) if smi_file else None, trays, _cluster
    )
    local = None
    if inputs is not None:
        _warn(inputs.report.problems)
        local = local_provider(inputs, compat=compat == "topograph", names=names)
    service = server.TopologyService(local, str(models_dir) if models_dir else None, delay)
    err.print(
        f"fabriclab topology API on http://{host}:{port}"
        + (" (clients must send the bearer token)" if token else ""),
        markup=False,
    )
    server.serve(service, host, port, token)


NameOpt = typer.Option(
    "sim",
    "--name",
    "-n",
    help="The fabric's name: the IBSIM_SOCKNAME tools use to reach it (ibsim's default is 'sim').",
)
ViaOpt = typer.Option(
    "auto",
    "--via",
    help="How the tool attaches: hostlib (fabriclab's host library: a tray's HCAs), "
    "umad2sim (Debian's libumad2sim: any port, remote fabrics), auto (hostlib on a tray "
    "of a local fabric).",
)


@app.command()
def up(
    spec: str = typer.Argument(..., help="A spec YAML file or a preset name."),
    name: str = NameOpt,
    detach: bool = typer.Option(
        False, "--detach", "-d", help="Run in the background; 'fabriclab down' stops it."
    ),
    listen: str | None = typer.Option(
        None,
        "--listen",
        help="Remote mode: serve UDP on "
        "[HOST:]PORT (tools set IBSIM_SERVER_NAME/PORT); "
        "a non-loopback HOST needs --allow.",
    ),
    allow: str | None = typer.Option(
        None,
        "--allow",
        metavar="NETWORK[,…]",
        help="Remote mode: the networks "
        "that may attach, NETWORK[,NETWORK…] (CIDR); others "
        "are ignored.  Default: loopback.",
    ),
    allow_user: list[str] | None = typer.Option(
        None,
        "--allow-user",
        metavar="USER",
        help="Users (names or uids, repeatable) whose tools may attach besides your own.",
    ),
    max_clients: int = typer.Option(
        DEFAULT_MAX_CLIENTS,
        "--max-clients",
        min=1,
        help="At most this many tools attached at once.",
    ),
    sm: bool = typer.Option(False, "--sm", help="Also run the real OpenSM on the fabric."),
    sm_at: str | None = typer.Option(
        None,
        "--sm-at",
        help="Where OpenSM runs (a tray, HOST:HCA, CA or switch); default: the first tray.",
    ),
    sm_via: str = typer.Option(
        "auto", "--sm-via", help="How OpenSM attaches (as 'exec --via'; auto: hostlib on a tray)."
    ),
    verbose: int = typer.Option(
        0, "--verbose", "-v", count=True, help="Log clients (-v), and every routing decision (-vv)."
    ),
    trays: int | None = TraysOpt,
    cold: bool = typer.Option(
        False, "--cold", help="Power on with no LIDs (0) until an SM assigns them."
    ),
    swap: list[str] | None = typer.Option(
        None, "--swap", metavar="PORT,PORT", help="Serve these two cables' far ends swapped."
    ),
    virtual_clock: bool = typer.Option(
        False,
        "--virtual-clock",
        help="Time moves only by 'fabriclab clock advance' (every counter exact).",
    ),
    resume: bool = typer.Option(
        False,
        "--resume",
        help="Bring back the faults, scenarios and counters the fabric had (its journal).",
    ),
) -> None:
    """Serve a fabric to the real tools: OpenSM and infiniband-diags run unmodified
    against it through Debian's libumad2sim (see 'fabriclab exec')."""
    from .sim.run import launcher

    launcher.up(
        launcher.UpRequest(
            spec=spec,
            name=name,
            trays=trays,
            listen=listen,
            allow=allow,
            allow_user=allow_user or [],
            max_clients=max_clients,
            sm=sm,
            sm_at=sm_at,
            sm_via=sm_via,
            verbose=verbose,
            detach=detach,
            cold=cold,
            swaps=swap or [],
            virtual_clock=virtual_clock,
            resume=resume,
        ),
        load=_cluster,
        say=_say,
    )


@app.command()
def check(
    spec: str = typer.Argument(..., help="The spec: the intended cabling."),
    ib_file: Path = typer.Option(..., "--ibnetdiscover", help="ibnetdiscover output to check."),
    trays: int | None = TraysOpt,
) -> None:
    """Compare discovered cabling with the spec: one line per wrong or missing cable
    (both ends named); exit 1 when they differ."""
    from .model.miswire import compare

    lines = compare(_cluster(spec, trays).fabric, ibnetdiscover.parse_file(str(ib_file)).fabric)
    for line in lines:
        out.print(line, markup=False, soft_wrap=True)
    if lines:
        raise typer.Exit(1)


@app.command()
def down(name: str = NameOpt) -> None:
    """Stop a fabric started with 'fabriclab up --detach' (and its OpenSM)."""
    from .sim.run import launcher

    inst = launcher.stop(name)
    _say(f"fabric {name!r} down (pid {inst.pid})")


@app.command()
def status() -> None:
    """List the fabrics that are up."""
    from . import statedir
    from .sim.run import launcher

    table = Table(title=f"fabrics up ({statedir.state_dir()})")
    for col in ("name", "pid", "spec", "reach", "OpenSM"):
        table.add_column(col)
    for row in launcher.status():
        table.add_row(*row)
    out.print(table)


@app.command("exec", context_settings={"allow_interspersed_args": False})
def exec_(
    node: str = typer.Argument(
        ..., help="Where the tool runs: HOST, HOST:HCA[:PORT], a CA or switch."
    ),
    command: list[str] = typer.Argument(..., help="The tool and its arguments (after --)."),
    name: str = NameOpt,
    via: str = ViaOpt,
    mount: bool = typer.Option(
        False,
        "--mount",
        help="Run it in a private mount namespace with the tray's live tree at "
        "/sys/class/infiniband (root; for programs that read sysfs without libc).",
    ),
) -> None:
    """Run a real tool as if on NODE, e.g. 'fabriclab exec sched-worker1 -- ibstat'.  On
    a tray the tool sees its HCAs (mlx5_0 ...) through fabriclab's host library."""
    from .sim.run import tools

    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise InputError([Problem("exec", "no command given (fabriclab exec NODE -- CMD ...)")])
    if command[0] == "nvidia-smi":  # the tray's GPUs: answered by the running fabric
        _nvidia_smi_live(name, node, command[1:])
        return
    if mount:
        raise typer.Exit(tools.exec_mounted(name, node, command, load=_cluster))
    tools.exec_tool(name, node, command, load=_cluster, say=_say, via=via)


def _nvidia_smi_live(name: str, tray: str, args: list[str]) -> None:
    from .sim.run import admin

    r = admin.request(name, {"op": "nvidia-smi", "tray": tray, "args": args})
    sys.stdout.write(r["text"])


@app.command("nvidia-smi", context_settings={"allow_interspersed_args": False})
def nvidia_smi_cmd(
    tray: str = typer.Argument(..., help="The tray whose GPUs answer."),
    args: list[str] | None = typer.Argument(
        None, help="After --: -q, or --query-gpu=FIELDS --format=csv[,noheader]."
    ),
    name: str = NameOpt,
) -> None:
    """Print what nvidia-smi prints on TRAY of the running fabric now (its NVLink faults
    included): '-q' (the Fabric section) or the --query-gpu form topograph uses."""
    args = list(args or [])
    if args[:1] == ["--"]:
        args = args[1:]
    _nvidia_smi_live(name, tray, args)


@app.command()
def sysfs(
    tray: str = typer.Argument(..., help="The tray (host name) whose HCAs to show."),
    directory: Path = typer.Argument(
        ..., metavar="DIR", help="The sys root to write (DIR/class/infiniband/...)."
    ),
    name: str = NameOpt,
    period: float = typer.Option(
        1.0, "--period", min=0.05, max=3600, help="Seconds between refreshes."
    ),
    once: bool = typer.Option(False, "--once", help="Write the tree once and stop."),
) -> None:
    """Write TRAY's /sys/class/infiniband under DIR from the running fabric and keep it
    live until the fabric stops (node_exporter --path.sysfs=DIR reads it)."""
    from .sim.host import sysfs as sysfs_mod
    from .sim.run import admin
    from .sim.run.records import NotRunning

    first = True

    def fetch():
        nonlocal first
        try:
            view = admin.request(name, {"op": "tray", "host": tray}, timeout=60)
        except (NotRunning, InputError):
            if first:
                raise
            return None  # the fabric went away: the tree stays as it last was
        first = False
        return view

    n = sysfs_mod.keep_live(fetch, directory, period, once=once)
    if not once:
        _say(f"fabric {name!r} stopped; {directory} left as last written ({n} refreshes)")


@app.command()
def shims(
    node: str = typer.Argument(..., help="The tray (or HOST:HCA, CA) the tools run as."),
    directory: Path = typer.Argument(..., help="Where to write the wrappers (a bin dir for PATH)."),
    name: str = NameOpt,
    via: str = ViaOpt,
) -> None:
    """Write a bin directory of wrappers (ibnetdiscover, ibstat, perfquery, ..., nvidia-smi,
    sudo) so software that shells out on a tray finds them on PATH."""
    from .sim.run import tools

    written = tools.shims(name, node, directory, load=_cluster, via=via)
    _say(f"wrote {len(written)} wrappers to {directory}: {' '.join(written)}")


# --- the live fabric: faults, events, scenarios, the clock -----------------------------

fault_app = typer.Typer(no_args_is_help=True, help="Faults on a running fabric ('fabriclab up').")
scenario_app = typer.Typer(no_args_is_help=True, help="Scenario files run on a running fabric.")
clock_app = typer.Typer(no_args_is_help=True, help="The running fabric's clock.")
app.add_typer(fault_app, name="fault")
app.add_typer(scenario_app, name="scenario")
app.add_typer(clock_app, name="clock")
TargetArg = typer.Argument(
    ..., help="SWITCH[port] or HOST/HCA[port] (either end names the link), a switch or a tray."
)
SubNameOpt = typer.Option(None, "--name", "-n", help="The fabric's name (default 'sim').")


def _group_name(ctx: typer.Context, name: str = NameOpt) -> None:
    ctx.obj = name


fault_app.callback()(_group_name)
scenario_app.callback()(_group_name)
clock_app.callback()(_group_name)


def _live(ctx: typer.Context, name: str | None, req: dict):
    from .sim.run import admin

    return admin.request(name or ctx.obj or "sim", req)


def _fault(ctx: typer.Context, name: str | None, kind: str, target: str, **options) -> None:
    opts = {k: v for k, v in options.items() if v is not None}
    f = _live(ctx, name, {"op": "fault", "kind": kind, "target": target, "options": opts})
    if kind == "up":
        out.print(f"cleared fault(s) {', '.join(map(str, f['cleared']))}", markup=False)
        return
    shown_opts = " ".join(
        f"{k}={v}" for k, v in f["options"].items() if k != "seed" and v is not None
    )
    out.print(f"fault {f['id']}: {f['kind']} {f['target']} {shown_opts}".rstrip(), markup=False)


@fault_app.command("down")
def fault_down(ctx: typer.Context, target: str = TargetArg, name: str | None = SubNameOpt) -> None:
    """Take a link down (either end), every link of a switch (it stops answering MADs),
    or every HCA link of a tray."""
    _fault(ctx, name, "down", target)


@fault_app.command("up")
def fault_up(ctx: typer.Context, target: str = TargetArg, name: str | None = SubNameOpt) -> None:
    """Bring back what a down or flap fault took down."""
    _fault(ctx, name, "up", target)


@fault_app.command("flap")
def fault_flap(
    ctx: typer.Context,
    target: str = TargetArg,
    period: float = typer.Option(2.0, "--period", help="Seconds per flap (down half of it)."),
    count: int = typer.Option(1, "--count", help="How many flaps."),
    name: str | None = SubNameOpt,
) -> None:
    """Flap a link: down and up again, COUNT times, every PERIOD seconds."""
    _fault(ctx, name, "flap", target, period=period, count=count)


@fault_app.command("degrade")
def fault_degrade(
    ctx: typer.Context,
    target: str = TargetArg,
    width: str | None = typer.Option(None, "--width", help="Retrain at this width (2x, 1x)."),
    speed: str | None = typer.Option(None, "--speed", help="Retrain at this speed (HDR, EDR...)."),
    name: str | None = SubNameOpt,
) -> None:
    """Retrain a link narrower or slower (iblinkinfo then says 'Could be ...')."""
    _fault(ctx, name, "degrade", target, width=width, speed=speed)


@fault_app.command("errors")
def fault_errors(
    ctx: typer.Context,
    target: str = TargetArg,
    ber: float = typer.Option(..., "--ber", help="Bit-error rate, e.g. 1e-10."),
    down_after: int | None = typer.Option(
        None, "--down-after", help="Error recoveries before the link goes down and retrains."
    ),
    name: str | None = SubNameOpt,
) -> None:
    """Put a bit-error rate on a link: its error counters grow at the pace it implies."""
    _fault(ctx, name, "errors", target, ber=ber, down_after=down_after)


@fault_app.command("drop")
def fault_drop(
    ctx: typer.Context,
    target: str = TargetArg,
    rate: float = typer.Option(100.0, "--rate", help="Percent of MADs lost (ibsim's Error)."),
    seed: int | None = typer.Option(None, "--seed", help="Seed of the losses (repeatable)."),
    name: str | None = SubNameOpt,
) -> None:
    """Make a port (or every port of a switch) lose MADs it is asked to answer."""
    _fault(ctx, name, "drop", target, rate=rate, seed=seed)


@fault_app.command("nvlink")
def fault_nvlink(
    ctx: typer.Context,
    target: str = typer.Argument(..., help="The tray."),
    gpus: str | None = typer.Option(None, "--gpus", help="GPU indices, e.g. 0,1 (default: all)."),
    name: str | None = SubNameOpt,
) -> None:
    """Fail the NVLinks of a tray's GPUs, as its BMC does: nvidia-smi's Fabric state and
    the NVLink domain feeds (slurm-block, topograph) follow."""
    _fault(ctx, name, "nvlink", target, gpus=gpus)


@fault_app.command("list")
def fault_list(ctx: typer.Context, name: str | None = SubNameOpt) -> None:
    """The faults in force."""
    table = Table(title="faults")
    for col in ("id", "kind", "target", "options", "since (s)", "progress"):
        table.add_column(col)
    for f in _live(ctx, name, {"op": "faults"}):
        opts = " ".join(f"{k}={v}" for k, v in f["options"].items() if v is not None)
        prog = " ".join(f"{k}={v}" for k, v in f["progress"].items())
        table.add_row(str(f["id"]), f["kind"], f["target"], opts, f"{f['since']:.3f}", prog)
    out.print(table)


@fault_app.command("clear")
def fault_clear(
    ctx: typer.Context,
    fault_id: int | None = typer.Argument(None, metavar="[ID]", help="The fault (default: all)."),
    name: str | None = SubNameOpt,
) -> None:
    """Clear one fault, or all of them."""
    ids = _live(ctx, name, {"op": "clear", "id": fault_id})
    out.print(f"cleared {len(ids)} fault(s) {' '.join(map(str, ids))}".rstrip(), markup=False)


@scenario_app.command("run")
def scenario_run(
    ctx: typer.Context,
    file: Path = typer.Argument(..., help="The scenario (YAML timeline)."),
    wait: bool = typer.Option(
        True, "--wait/--no-wait", help="Under wall time, wait until the last step has run."
    ),
    name: str | None = SubNameOpt,
) -> None:
    """Check a scenario file whole, then run it on the fabric."""
    from .sim.live import scenario

    text = scenario.read_file(file)
    r = _live(ctx, name, {"op": "scenario", "text": text, "source": str(file)})
    _say(f"scenario {r['name']!r}: {r['steps']} steps from t={r['start']:g} s to t={r['end']:g} s")
    if r["virtual"]:
        _say("the clock is virtual: 'fabriclab clock advance SECONDS' moves it")
        return
    if wait:
        import time

        while any(s["name"] == r["name"] for s in _live(ctx, name, {"op": "scenarios"})):
            time.sleep(0.2)
        _say(f"scenario {r['name']!r} done")


@clock_app.command("advance")
def clock_advance(
    ctx: typer.Context,
    seconds: float = typer.Argument(..., help="How far to move a virtual clock."),
    name: str | None = SubNameOpt,
) -> None:
    """Move the fabric's virtual clock (up --virtual-clock) forward."""
    r = _live(ctx, name, {"op": "advance", "seconds": seconds})
    out.print(f"clock at {r['now']:g} s", markup=False)


@clock_app.command("show")
def clock_show(ctx: typer.Context, name: str | None = SubNameOpt) -> None:
    """The fabric's clock."""
    r = _live(ctx, name, {"op": "clock"})
    out.print(f"clock at {r['now']:g} s ({'virtual' if r['virtual'] else 'wall time'})")


traffic_app = typer.Typer(no_args_is_help=True, help="Traffic on a running fabric.")
app.add_typer(traffic_app, name="traffic")
traffic_app.callback()(_group_name)
BytesOpt = typer.Option(None, "--bytes", help="Bytes to deliver (4096, 64Mi, 10G).")
RateOpt = typer.Option(None, "--rate", help="Payload per second (12.5GB/s, 100Gb/s).")


def _traffic(ctx: typer.Context, name: str | None, verb: str, args: list, **options) -> None:
    opts = {k: v for k, v in options.items() if v is not None}
    r = _live(ctx, name, {"op": "traffic", "verb": verb, "args": args, "options": opts})
    ids = r["ids"]
    shown_ids = " ".join(map(str, ids[:20])) + (" …" if r["count"] > 20 else "")
    out.print(f"{verb}: {r['count']} flow(s) {shown_ids}".rstrip(), markup=False)


@traffic_app.command("send")
def traffic_send(
    ctx: typer.Context,
    src: str = typer.Argument(..., metavar="FROM", help="A tray (its first HCA) or HOST/HCA."),
    dst: str = typer.Argument(..., metavar="TO", help="A tray (its first HCA) or HOST/HCA."),
    size: str | None = BytesOpt,
    rate: str | None = RateOpt,
    name: str | None = SubNameOpt,
) -> None:
    """A flow from FROM to TO, of a number of bytes or at a rate."""
    _traffic(ctx, name, "send", [src, dst], bytes=size, rate=rate)


@traffic_app.command("all-to-all")
def traffic_all_to_all(
    ctx: typer.Context,
    hosts: str = typer.Argument(..., metavar="SET", help="A hostlist of trays or HOST/HCA."),
    size: str | None = BytesOpt,
    rate: str | None = RateOpt,
    name: str | None = SubNameOpt,
) -> None:
    """A flow from every endpoint of SET to every other."""
    _traffic(ctx, name, "all-to-all", [hosts], bytes=size, rate=rate)


@traffic_app.command("ring")
def traffic_ring(
    ctx: typer.Context,
    hosts: str = typer.Argument(..., metavar="SET", help="A hostlist of trays or HOST/HCA."),
    size: str | None = BytesOpt,
    rate: str | None = RateOpt,
    name: str | None = SubNameOpt,
) -> None:
    """A flow from each endpoint of SET to the next."""
    _traffic(ctx, name, "ring", [hosts], bytes=size, rate=rate)


@traffic_app.command("stop")
def traffic_stop(
    ctx: typer.Context,
    flow_id: int | None = typer.Argument(None, metavar="[ID]", help="The flow (default: all)."),
    name: str | None = SubNameOpt,
) -> None:
    """Stop one flow, or all of them."""
    _traffic(ctx, name, "stop", [] if flow_id is None else [str(flow_id)])


@traffic_app.command("list")
def traffic_list(ctx: typer.Context, name: str | None = SubNameOpt) -> None:
    """The flows and how far they got."""
    table = Table(title="flows")
    cols = ("id", "from", "to", "state", "rate", "sent", "delivered", "size", "dropped")
    for col in cols:
        table.add_column(col)
    for f in _live(ctx, name, {"op": "traffic", "verb": "list", "args": []}):
        table.add_row(*(str(f[c]) if f[c] is not None else "-" for c in cols))
    out.print(table)


@app.command()
def events(
    name: str = NameOpt,
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new events."),
    json_out: bool = typer.Option(False, "--json", help="JSON lines, as the log keeps them."),
) -> None:
    """The fabric's event log (faults, their clearing, links retraining, thresholds)."""
    import json
    import time

    from . import statedir
    from .sim.live import events as ev
    from .sim.run import records

    records.check_name(name)
    path = ev.events_path(statedir.state_dir(), name)
    evs, offset = ev.read_new(path, 0)
    if not path.exists():
        raise InputError([Problem(name, f"no event log for fabric {name!r} ({path})")])
    cols = ("id", "timestamp", "severity", "event_type", "name", "object_name", "description")
    if json_out:
        for e in evs:
            out.print(json.dumps(e), markup=False)
    elif not follow:
        table = Table(title=f"events of {name!r}")
        for col in cols:
            table.add_column(col)
        for e in evs:
            table.add_row(*(str(e.get(c, "")) for c in cols))
        out.print(table)
    else:
        for e in evs:
            out.print("  ".join(str(e.get(c, "")) for c in cols), markup=False)
    while follow:
        time.sleep(0.2)
        evs, offset = ev.read_new(path, offset)
        for e in evs:
            line = json.dumps(e) if json_out else "  ".join(str(e.get(c, "")) for c in cols)
            out.print(line, markup=False)


@app.command("import")
def import_(
    file: Path = typer.Argument(
        ..., help="ibnetdiscover output (default or -p) from a real fabric."
    ),
    output: Path = typer.Option(
        ..., "-o", "--output", help="Where to write the spec YAML ('-' = stdout)."
    ),
    name: str | None = typer.Option(None, "--name", help="Spec name (default: the file's stem)."),
    gpus_per_hca: int = typer.Option(
        1, "--gpus-per-hca", min=0, max=64, help="GPUs to give a tray per HCA."
    ),
) -> None:
    """Turn a real ibnetdiscover dump into an explicit spec every command can use."""
    dump = ibnetdiscover.parse_file(str(file))
    data = spec_from_fabric(
        dump.fabric,
        name or file.stem,
        gpus_per_hca=gpus_per_hca,
        description=f"imported from {file.name}",
        warnings=dump.warnings,
    )
    _warn(dump.warnings, dump.warnings_dropped)
    # libyaml's emitter when PyYAML has it: the same text, ten times faster on a large fabric
    text = yaml.dump(
        data, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False, width=120
    )
    _write(text, output)
    f = dump.fabric
    if str(output) != "-":
        err.print(
            f"wrote {output}: {len(data['trays'])} trays, {len(f.switches())} switches, "
            f"{len(f.cas())} CAs, {f.link_count()} links"
        )
    if dump.warnings:
        raise typer.Exit(1)


def _is(e: Exception, name: str) -> bool:
    """Whether ``e`` is click's exception ``name``, from click or typer's copy of it."""
    return any(
        c.__name__ == name and c.__module__.split(".")[0] in ("click", "typer")
        for c in type(e).__mro__
    )


def _usage_where(e) -> str:
    param = getattr(e, "param", None)
    if param is None:
        return ""
    opts = list(getattr(param, "opts", None) or [])
    if getattr(param, "param_type_name", "") == "option" and opts:
        return f"{max(opts, key=len)}: "
    return f"{(param.name or '').upper()}: " if param.name else ""


def _usage_what(e) -> str:
    what = (
        getattr(e, "message", "") if getattr(e, "param", None) is not None else ""
    ) or e.format_message()
    what = " ".join(str(what).split())
    cmd = e.ctx.command_path if getattr(e, "ctx", None) is not None else "fabriclab"
    return f"{what} (see '{cmd} --help')"


def main() -> None:
    """Entry point: run the app, turning user errors into ``error:`` lines."""
    try:
        rv = app(standalone_mode=False)
        if isinstance(rv, int) and rv:
            sys.exit(rv)
    except FabriclabError as e:
        _warn(e.warnings, e.warnings_dropped)
        for line in shown(e.problems, "error", e.dropped):
            err.print(line, markup=False)
        sys.exit(2)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except typer.Abort:
        err.print("aborted")
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    except Exception as e:
        # Usage errors come from click (vendored by newer typer): its own text is several
        # lines (usage, a hint, "Error: ..."); one line instead.
        if _is(e, "UsageError"):
            err.print(f"error: {_usage_where(e)}{_usage_what(e)}", markup=False)
            sys.exit(2)
        if _is(e, "ClickException"):
            fmt = getattr(e, "format_message", None)
            message = fmt() if callable(fmt) else str(e)
            err.print(f"error: {' '.join(str(message).split())}", markup=False)
            code = getattr(e, "exit_code", None)
            sys.exit(code if isinstance(code, int) else 2)
        if os.environ.get("FABRICLAB_DEBUG"):  # pragma: no cover - a bug, not a user error
            raise
        err.print(
            f"error: internal: {type(e).__name__}: {e} (set FABRICLAB_DEBUG=1 for a traceback)",
            markup=False,
        )
        sys.exit(70)


if __name__ == "__main__":
    main()
