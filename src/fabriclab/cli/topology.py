"""The scheduler topology commands: topology (Slurm, Kubernetes labels, Kueue, KWOK) and
serve-topology (topograph's HTTP API)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer

from ..errors import InputError, Problem
from .common import (
    OutputOpt,
    TraysOpt,
    command,
    fabric_name,
    group,
    load_cluster,
    say,
    warn,
    write,
)

commands = group("Scheduler topology.", panel="Scheduler topology")

# The fabric server's modules (numpy, scipy) and the topology API's (FastAPI) are imported
# by the commands that use them: the others start without loading them.


class Engine(str, Enum):
    slurm_tree = "slurm-tree"
    slurm_block = "slurm-block"
    slurm_yaml = "slurm-yaml"
    k8s_labels = "k8s-labels"
    kueue = "kueue"
    kwok = "kwok"


@command(commands)
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
    output: Path | None = OutputOpt,
    trays: int | None = TraysOpt,
    live: str | None = typer.Option(
        None,
        "--name",
        "-n",
        help="A running fabric ('fabriclab up'): its links, switches, trays and NVLink "
        "faults as they are now (its ibnetdiscover and nvidia-smi answers), named as its "
        "spec names them.",
    ),
    live_from: str | None = typer.Option(
        None, "--from", help="With --name: the tray ibnetdiscover runs on (default: the first up)."
    ),
) -> None:
    """Scheduler topology (Slurm, Kubernetes labels, Kueue, KWOK) from a spec, a real
    cluster's ibnetdiscover and nvidia-smi output, or a running fabric (--name).

    Exit 0: complete; 1: produced, but something was left out (see the warnings); 2:
    nothing could be produced.

    Example: fabriclab topology gb200-su -e slurm-block
    """
    from ..topology import inputs as topology_inputs
    from ..topology.command import topology_command

    ib_paths = [str(p) for p in ib_files or []]
    smi_path = str(smi_file) if smi_file else None
    views = None
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
        from ..sim.run import admin

        live = fabric_name(live)
        shown = admin.request(live, {"op": "topology-inputs", "from": live_from})
        views = topology_inputs.from_views(
            live, shown["ibnetdiscover"], shown["nvidia_smi"], shown.get("cluster")
        )
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
        cluster_loader=load_cluster,
        given=views,
    )
    warn(report.problems)
    write(text, output)
    if report.left_out:
        raise typer.Exit(1)


@command(commands, "serve-topology")
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
    port: int = typer.Option(49021, "--port", min=1, max=65535, help="Port to listen on."),
    token: str | None = typer.Option(
        None,
        "--token",
        envvar="FABRICLAB_TOPOLOGY_TOKEN",
        show_envvar=True,
        help="Clients must send 'Authorization: Bearer TOKEN' (prefer the environment "
        "variable: a command line is visible to every local user).",
    ),
    delay_text: str = typer.Option(
        "2s",
        "--aggregation-delay",
        help="How long to wait for repeats of a request (2, 2s, 500ms; up to 1h).",
    ),
    trays: int | None = TraysOpt,
) -> None:
    """Serve topograph's HTTP API (/v1/generate, /v1/topology, /v1/lookup, /healthz).

    A request names its provider: infiniband-bm, infiniband-k8s and fabriclab answer from
    the spec or dumps given here; test and the *-sim providers from topograph's simulation
    models (--models-dir).

    Example: fabriclab serve-topology gb200-su --port 49021
    """
    from ..sim.live.durations import seconds
    from ..topology import server
    from ..topology.command import given_inputs, local_provider

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
    delay = seconds(delay_text, "--aggregation-delay", 0, 3600)
    inputs = given_inputs(
        spec,
        [str(p) for p in ib_files or []],
        str(smi_file) if smi_file else None,
        trays,
        load_cluster,
    )
    local = None
    if inputs is not None:
        warn(inputs.report.problems)
        local = local_provider(inputs, compat=compat == "topograph", names=names)
    service = server.TopologyService(local, str(models_dir) if models_dir else None, delay)
    say(
        f"fabriclab topology API on http://{host}:{port}"
        + (" (clients must send the bearer token)" if token else "")
    )
    server.serve(service, host, port, token)
