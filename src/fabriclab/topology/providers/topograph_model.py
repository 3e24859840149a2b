"""NVIDIA topograph's simulation models (``tests/models/*.yaml``) as a topology source.

A model lists ``switches`` (id -> labels, annotations, child switches) and ``blocks``
(the only place nodes appear: an optional leaf ``switch``, compact ``nodes``, labels and
``accelerator.topology.test/domain`` / ``sub-domain`` annotations).  It becomes a graph
the way topograph's providers build one:

- ``test``: the model's own tree, node vertices ``i-<host>`` named after the host;
- ``*-sim`` (aws, gcp, oci, dsx, lambdai, nebius, nscale): each node an instance whose
  switches run closest first, joined through ``instances_to_graph`` with the request's
  instance -> node map, ``trimTiers``, and OCI's switch renaming;
- ``dra``: accelerator domains only, from the domain annotation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..errors import TopologyProblem
from ..cluset import expand_list
from ..graph import DomainMap, Graph, HostInfo, InstanceTopology, Vertex, instances_to_graph

DOMAIN_ANNOTATION = "accelerator.topology.test/domain"
SUB_DOMAIN_ANNOTATION = "accelerator.topology.test/sub-domain"
REGION_LABEL = "topology.kubernetes.io/region"
SIM_PROVIDERS = {"aws-sim", "gcp-sim", "oci-sim", "dsx-sim", "lambdai-sim", "nebius-sim", "nscale-sim"}


class ModelError(TopologyProblem):
    """A simulation model that cannot be read or is inconsistent."""


@dataclass
class ModelNode:
    name: str
    switch: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    layers: list[str] = field(default_factory=list)  # closest first

    @property
    def domain(self) -> str:
        return self.annotations.get(DOMAIN_ANNOTATION, "")

    @property
    def sub_domain(self) -> str:
        return self.annotations.get(SUB_DOMAIN_ANNOTATION, "")


@dataclass
class Model:
    switches: dict[str, list[str]]  # id -> child switch ids
    switch_nodes: dict[str, list[str]]
    nodes: dict[str, ModelNode]

    @classmethod
    def load(cls, path: str | Path) -> "Model":
        try:
            data = yaml.safe_load(Path(path).read_text())
        except (OSError, yaml.YAMLError) as e:
            raise ModelError(f"{path}: {e}") from None
        return cls.from_data(data or {}, str(path))

    @classmethod
    def from_data(cls, data: dict, source: str = "model") -> "Model":
        raw = data.get("switches") or {}
        switches: dict[str, list[str]] = {}
        labels: dict[str, dict] = {}
        annotations: dict[str, dict] = {}
        for name, sw in raw.items():
            if sw is None:
                raise ModelError(f'{source}: switch "{name}" has empty definition')
            switches[name] = list(sw.get("switches") or [])
            labels[name] = sw.get("labels") or {}
            annotations[name] = sw.get("annotations") or {}
        for children in list(switches.values()):
            for c in children:
                switches.setdefault(c, [])
                labels.setdefault(c, {})
                annotations.setdefault(c, {})
        switch_nodes: dict[str, list[str]] = {s: [] for s in switches}
        nodes: dict[str, ModelNode] = {}
        for i, block in enumerate(data.get("blocks") or []):
            names = [n for entry in block.get("nodes") or [] for n in expand_list(entry)]
            if not names:
                raise ModelError(f"{source}: capacity block at index {i} must declare at least one node")
            sw = block.get("switch") or None
            if sw is not None and sw not in switches:
                raise ModelError(f'{source}: capacity block at index {i} references unknown switch "{sw}"')
            for n in names:
                if n in nodes:
                    raise ModelError(f'{source}: node "{n}" belongs to more than one capacity block')
                nodes[n] = ModelNode(n, sw, dict(block.get("labels") or {}), dict(block.get("annotations") or {}))
                if sw is not None and n not in switch_nodes[sw]:
                    switch_nodes[sw].append(n)
        parent: dict[str, str] = {}
        for p, children in switches.items():
            for c in children:
                if c in parent:
                    raise ModelError(f'{source}: switch "{c}" has two parent switches "{p}" and "{parent[c]}"')
                parent[c] = p
        for n in nodes.values():
            if n.switch is None:
                continue
            path, seen, s = [], set(), n.switch
            while True:
                if s in seen:
                    raise ModelError(f'{source}: circular dependency detected in topology for switch "{s}"')
                seen.add(s)
                path.append(s)
                if s not in parent:
                    break
                s = parent[s]
            n.layers = path
            merged_l, merged_a = {}, {}
            for sw in reversed(path):
                merged_l.update(labels[sw])
                merged_a.update(annotations[sw])
            merged_l.update(n.labels)
            merged_a.update(n.annotations)
            n.labels, n.annotations = merged_l, merged_a
        for n in nodes.values():
            if not n.labels.get(REGION_LABEL):
                n.labels[REGION_LABEL] = "none"
        return cls(switches, switch_nodes, nodes)

    # --- graphs ---------------------------------------------------------------------
    def test_graph(self) -> Graph:
        """topograph's ``Model.ToGraph`` (the ``test`` provider)."""
        node_v = {h: Vertex(f"i-{h}", h) for h in self.nodes}
        sw_v = {s: Vertex(s) for s in self.switches}
        roots = set(self.switches)
        for s, children in self.switches.items():
            for c in children:
                roots.discard(c)
                sw_v[s].vertices[c] = sw_v[c]
            for n in self.switch_nodes[s]:
                v = node_v[n]
                sw_v[s].vertices[v.id] = v
        root = Vertex()
        for s in sorted(roots):
            root.vertices[s] = sw_v[s]
        domains = DomainMap()
        for h, n in sorted(self.nodes.items()):
            if n.domain:
                domains.add(HostInfo(n.domain, f"i-{h}", h, n.sub_domain))
        return Graph(root, domains if domains else None)

    def test_instances(self) -> dict[str, str]:
        return {f"i-{h}": h for h in self.nodes}

    def sim_graph(self, provider: str, i2n: dict[str, str] | None = None, trim_tiers: int = 0) -> Graph:
        """A ``*-sim`` provider's graph; ``i2n`` (instance -> node) defaults to every
        model node under its own name."""
        if i2n is None:
            i2n = {h: h for h in self.nodes}
        instances = [InstanceTopology(h, [(s, "") for s in n.layers], n.domain, n.sub_domain)
                     for h, n in sorted(self.nodes.items())]
        return instances_to_graph(instances, i2n, trim_tiers=trim_tiers,
                                  normalize=provider == "oci-sim")

    def dra_graph(self) -> Graph:
        domains = DomainMap()
        for h, n in sorted(self.nodes.items()):
            if n.domain:
                domains.add(HostInfo(n.domain, h, h))
        return Graph(None, domains)
