"""The providers of topograph's simulation models (``tests/models/*.yaml``): ``test``,
the ``*-sim`` providers and ``dra``, each turning a model into a graph.

A model lists ``switches`` (id -> labels, annotations, child switches) and ``blocks``
(the only place nodes appear: an optional leaf ``switch``, compact ``nodes``, labels and
``accelerator.topology.test/domain`` / ``sub-domain`` annotations).  It becomes a graph
the way topograph's providers build one:

- ``test``: the model's own tree, node vertices ``i-<host>`` named after the host;
- ``*-sim`` (aws, gcp, oci, dsx, lambdai, nebius, nscale): each node an instance whose
  switches run closest first, joined through ``instances_to_graph`` with the request's
  instance -> node map, ``trimTiers``, and OCI's switch renaming;
- ``dra``: accelerator domains only, from the domain annotation.

A model file is read like every input (size-checked, YAML through the guarded loader)
and its shape is checked as topograph's Go types check it (pkg/models/model.go), so a
bad model is a one-line SimulationModelError, never an internal error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ... import inputs
from ...spec import yaml_guard
from ..cluset import MAX_EXPANDED, expand_list
from ..errors import OptionError, TopologyProblem
from ..graph import DomainMap, Graph, HostInfo, InstanceTopology, Vertex, instances_to_graph

DOMAIN_ANNOTATION = "accelerator.topology.test/domain"
SUB_DOMAIN_ANNOTATION = "accelerator.topology.test/sub-domain"
REGION_LABEL = "topology.kubernetes.io/region"
SIM_PROVIDERS = {
    "aws-sim",
    "gcp-sim",
    "oci-sim",
    "dsx-sim",
    "lambdai-sim",
    "nebius-sim",
    "nscale-sim",
}
# topograph's models are a few kilobytes; a model is read whole, so it is bounded.
MODEL_BYTES_MAX = 16 << 20


class SimulationModelError(TopologyProblem):
    """A simulation model that cannot be read or is inconsistent."""


@dataclass
class SimulatedNode:
    """A node of a model: its leaf switch, labels and annotations (its switches' merged
    under its own), and its switches from the leaf up (``layers``)."""

    name: str
    switch: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    layers: list[str] = field(default_factory=list)  # closest first

    @property
    def domain(self) -> str:
        """Its accelerator domain (the domain annotation), or ""."""
        return self.annotations.get(DOMAIN_ANNOTATION, "")

    @property
    def sub_domain(self) -> str:
        """Its sub-domain (the sub-domain annotation), or ""."""
        return self.annotations.get(SUB_DOMAIN_ANNOTATION, "")


@dataclass
class SimulationModel:
    """topograph's ``models.Model``: switches, which nodes hang on each, and the nodes."""

    switches: dict[str, list[str]]  # id -> child switch ids
    switch_nodes: dict[str, list[str]]
    nodes: dict[str, SimulatedNode]

    @classmethod
    def load(cls, path: str | Path) -> SimulationModel:
        """The model in a file (size-checked, YAML through the guarded loader)."""
        text = inputs.read_text(
            str(path), MODEL_BYTES_MAX, "a simulation model", error=SimulationModelError
        )
        data = yaml_guard.load(text, str(path), SimulationModelError)
        return cls.from_data(data if data is not None else {}, str(path))

    @classmethod
    def from_data(cls, data: Any, source: str = "model") -> SimulationModel:
        """The model of parsed YAML; SimulationModelError where it is not a model."""
        shape = _Shape(source)
        data = shape.mapping(data, "")
        switches: dict[str, list[str]] = {}
        labels: dict[str, dict[str, str]] = {}
        annotations: dict[str, dict[str, str]] = {}
        for name, switch in shape.mapping(data.get("switches"), "switches").items():
            if switch is None:
                raise SimulationModelError(f'{source}: switch "{name}" has empty definition')
            where = f"switches.{name}"
            switch = shape.mapping(switch, where)
            switches[name] = shape.names(switch.get("switches"), f"{where}.switches")
            labels[name] = shape.strings(switch.get("labels"), f"{where}.labels")
            annotations[name] = shape.strings(switch.get("annotations"), f"{where}.annotations")
        for children in list(switches.values()):
            for child in children:
                switches.setdefault(child, [])
                labels.setdefault(child, {})
                annotations.setdefault(child, {})
        switch_nodes: dict[str, list[str]] = {name: [] for name in switches}
        nodes: dict[str, SimulatedNode] = {}
        blocks = data.get("blocks")
        if blocks is not None and not isinstance(blocks, list):
            raise SimulationModelError(f"{source}: blocks: a list of capacity blocks")
        names_left = MAX_EXPANDED
        for i, block in enumerate(blocks or []):
            where = f"blocks[{i}]"
            block = shape.mapping(block, where)
            names = []
            for entry in shape.names(block.get("nodes"), f"{where}.nodes"):
                try:
                    expanded = expand_list(entry)
                except OptionError as e:
                    raise SimulationModelError(f"{source}: {where}.nodes: {e}") from None
                names.extend(expanded)
                names_left -= len(expanded)
                if names_left < 0:
                    raise SimulationModelError(
                        f"{source}: the blocks name more than {MAX_EXPANDED} nodes"
                    )
            if not names:
                raise SimulationModelError(
                    f"{source}: capacity block at index {i} must declare at least one node"
                )
            switch = shape.name(block.get("switch"), f"{where}.switch") or None
            if switch is not None and switch not in switches:
                raise SimulationModelError(
                    f'{source}: capacity block at index {i} references unknown switch "{switch}"'
                )
            block_labels = shape.strings(block.get("labels"), f"{where}.labels")
            block_annotations = shape.strings(block.get("annotations"), f"{where}.annotations")
            for name in names:
                if name in nodes:
                    raise SimulationModelError(
                        f'{source}: node "{name}" belongs to more than one capacity block'
                    )
                nodes[name] = SimulatedNode(
                    name, switch, dict(block_labels), dict(block_annotations)
                )
                if switch is not None and name not in switch_nodes[switch]:
                    switch_nodes[switch].append(name)
        parent: dict[str, str] = {}
        for name, children in switches.items():
            for child in children:
                if child in parent:
                    raise SimulationModelError(
                        f'{source}: switch "{child}" has two parent switches "{name}" '
                        f'and "{parent[child]}"'
                    )
                parent[child] = name
        for node in nodes.values():
            if node.switch is None:
                continue
            path, seen, switch = [], set(), node.switch
            while True:
                if switch in seen:
                    raise SimulationModelError(
                        f'{source}: circular dependency detected in topology for switch "{switch}"'
                    )
                seen.add(switch)
                path.append(switch)
                if switch not in parent:
                    break
                switch = parent[switch]
            node.layers = path
            merged_labels, merged_annotations = {}, {}
            for switch in reversed(path):
                merged_labels.update(labels[switch])
                merged_annotations.update(annotations[switch])
            merged_labels.update(node.labels)
            merged_annotations.update(node.annotations)
            node.labels, node.annotations = merged_labels, merged_annotations
        for node in nodes.values():
            if not node.labels.get(REGION_LABEL):
                node.labels[REGION_LABEL] = "none"
        return cls(switches, switch_nodes, nodes)

    # --- graphs ---------------------------------------------------------------------
    def test_graph(self) -> Graph:
        """topograph's ``Model.ToGraph`` (the ``test`` provider)."""
        node_vertices = {host: Vertex(f"i-{host}", host) for host in self.nodes}
        switch_vertices = {switch: Vertex(switch) for switch in self.switches}
        roots = set(self.switches)
        for switch, children in self.switches.items():
            for child in children:
                roots.discard(child)
                switch_vertices[switch].vertices[child] = switch_vertices[child]
            for host in self.switch_nodes[switch]:
                vertex = node_vertices[host]
                switch_vertices[switch].vertices[vertex.id] = vertex
        root = Vertex()
        for switch in sorted(roots):
            root.vertices[switch] = switch_vertices[switch]
        domains = DomainMap()
        for host, node in sorted(self.nodes.items()):
            if node.domain:
                domains.add(HostInfo(node.domain, f"i-{host}", host, node.sub_domain))
        return Graph(root, domains if domains else None)

    def sim_graph(
        self, provider: str, instance_nodes: dict[str, str] | None = None, trim_tiers: int = 0
    ) -> Graph:
        """A ``*-sim`` provider's graph; ``instance_nodes`` (instance -> node) defaults to
        every model node under its own name."""
        if instance_nodes is None:
            instance_nodes = {host: host for host in self.nodes}
        instances = [
            InstanceTopology(
                host, [(switch, "") for switch in node.layers], node.domain, node.sub_domain
            )
            for host, node in sorted(self.nodes.items())
        ]
        return instances_to_graph(
            instances, instance_nodes, trim_tiers=trim_tiers, normalize=provider == "oci-sim"
        )

    def dra_graph(self) -> Graph:
        """The ``dra`` provider's graph: accelerator domains only."""
        domains = DomainMap()
        for host, node in sorted(self.nodes.items()):
            if node.domain:
                domains.add(HostInfo(node.domain, host, host))
        return Graph(None, domains)


