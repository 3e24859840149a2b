"""topograph's built-in test graphs (``translate.GetTreeTestSet`` and
``GetBlockWithMultiIBTestSet``): what its ``test`` provider answers without a model."""

from __future__ import annotations

from .graph import DomainMap, Graph, Vertex


def V(id: str, name: str = "", *children: Vertex, key: dict | None = None) -> Vertex:
    v = Vertex(id, name)
    for c in children:
        v.vertices[c.id] = c
    for k, c in (key or {}).items():
        v.vertices[k] = c
    return v


def nodes(*pairs: str) -> list[Vertex]:
    return [Vertex(iid, name) for iid, name in (p.split("=") for p in pairs)]


def root(*children: Vertex, key: dict | None = None) -> Vertex:
    return V("", "", *children, key=key)


def domains(spec: dict[str, list[str]]) -> DomainMap:
    d = DomainMap()
    for dom, members in spec.items():
        for m in members:
            iid, name = m.split("=")
            d.add_host(dom, iid, name)
    return d


def tree_test_set(long_label: bool = False) -> Graph:
    s3 = "S3very-very-long-id-to-check-label-value-limits-of-63-characters" if long_label else "S3"
    sw2 = V("S2", "", *nodes("I21=Node201", "I22=Node202", "I25=Node205"))
    sw3 = V(s3, "", *nodes("I34=Node304", "I35=Node305", "I36=Node306"))
    return Graph(root(V("S1", "", sw2, sw3)))


def block_with_multi_ib_test_set() -> Graph:
    s5 = V("S5", "", *nodes("I31=Node301", "I32=Node302", "I33=Node303"))
    s6 = V("S6", "", *nodes("I41=Node401", "I42=Node402", "I43=Node403"))
    ib1 = V("IB1", "", V("S4", "", s5, s6))
    s2 = V("S2", "", *nodes("I14=Node104", "I15=Node105", "I16=Node106"))
    s3 = V("S3", "", *nodes("I21=Node201", "I22=Node202", "I25=Node205"))
    ib2 = V("IB2", "", V("S1", "", s2, s3))
    return Graph(root(ib1, ib2), domains({
        "B1": ["I14=Node104", "I15=Node105", "I16=Node106"],
        "B2": ["I21=Node201", "I22=Node202", "I25=Node205"],
        "B3": ["I31=Node301", "I32=Node302", "I33=Node303"],
        "B4": ["I41=Node401", "I42=Node402", "I43=Node403"],
    }))
