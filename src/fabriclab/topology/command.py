"""The ``topology`` and ``serve-topology`` commands below the CLI's option parsing: the
user's options turned into inputs, a graph and an engine's output (or a provider for the
API), with every topology problem one TopologyProblem."""

from __future__ import annotations

from collections.abc import Callable

from . import inputs as topology_inputs
from .engines import EngineOptions, run
from .errors import OptionError, TopologyProblem
from .graph import Graph
from .inputs import Inputs
from .options import load_topologies, parse_block_name, parse_block_sizes
from .providers import local_graph
from .report import Report

LABEL_FORMATS = ("json", "script")


def given_inputs(
    spec: str | None,
    ib_files: list[str],
    smi_file: str | None,
    trays: int | None,
    cluster_loader: Callable,
) -> Inputs | None:
    """The inputs of a spec (built by ``cluster_loader(spec, trays)``), else of dump
    files; None when neither is given."""
    if spec:
        return topology_inputs.from_cluster(cluster_loader(spec, trays))
    if ib_files:
        return topology_inputs.from_files(ib_files, smi_file)
    return None


def topology_command(
    *,
    spec,
    engine,
    ib_files,
    smi_file,
    nodes,
    compat,
    names,
    block_sizes,
    block_name,
    topologies,
    skeleton,
    label_format,
    trays,
    cluster_loader: Callable,
    given: Inputs | None = None,
) -> tuple[str, Report]:
    """``fabriclab topology``: the engine's text and what was left out on the way, from a
    spec, dump files or inputs ``given`` (a running fabric's views).  A provider's or
    engine's problem is raised at ``engine`` with the warnings so far."""
    if compat not in (None, "topograph"):
        raise OptionError(
            f"unknown {compat!r}; the one compatibility mode is 'topograph'", where="--compat"
        )
    if label_format not in LABEL_FORMATS:
        raise OptionError("json or script", where="--format")
    if spec and ib_files:
        raise OptionError("give a SPEC or --ibnetdiscover files, not both", where="topology")
    inputs = given or given_inputs(spec, ib_files, smi_file, trays, cluster_loader)
    if inputs is None:
        raise OptionError(
            "give a SPEC, or --ibnetdiscover FILE [--nvidia-smi FILE]", where="topology"
        )
    wanted = topology_inputs.requested_nodes(nodes)
    opts = EngineOptions(
        block_sizes=parse_block_sizes(block_sizes),
        block_name=parse_block_name(block_name),
        topologies=load_topologies(topologies),
        skeleton=skeleton,
        label_format=label_format,
        gpus=inputs.gpus,
    )
    try:
        graph = local_graph(inputs, wanted, compat=compat == "topograph", names=names)
        text = run(engine, graph, opts)
    except TopologyProblem as e:  # every provider's and engine's problem
        raise TopologyProblem(str(e), where=engine, warnings=inputs.report.problems) from None
    return text, inputs.report


def local_provider(
    inputs: Inputs, *, compat: bool, names: bool
) -> Callable[[list[str] | None], tuple[Graph, dict[str, int]]]:
    """For ``serve-topology``: the graph of the given fabric for a request's nodes (None:
    all), and the GPUs per host."""

    def provide(requested: list[str] | None) -> tuple[Graph, dict[str, int]]:
        return local_graph(inputs, requested, compat=compat, names=names), inputs.gpus

    return provide