class _Shape:
    """Checks of a model's parts against topograph's Go types (maps of strings, lists of
    strings); a scalar where a string is wanted is taken as its text, as yaml.v3 does."""

    def __init__(self, source: str):
        self.source = source

    def fail(self, where: str, what: str) -> SimulationModelError:
        """The error for the part at ``where``."""
        return SimulationModelError(
            f"{self.source}: {where}: {what}" if where else f"{self.source}: {what}"
        )

    def mapping(self, value: Any, where: str) -> dict[str, Any]:
        """A mapping with string keys (None: empty)."""
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(where, "a mapping")
        return {self.name(key, where): item for key, item in value.items()}

    def name(self, value: Any, where: str) -> str:
        """A string, or a scalar's text (None: "")."""
        if value is None:
            return ""
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, (str, int, float)):
            return str(value)
        raise self.fail(where, "a string")

    def names(self, value: Any, where: str) -> list[str]:
        """A list of strings (None: empty)."""
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.fail(where, "a list of strings")
        return [self.name(item, where) for item in value]

    def strings(self, value: Any, where: str) -> dict[str, str]:
        """A mapping of strings to strings (labels, annotations)."""
        return {
            key: self.name(item, f"{where}.{key}")
            for key, item in self.mapping(value, where).items()
        }
