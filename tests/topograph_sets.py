"""The input graphs of topograph's translate tests (pkg/translate/output.go and
topology_test.go), written out as data, so their expected outputs in
tests/fixtures/topograph can be reproduced."""

from __future__ import annotations

from fabriclab.topology.graph import DomainMap, Graph, Vertex
from fabriclab.topology.topograph_test_graphs import tree_test_set  # noqa: F401


def V(switch_id: str, name: str = "", *children: Vertex) -> Vertex:
    """A switch vertex (topograph's ``&topology.Vertex{ID, Name, Vertices}``)."""
    switch = Vertex(switch_id, name)
    for child in children:
        switch.vertices[child.id] = child
    return switch


def nodes(*pairs: str) -> list[Vertex]:
    """Node vertices from ``instance=name`` pairs."""
    return [Vertex(instance, name) for instance, name in (pair.split("=") for pair in pairs)]


def root(*children: Vertex, key: dict[str, Vertex] | None = None) -> Vertex:
    """The hidden root (id ""); ``key`` adds children under keys other than their ids."""
    top = V("", "", *children)
    top.vertices.update(key or {})
    return top


def domains(members: dict[str, list[str]]) -> DomainMap:
    """Domain -> its ``instance=name`` pairs."""
    out = DomainMap()
    for domain, pairs in members.items():
        for pair in pairs:
            instance, name = pair.split("=")
            out.add_host(domain, instance, name)
    return out


def block_with_multi_ib_test_set() -> Graph:
    """``GetBlockWithMultiIBTestSet``: two InfiniBand fabrics of two leaves each, and four
    accelerator domains, one per leaf."""
    s5 = V("S5", "", *nodes("I31=Node301", "I32=Node302", "I33=Node303"))
    s6 = V("S6", "", *nodes("I41=Node401", "I42=Node402", "I43=Node403"))
    ib1 = V("IB1", "", V("S4", "", s5, s6))
    s2 = V("S2", "", *nodes("I14=Node104", "I15=Node105", "I16=Node106"))
    s3 = V("S3", "", *nodes("I21=Node201", "I22=Node202", "I25=Node205"))
    ib2 = V("IB2", "", V("S1", "", s2, s3))
    return Graph(
        root(ib1, ib2),
        domains(
            {
                "B1": ["I14=Node104", "I15=Node105", "I16=Node106"],
                "B2": ["I21=Node201", "I22=Node202", "I25=Node205"],
                "B3": ["I31=Node301", "I32=Node302", "I33=Node303"],
                "B4": ["I41=Node401", "I42=Node402", "I43=Node403"],
            }
        ),
    )


def block_with_ib_test_set() -> Graph:
    l2 = V("L2", "", *nodes("I14=Node104", "I15=Node105", "I16=Node106"))
    l3 = V("L3", "", *nodes("I21=Node201", "I22=Node202", "I25=Node205"))
    r2 = V("R2", "", *nodes("I34=Node304", "I35=Node305", "I36=Node306"))
    r3 = V("R3", "", *nodes("I41=Node401", "I42=Node402", "I43=Node403"))
    l1, r1 = V("l1", "", l2, l3), V("r1", "", r2, r3)
    return Graph(
        root(key={"L1": l1, "R1": r1}),
        domains(
            {
                "B1": ["I14=Node104", "I15=Node105", "I16=Node106"],
                "B2": ["I21=Node201", "I22=Node202", "I25=Node205"],
                "B3": ["I34=Node304", "I35=Node305", "I36=Node306"],
                "B4": ["I41=Node401", "I42=Node402", "I43=Node403"],
            }
        ),
    )


def block_with_dfs_ib_test_set() -> Graph:
    s2 = V("S2", "", *nodes("I14=Node104", "I15=Node105"))
    s4 = V("S4", "", *nodes("I22=Node202"))
    s5 = V("S5", "", *nodes("I25=Node205"))
    s0 = V("S0", "", V("S1", "", s4), s2, V("S3", "", s5))
    return Graph(
        root(s0),
        domains(
            {"B1": ["I22=Node202"], "B2": ["I14=Node104", "I15=Node105"], "B3": ["I25=Node205"]}
        ),
    )


def block_test_set() -> Graph:
    return Graph(
        None,
        domains(
            {
                "B1": ["I14=Node104", "I15=Node105", "I16=Node106"],
                "B2": ["I21=Node201", "I22=Node202", "I25=Node205"],
            }
        ),
    )


def block_with_diff_num_node_test_set() -> Graph:
    s2 = V("S2", "", *nodes("I14=Node104", "I15=Node105", "I16=Node106"))
    s3 = V("S3", "", *nodes("I21=Node201", "I22=Node202", "I25=Node205", "I26=Node206"))
    return Graph(
        root(V("S1", "", s2, s3)),
        domains(
            {
                "B1": ["I14=Node104", "I15=Node105", "I16=Node106"],
                "B2": ["I21=Node201", "I22=Node202", "I25=Node205", "I26=Node206"],
            }
        ),
    )


def short_name_test_set() -> Graph:
    l1 = V("local-block-1", "switch.1.1", Vertex("node-1-id", "node-1"))
    l2 = V("local-block-2", "switch.1.2", Vertex("node-2-id", "node-2"))
    return Graph(
        root(
            V(
                "hpcislandid-1",
                "switch.3.1",
                V("network-block-1", "switch.2.1", l1),
                V("network-block-2", "switch.2.2", l2),
            )
        )
    )
