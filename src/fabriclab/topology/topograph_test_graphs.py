"""topograph's built-in test graph (``translate.GetTreeTestSet``, pkg/translate/output.go):
what its ``test`` provider answers without a model."""

from __future__ import annotations

from .graph import Graph, Vertex


def tree_test_set(long_label: bool = False) -> Graph:
    """``GetTreeTestSet``: S1 over S2 and S3, three nodes each; ``long_label`` gives S3 a
    64-character id (to test the label value limit)."""
    s3 = "S3very-very-long-id-to-check-label-value-limits-of-63-characters" if long_label else "S3"
    s2_switch = _switch("S2", *_nodes("I21=Node201", "I22=Node202", "I25=Node205"))
    s3_switch = _switch(s3, *_nodes("I34=Node304", "I35=Node305", "I36=Node306"))
    return Graph(_root(_switch("S1", s2_switch, s3_switch)))


def _switch(switch_id: str, *children: Vertex) -> Vertex:
    switch = Vertex(switch_id)
    for child in children:
        switch.vertices[child.id] = child
    return switch


def _nodes(*pairs: str) -> list[Vertex]:
    """Node vertices from ``instance=name`` pairs."""
    return [Vertex(instance, name) for instance, name in (pair.split("=") for pair in pairs)]


def _root(*children: Vertex) -> Vertex:
    return _switch("", *children)
