"""Engines: what consumes a topology graph (Slurm files, Kubernetes labels, Kueue and
KWOK manifests).  ``run`` is the single entry the CLI and the HTTP API use."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import OptionError
from ..graph import Graph
from . import k8s, slurm

ENGINES = ("slurm-tree", "slurm-block", "slurm-yaml", "k8s-labels", "kueue", "kwok")


@dataclass
class EngineOptions:
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
    if engine == "slurm-tree":
        return slurm.generate(graph, slurm.SlurmConfig(slurm.TREE), opts.skeleton)
    if engine == "slurm-block":
        config = slurm.SlurmConfig(slurm.BLOCK, opts.block_sizes, opts.block_name)
        return slurm.generate(graph, config, opts.skeleton)
    if engine == "slurm-yaml":
        if not opts.topologies:
            raise OptionError("slurm-yaml needs --topologies (a YAML file of named topologies)")
        return slurm.generate(graph, slurm.SlurmConfig("", topologies=opts.topologies), opts.skeleton)
    labels = k8s.node_labels(graph)
    if engine == "k8s-labels":
        return k8s.kubectl_script(labels) if opts.label_format == "script" else k8s.labels_json(labels)
    from . import kube

    if engine == "kueue":
        return kube.kueue_manifests(labels, opts)
    if engine == "kwok":
        return kube.kwok_nodes(labels, opts)
    raise OptionError(f"unknown engine {engine!r} (engines: {', '.join(ENGINES)})")
