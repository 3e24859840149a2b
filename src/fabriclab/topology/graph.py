"""The scheduler-neutral topology graph every provider builds and every engine reads.

It has the same shape as NVIDIA topograph's canonical graph, so that fabriclab's
engines produce topograph's outputs for the same input:

- ``tiers``: a tree under a hidden root (id ""), switches as inner vertices and compute
  nodes as leaves (id = instance id, name = host name);
- ``domains``: accelerator (NVLink) domain -> host name -> HostInfo.

Vertex children are kept in dicts keyed by child id; engines sort where topograph sorts
and otherwise follow insertion order, which providers make deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass, field

NO_TOPOLOGY = "no-topology"


@dataclass(eq=False)
class Vertex:
    """A switch (with children) or a compute node (without), as topograph's
    ``topology.Vertex``: children keyed by their id (or by a name topograph gives them)."""

    id: str = ""
    name: str = ""
    vertices: dict[str, Vertex] = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"Vertex({self.id!r}, {self.name!r}, {len(self.vertices)} children)"


@dataclass
class HostInfo:
    """One host of an accelerator (NVLink) domain, and its sub-domain (a rack within it)."""

    domain: str
    instance_id: str
    host_name: str
    sub_domain: str = ""


class DomainMap(dict):
    """domain -> {host name -> HostInfo}."""

    def add(self, info: HostInfo) -> None:
        """Put a host in its domain (a host without a domain is left out)."""
        if not info.domain:
            return
        self.setdefault(info.domain, {})[info.host_name] = info

    def add_host(self, domain: str, instance: str, host: str, sub_domain: str = "") -> None:
        """``add`` from the fields of a HostInfo."""
        self.add(HostInfo(domain, instance, host, sub_domain))


@dataclass
class Graph:
    """The switch tree (None when the provider knows none) and the accelerator domains
    (None when it knows none)."""

    tiers: Vertex | None = None
    domains: DomainMap | None = None


@dataclass
class InstanceTopology:
    """One compute instance and its switches, closest first (topograph's cloud shape)."""

    instance_id: str
    tiers: list[tuple[str, str]]  # (switch id, display name), closest first
    domain: str = ""
    sub_domain: str = ""


def instances_to_graph(
    instances: list[InstanceTopology],
    instance_nodes: dict[str, str],
    *,
    trim_tiers: int = 0,
    normalize: bool = False,
) -> Graph:
    """topograph's ``ClusterTopology.ToGraph``: instances become a forest, switches are
    shared by (level, id), requested nodes without topology go under ``no-topology``.
    ``instance_nodes`` maps the requested instances to node names; ``trim_tiers`` drops
    that many top tiers; ``normalize`` renames switches ``switch.<level>.<n>`` in
    hierarchy order (OCI)."""
    unplaced = dict(instance_nodes)
    if normalize:
        instances = _normalized(instances)
    forest: dict[str, Vertex] = {}
    switches: dict[tuple[int, str], Vertex] = {}
    domains = DomainMap()
    for instance in instances:
        if instance.instance_id not in unplaced:
            continue
        node_name = unplaced.pop(instance.instance_id)
        top = Vertex(instance.instance_id, node_name)  # the chain's top vertex so far
        if instance.domain:
            domains.add(
                HostInfo(instance.domain, instance.instance_id, node_name, instance.sub_domain)
            )
        keep = len(instance.tiers) - min(max(0, trim_tiers), len(instance.tiers))
        for level, (switch_id, switch_name) in enumerate(instance.tiers[:keep]):
            if not switch_id:
                continue
            switch = switches.get((level, switch_id))
            if switch is None:
                switch = switches[(level, switch_id)] = Vertex(switch_id, switch_name)
            switch.vertices[top.id] = top
            top = switch
        if top.id in forest:
            _merge(forest[top.id], top)
        else:
            forest[top.id] = top
    if unplaced:
        switch = Vertex(NO_TOPOLOGY)
        for instance_id, name in unplaced.items():
            switch.vertices[instance_id] = Vertex(instance_id, name)
        forest[NO_TOPOLOGY] = switch
    root = Vertex()
    root.vertices.update(forest)
    return Graph(root, domains if domains else None)


def _merge(into: Vertex, other: Vertex) -> None:
    """``other``'s subtree merged into ``into`` (same id): children by key, recursively."""
    if into is other:
        return
    if not into.name:
        into.name = other.name
    for key, child in other.vertices.items():
        if key in into.vertices:
            _merge(into.vertices[key], child)
        else:
            into.vertices[key] = child


def _normalized(instances: list[InstanceTopology]) -> list[InstanceTopology]:
    """OCI's switch names: ``switch.<level>.<n>``, numbered in the order of the instances
    sorted by their switches from the top down."""
    width = max((len(instance.tiers) for instance in instances), default=0)

    def sort_key(instance: InstanceTopology):
        ids = [switch_id for switch_id, _ in instance.tiers]
        return (
            [ids[level] if level < len(ids) else "" for level in range(width - 1, -1, -1)],
            instance.instance_id,
        )

    ordered = sorted(instances, key=sort_key)
    counts: dict[int, int] = {}
    names: dict[int, dict[str, str]] = {}
    out = []
    for instance in ordered:
        tiers: list[tuple[str, str]] = []
        for level, (switch_id, _) in enumerate(instance.tiers):
            if not switch_id:
                tiers.append((switch_id, ""))
                continue
            level_names = names.setdefault(level, {})
            if switch_id not in level_names:
                counts[level] = counts.get(level, 0) + 1
                level_names[switch_id] = f"switch.{level + 1}.{counts[level]}"
            tiers.append((switch_id, level_names[switch_id]))
        out.append(
            InstanceTopology(instance.instance_id, tiers, instance.domain, instance.sub_domain)
        )
    return out
