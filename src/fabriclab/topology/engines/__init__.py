"""Engines: what consumes a topology graph (Slurm files, Kubernetes node labels, Kueue
and KWOK manifests).  ``run`` is the single entry the CLI and the HTTP API use.

- ``slurm`` (a package): topology.conf (tree, block) and topology.yaml;
- ``k8s_labels``: the node labels, as JSON or a kubectl script;
- ``kueue_kwok``: Kueue Topology and ResourceFlavor, KWOK Nodes, with those labels;
- ``yaml_text``: the YAML text the engines write.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import OptionError
from ..graph import Graph
from . import k8s_labels, kueue_kwok, slurm

ENGINES = ("slurm-tree", "slurm-block", "slurm-yaml", "k8s-labels", "kueue", "kwok")


@dataclass
class EngineOptions:
    """Every engine's options (each engine reads its own)."""

    block_sizes: list[int] = field(default_factory=list)
    block_name: slurm.BlockName | None = None
    topologies: dict[str, slurm.TopologySpec] = field(default_factory=dict)
    skeleton: bool = False
    label_format: str = "json"  # k8s-labels: json | script
    topology_name: str = "nvl"
    flavor_name: str = "gpu"
    node_label: tuple[str, str] = ("nvidia.com/gpu.present", "true")
    gpus: dict[str, int] = field(default_factory=dict)  # kwok: GPUs per node


def run(engine: str, graph: Graph, opts: EngineOptions) -> str:
    """``engine``'s output for ``graph``; a TopologyProblem when it cannot be made."""
    if engine == "slurm-tree":
        return slurm.generate(graph, slurm.SlurmConfig(slurm.TREE), opts.skeleton)
    if engine == "slurm-block":
        config = slurm.SlurmConfig(slurm.BLOCK, opts.block_sizes, opts.block_name)
        return slurm.generate(graph, config, opts.skeleton)
    if engine == "slurm-yaml":
        if not opts.topologies:
            raise OptionError("slurm-yaml needs --topologies (a YAML file of named topologies)")
        return slurm.generate(
            graph, slurm.SlurmConfig("", topologies=opts.topologies), opts.skeleton
        )
    if engine not in ENGINES:
        raise OptionError(f"unknown engine {engine!r} (engines: {', '.join(ENGINES)})")
    labels = k8s_labels.node_labels(graph)
    if engine == "k8s-labels":
        if opts.label_format == "script":
            return k8s_labels.kubectl_script(labels)
        return k8s_labels.labels_json(labels)
    if engine == "kueue":
        return kueue_kwok.kueue_manifests(labels, opts)
    return kueue_kwok.kwok_nodes(labels, opts)
