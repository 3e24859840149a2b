"""Kubernetes node labels for a topology graph, as topograph's k8s engine sets them.

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
INSTANCE_KEY = "topograph.run/instance"
REGION_KEY = "topograph.run/region"


class LabelError(TopologyProblem):
    """Labels that cannot be set (a node in two accelerator domains)."""


def label_value(val: str) -> str:
    """topograph's ``checkLabel``: long values are hashed to stay a valid label value."""
    return val if len(val) <= 63 else f"x{fnv1a64(val.encode()):x}"


def node_labels(graph: Graph, *, fabric_keys: list[str] | None = None,
                domain_key: str = DOMAIN_KEY) -> dict[str, dict[str, str]]:
    """node name -> labels.  ``fabric_keys`` replaces the tier keys closest first."""
    out: dict[str, dict[str, str]] = {}
    if graph.domains:
        _domain_labels(graph.domains, out, domain_key)
    if graph.tiers is not None:
        layers = [graph.tiers.id] if graph.tiers.id else []
        _tier_labels(graph.tiers, out, layers, fabric_keys)
    return out


def _domain_labels(domains: DomainMap, out: dict, key: str) -> None:
    for name in sorted(domains):
        for host, info in sorted(domains[name].items()):
            if not host:
                continue
            labels = out.setdefault(host, {})
            if key in labels:
                raise LabelError(f"multiple accelerator labels {labels[key]}, {name} for node {host}")
            labels[key] = label_value(name)
            if info.sub_domain:
                labels[SUB_DOMAIN_KEY] = label_value(info.sub_domain)


def _tier_labels(v: Vertex, out: dict, layers: list[str], keys: list[str] | None) -> None:
    if not v.vertices:
        if layers and v.name:
            labels = out.setdefault(v.name, {})
            for i, sw in enumerate(layers[1:]):
                key = (keys[i] if i < len(keys) else "") if keys else f"{TIER_PREFIX}{i}"
                if not sw or not key:
                    break
                labels[key] = label_value(sw)
        return
    for k in sorted(v.vertices):
        w = v.vertices[k]
        _tier_labels(w, out, [w.id] + layers, keys)


def labels_json(labels: dict[str, dict[str, str]]) -> str:
    return json.dumps({n: dict(sorted(l.items())) for n, l in sorted(labels.items())}, indent=2) + "\n"


_TIER_KEY = re.compile(r"^fabric\.topograph\.run/tier-\d+$")


def kubectl_script(labels: dict[str, dict[str, str]], max_tiers: int | None = None) -> str:
    """A shell script that sets the labels with kubectl and removes stale tier labels
    (tiers above a node's own, up to ``max_tiers``), as topograph does on each run."""
    lines = ["#!/bin/sh", "# node topology labels written by fabriclab", "set -e"]
    top = max_tiers if max_tiers is not None else max(
        (sum(1 for k in l if _TIER_KEY.match(k)) for l in labels.values()), default=0)
    for node, l in sorted(labels.items()):
        args = [f"{k}={v}" for k, v in sorted(l.items())]
        have = {k for k in l if _TIER_KEY.match(k)}
        stale = [f"{TIER_PREFIX}{i}-" for i in range(top) if f"{TIER_PREFIX}{i}" not in have]
        lines.append(f"kubectl label node {node} --overwrite " + " ".join(args + stale))
    return "\n".join(lines) + "\n"


# Kubernetes label syntax (apimachinery validation: IsQualifiedName, IsValidLabelValue).
_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def label_problems(key: str, value: str) -> list[str]:
    """Why a label is not valid Kubernetes syntax (empty list when it is)."""
    out = []
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix)):
        out.append(f"key prefix {prefix!r} is not a DNS subdomain")
    if not name or len(name) > 63 or not _NAME.match(name):
        out.append(f"key name {name!r} is not a valid label name")
    if value and (len(value) > 63 or not _NAME.match(value)):
        out.append(f"value {value!r} is not a valid label value")
    return out
