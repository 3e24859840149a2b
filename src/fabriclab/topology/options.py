"""The options of ``fabriclab topology`` and the parameters of the topology API turned
into engine options: block sizes (with Slurm's rules), block names, and the named
topologies of a --topologies file.  Each problem is an OptionError."""

from __future__ import annotations

from ..inputs import read_text
from ..limits import MAX_HOSTS, TOPOLOGIES_BYTES_MAX
from ..spec import hostlist, yaml_guard
from .engines.slurm import BlockName, SlurmTopologyError, TopologySpec
from .errors import OptionError

MAX_BLOCK_SIZES = 20  # topograph's validateBlockSizes (and Slurm's): at most 20 sizes
MAX_BLOCK_SIZE = 65536  # ... each at most 65,536
TOPOLOGY_KEYS = {"plugin", "nodes", "block_sizes", "cluster_default", "block_name"}


def parse_block_sizes(text: str | None, where: str = "--block-sizes") -> list[int]:
    """``18,36,72`` as a list, checked by ``validate_block_sizes``; nothing for no text."""
    if not text:
        return []
    try:
        sizes = [int(size) for size in str(text).split(",")]
    except ValueError:
        raise OptionError(f"not a list of numbers: {text!r}", where=where) from None
    validate_block_sizes(sizes, where)
    return sizes


def validate_block_sizes(sizes: list[int], where: str = "") -> None:
    """Slurm's rules as topograph checks them: at most 20 sizes up to 65,536, each a
    power-of-two multiple of the one before."""
    if len(sizes) > MAX_BLOCK_SIZES:
        raise OptionError(
            f"blockSizes has too many entries ({len(sizes)}); max allowed is {MAX_BLOCK_SIZES}",
            where=where,
        )
    previous = None
    for i, size in enumerate(sizes):
        if size <= 0:
            raise OptionError(f"blockSizes[{i}]={size} must be positive", where=where)
        if size > MAX_BLOCK_SIZE:
            raise OptionError(
                f"blockSizes[{i}]={size} exceeds maximum allowed value {MAX_BLOCK_SIZE}",
                where=where,
            )
        if previous is not None:
            ratio = size // previous
            if size <= previous or size % previous or ratio & (ratio - 1):
                raise OptionError(
                    f"blockSizes[{i}]={size} must be a power-of-two multiple "
                    f"of blockSizes[{i - 1}]={previous}",
                    where=where,
                )
        previous = size


def parse_block_name(text: str | None) -> BlockName | None:
    """``--block-name REGEXP=FORMAT`` (split at the last ``=``)."""
    if not text:
        return None
    if "=" not in text:
        raise OptionError("expected REGEXP=FORMAT", where="--block-name")
    regexp, template = text.rsplit("=", 1)
    return block_name(regexp, template, "--block-name")


def block_name(regexp: str, template: str, where: str = "") -> BlockName:
    """A BlockName, its problems as OptionErrors at ``where``."""
    try:
        return BlockName(regexp, template)
    except SlurmTopologyError as e:
        raise OptionError(str(e), where=where) from None


def load_topologies(path: str | None) -> dict[str, TopologySpec]:
    """A YAML mapping ``name: {plugin: topology/tree|block|flat, nodes: [..],
    block_sizes: [..], cluster_default: bool, block_name: {node_name_regexp, format}}``;
    node lists are Slurm hostlists, counted before they are expanded."""
    if not path:
        return {}
    text = read_text(path, TOPOLOGIES_BYTES_MAX, "a topologies file")
    data = yaml_guard.load(text, path, OptionError)  # bounded like a spec
    if not isinstance(data, dict):
        raise OptionError("expected a mapping of topology names", where=path)
    return {str(name): _topology(path, name, spec) for name, spec in data.items()}


def _topology(path: str, name, spec) -> TopologySpec:
    where = f"{path}: {name}"
    if not isinstance(spec, dict) or "plugin" not in spec:
        raise OptionError(
            "needs a plugin (topology/tree, topology/block, topology/flat)", where=where
        )
    unknown = set(spec) - TOPOLOGY_KEYS
    if unknown:
        raise OptionError(f"unknown key {sorted(unknown)[0]!r}", where=where)
    nodes = spec.get("nodes") or []
    if isinstance(nodes, str):
        nodes = [nodes]
    if not isinstance(nodes, list) or not all(isinstance(entry, (str, int)) for entry in nodes):
        raise OptionError("a hostlist or a list of hostlists", where=f"{where}.nodes")
    sizes = spec.get("block_sizes") or []
    if not isinstance(sizes, list) or not all(type(size) is int for size in sizes):
        raise OptionError("a list of numbers", where=f"{where}.block_sizes")
    naming = spec.get("block_name")
    if naming is not None and not (
        isinstance(naming, dict)
        and isinstance(naming.get("node_name_regexp"), str)
        and isinstance(naming.get("format"), str)
    ):
        raise OptionError("a mapping of node_name_regexp and format", where=f"{where}.block_name")
    if not isinstance(spec["plugin"], str):
        raise OptionError("topology/tree, topology/block or topology/flat", where=f"{where}.plugin")
    expanded = []
    total = 0
    for entry in nodes:  # Slurm hostlists, several brackets allowed
        try:
            total += hostlist.count(str(entry))  # before expanding any
            if total > MAX_HOSTS:
                raise OptionError(f"more than {MAX_HOSTS} nodes", where=f"{where}.nodes")
            expanded.extend(hostlist.expand(str(entry)))
        except hostlist.HostlistError as e:
            raise OptionError(str(e), where=f"{where}.nodes") from None
    validate_block_sizes(sizes, f"{where}.block_sizes")
    renaming = (
        block_name(naming["node_name_regexp"], naming["format"], f"{where}.block_name")
        if naming
        else None
    )
    return TopologySpec(
        spec["plugin"],
        [str(node) for node in expanded],
        sizes,
        renaming,
        bool(spec.get("cluster_default", False)),
    )
