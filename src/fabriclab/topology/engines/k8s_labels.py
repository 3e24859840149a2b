"""The Kubernetes node labels of a topology graph, as topograph's k8s engine sets them,
written as JSON or as a kubectl script.

``fabric.topograph.run/tier-N`` (tier 0 = the switch closest to the node) carry switch
ids, ``accelerator.topograph.run/domain`` the NVLink domain (``<uuid>.<clique>``),
``accelerator.topograph.run/sub-domain`` a sub-domain.  A value longer than 63
characters (a Kubernetes label value's limit) becomes ``x`` + the hex FNV-1a-64 hash.
"""

from __future__ import annotations

import json
import re

from ..errors import TopologyProblem
from ..fnv import fnv1a64
from ..graph import DomainMap, Graph, Vertex

TIER_PREFIX = "fabric.topograph.run/tier-"
DOMAIN_KEY = "accelerator.topograph.run/domain"
SUB_DOMAIN_KEY = "accelerator.topograph.run/sub-domain"


class LabelError(TopologyProblem):
    """Labels that cannot be set (a node in two accelerator domains)."""


def label_value(value: str) -> str:
    """topograph's ``checkLabel``: long values are hashed to stay a valid label value."""
    return value if len(value) <= 63 else f"x{fnv1a64(value.encode()):x}"


def node_labels(graph: Graph) -> dict[str, dict[str, str]]:
    """Node name -> its labels: tiers from the switch tree, domain and sub-domain from
    the accelerator domains (a node in two domains is a LabelError)."""
    out: dict[str, dict[str, str]] = {}
    if graph.domains:
        _domain_labels(graph.domains, out)
    if graph.tiers is not None:
        layers = [graph.tiers.id] if graph.tiers.id else []
        _tier_labels(graph.tiers, out, layers)
    return out


def _domain_labels(domains: DomainMap, out: dict[str, dict[str, str]]) -> None:
    for name in sorted(domains):
        for host, info in sorted(domains[name].items()):
            if not host:
                continue
            labels = out.setdefault(host, {})
            if DOMAIN_KEY in labels:
                raise LabelError(
                    f"multiple accelerator labels {labels[DOMAIN_KEY]}, {name} for node {host}"
                )
            labels[DOMAIN_KEY] = label_value(name)
            if info.sub_domain:
                labels[SUB_DOMAIN_KEY] = label_value(info.sub_domain)


def _tier_labels(vertex: Vertex, out: dict[str, dict[str, str]], layers: list[str]) -> None:
    """Depth first; ``layers`` are the ids from ``vertex`` up to the root, so a node's
    ``layers[1:]`` are its switches, closest first."""
    if not vertex.vertices:
        if layers and vertex.name:
            labels = out.setdefault(vertex.name, {})
            for tier, switch in enumerate(layers[1:]):
                if not switch:
                    break
                labels[f"{TIER_PREFIX}{tier}"] = label_value(switch)
        return
    for key in sorted(vertex.vertices):
        child = vertex.vertices[key]
        _tier_labels(child, out, [child.id, *layers])


def labels_json(labels: dict[str, dict[str, str]]) -> str:
    """The labels as JSON, nodes and keys sorted (topograph's test files' layout)."""
    return (
        json.dumps(
            {node: dict(sorted(own.items())) for node, own in sorted(labels.items())}, indent=2
        )
        + "\n"
    )


_TIER_KEY = re.compile(r"^fabric\.topograph\.run/tier-\d+$")


def kubectl_script(labels: dict[str, dict[str, str]]) -> str:
    """A shell script that sets the labels with kubectl and removes stale tier labels
    (tiers above a node's own, up to the most any node has), as topograph does on each
    run."""
    lines = ["#!/bin/sh", "# node topology labels written by fabriclab", "set -e"]
    top = max((sum(1 for key in own if _TIER_KEY.match(key)) for own in labels.values()), default=0)
    for node, own in sorted(labels.items()):
        args = [f"{key}={value}" for key, value in sorted(own.items())]
        have = {key for key in own if _TIER_KEY.match(key)}
        stale = [
            f"{TIER_PREFIX}{tier}-" for tier in range(top) if f"{TIER_PREFIX}{tier}" not in have
        ]
        lines.append(f"kubectl label node {node} --overwrite " + " ".join(args + stale))
    return "\n".join(lines) + "\n"
