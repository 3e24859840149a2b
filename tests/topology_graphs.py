"""Small topology graphs for the engines' in-process tests."""

from __future__ import annotations

from fabriclab.topology.graph import DomainMap, Graph, Vertex


def switch(switch_id: str, *children: Vertex, name: str = "") -> Vertex:
    vertex = Vertex(switch_id, name)
    for child in children:
        vertex.vertices[child.id] = child
    return vertex


def node(instance: str, name: str) -> Vertex:
    return Vertex(instance, name)


def two_leaves(domains: bool = True) -> Graph:
    """One spine over leaf1 (n1, n2) and leaf2 (n3); NVLink domains nvl-a (n1, n2) and
    nvl-b (n3)."""
    tree = switch(
        "",
        switch(
            "spine",
            switch("leaf2", node("i3", "n3")),
            switch("leaf1", node("i1", "n1"), node("i2", "n2")),
        ),
    )
    if not domains:
        return Graph(tree)
    members = DomainMap()
    members.add_host("nvl-a", "i1", "n1")
    members.add_host("nvl-a", "i2", "n2")
    members.add_host("nvl-b", "i3", "n3")
    return Graph(tree, members)


def racks(hosts: int = 6, per_rack: int = 4) -> DomainMap:
    """One NVLink domain ``nvl`` of ``hosts`` hosts n1…, in racks (sub-domains) of
    ``per_rack``: rack0, rack1 …"""
    members = DomainMap()
    for i in range(1, hosts + 1):
        members.add_host("nvl", f"i{i}", f"n{i}", f"rack{(i - 1) // per_rack}")
    return members
