"""Argument handling shared by ``fabriclab topology`` and the topograph-compatible API:
turn options into inputs, a graph and an engine's output, or one-line errors."""

from __future__ import annotations

from typing import Callable

from .. import inputs
from ..errors import InputError, Problem
from ..limits import MAX_HOSTS, TOPOLOGIES_BYTES_MAX
from ..spec import hostlist, yaml_guard
from . import sources
from .engines import EngineOptions, run
from .engines.slurm import BlockName, SlurmTopologyError, TopologySpec
from .errors import TopologyProblem
from .report import Report


def parse_block_sizes(text: str | None, where: str = "--block-sizes") -> list[int]:
    if not text:
        return []
    try:
        sizes = [int(x) for x in str(text).split(",")]
    except ValueError:
        raise InputError([Problem(where, f"not a list of numbers: {text!r}")]) from None
    validate_block_sizes(sizes, where)
    return sizes


def validate_block_sizes(sizes: list[int], where: str) -> None:
    """Slurm's rules as topograph checks them: at most 20 sizes up to 65,536, each a
    power-of-two multiple of the one before."""
    if len(sizes) > 20:
        raise InputError([Problem(where, f"blockSizes has too many entries ({len(sizes)}); max allowed is 20")])
    prev = None
    for i, s in enumerate(sizes):
        if s <= 0:
            raise InputError([Problem(where, f"blockSizes[{i}]={s} must be positive")])
        if s > 65536:
            raise InputError([Problem(where, f"blockSizes[{i}]={s} exceeds maximum allowed value 65536")])
        if prev is not None:
            if s <= prev or s % prev or (s // prev) & (s // prev - 1):
                raise InputError([Problem(where, f"blockSizes[{i}]={s} must be a power-of-two multiple "
                                          f"of blockSizes[{i - 1}]={prev}")])
        prev = s


def parse_block_name(text: str | None) -> BlockName | None:
    if not text:
        return None
    if "=" not in text:
        raise InputError([Problem("--block-name", "expected REGEXP=FORMAT")])
    regexp, fmt = text.rsplit("=", 1)
    try:
        return BlockName(regexp, fmt)
    except SlurmTopologyError as e:
        raise InputError([Problem("--block-name", str(e))]) from None


def load_topologies(path: str | None) -> dict[str, TopologySpec]:
    """A YAML mapping ``name: {plugin: topology/tree|block|flat, nodes: [..],
    block_sizes: [..], cluster_default: bool}``."""
    if not path:
        return {}
    text = inputs.read_text(path, TOPOLOGIES_BYTES_MAX, "a topologies file")
    data = yaml_guard.load(text, path, InputError)  # bounded like a spec
    if not isinstance(data, dict):
        raise InputError([Problem(path, "expected a mapping of topology names")])
    out = {}
    for name, spec in data.items():
        if not isinstance(spec, dict) or "plugin" not in spec:
            raise InputError([Problem(f"{path}: {name}", "needs a plugin (topology/tree, topology/block, topology/flat)")])
        unknown = set(spec) - {"plugin", "nodes", "block_sizes", "cluster_default", "block_name"}
        if unknown:
            raise InputError([Problem(f"{path}: {name}", f"unknown key {sorted(unknown)[0]!r}")])
        where = f"{path}: {name}"
        nodes = spec.get("nodes") or []
        if isinstance(nodes, str):
            nodes = [nodes]
        if not isinstance(nodes, list) or not all(isinstance(n, (str, int)) for n in nodes):
            raise InputError([Problem(f"{where}.nodes", "a hostlist or a list of hostlists")])
        sizes = spec.get("block_sizes") or []
        if not isinstance(sizes, list) or not all(type(x) is int for x in sizes):
            raise InputError([Problem(f"{where}.block_sizes", "a list of numbers")])
        bn = spec.get("block_name")
        if bn is not None and not (isinstance(bn, dict) and isinstance(bn.get("node_name_regexp"), str)
                                   and isinstance(bn.get("format"), str)):
            raise InputError([Problem(f"{where}.block_name", "a mapping of node_name_regexp and format")])
        if not isinstance(spec["plugin"], str):
            raise InputError([Problem(f"{where}.plugin", "topology/tree, topology/block or topology/flat")])
        expanded = []
        total = 0
        for entry in nodes:  # Slurm hostlists, several brackets allowed
            try:
                total += hostlist.count(str(entry))  # before expanding any
                if total > MAX_HOSTS:
                    raise InputError([Problem(f"{path}: {name}.nodes", f"more than {MAX_HOSTS} nodes")])
                expanded.extend(hostlist.expand(str(entry)))
            except hostlist.HostlistError as e:
                raise InputError([Problem(f"{path}: {name}.nodes", str(e))]) from None
        nodes = expanded
        validate_block_sizes(sizes, f"{path}: {name}.block_sizes")
        out[str(name)] = TopologySpec(spec["plugin"], [str(n) for n in nodes], sizes,
                                      parse_block_name(f"{bn['node_name_regexp']}={bn['format']}") if bn else None,
                                      bool(spec.get("cluster_default", False)))
    return out


def topology_command(*, spec, engine, ib_files, smi_file, nodes, compat, names, block_sizes,
                     block_name, topologies, skeleton, label_format, trays,
                     cluster_loader: Callable) -> tuple[str, Report]:
    if compat not in (None, "topograph"):
        raise InputError([Problem("--compat", f"unknown {compat!r}; the one compatibility mode is 'topograph'")])
    if label_format not in ("json", "script"):
        raise InputError([Problem("--format", "json or script")])
    if spec and ib_files:
        raise InputError([Problem("topology", "give a SPEC or --ibnetdiscover files, not both")])
    if spec:
        inputs = sources.from_cluster(cluster_loader(spec, trays))
    elif ib_files:
        inputs = sources.from_files(ib_files, smi_file)
    else:
        raise InputError([Problem("topology", "give a SPEC, or --ibnetdiscover FILE [--nvidia-smi FILE]")])
    wanted = sources.requested_nodes(nodes, inputs)
    opts = EngineOptions(block_sizes=parse_block_sizes(block_sizes), block_name=parse_block_name(block_name),
                         topologies=load_topologies(topologies), skeleton=skeleton,
                         label_format=label_format, gpus=inputs.gpus)
    try:
        graph = sources.build_graph(inputs, wanted, compat=compat == "topograph", names=names)
        text = run(engine, graph, opts)
    except TopologyProblem as e:  # every engine's and provider's error, LabelError included
        raise InputError([Problem(engine, str(e))], warnings=inputs.report.problems) from None
    return text, inputs.report
