"""Kueue and KWOK manifests (YAML) that match the topology's node labels.

Kueue's ``Topology`` (kueue.x-k8s.io/v1beta2) lists its levels largest first and
``kubernetes.io/hostname`` last: fabric tiers from the top down, then the NVLink domain.
The ``ResourceFlavor`` selects the GPU nodes and names that topology.  KWOK ``Node``
objects carry the same labels and GPU capacity, so a scheduler can be tested at scale
without kubelets.
"""

from __future__ import annotations

import hashlib
import re
from typing import TYPE_CHECKING

from .k8s_labels import DOMAIN_KEY, TIER_PREFIX
from .yaml_text import dump_all

if TYPE_CHECKING:
    from . import EngineOptions

HOSTNAME = "kubernetes.io/hostname"
_TIER = re.compile(r"^fabric\.topograph\.run/tier-(\d+)$")


def levels(labels: dict[str, dict[str, str]]) -> list[str]:
    """Kueue's topology levels, largest first: the tiers from the top down, the NVLink
    domain (when a node has one), the host."""
    tiers = sorted(
        {
            int(match.group(1))
            for own in labels.values()
            for key in own
            if (match := _TIER.match(key))
        },
        reverse=True,
    )
    out = [f"{TIER_PREFIX}{tier}" for tier in tiers]
    if any(DOMAIN_KEY in own for own in labels.values()):
        out.append(DOMAIN_KEY)
    out.append(HOSTNAME)
    return out


def kueue_manifests(labels: dict[str, dict[str, str]], opts: EngineOptions) -> str:
    """A Kueue ``Topology`` of the levels and a ``ResourceFlavor`` that selects the GPU
    nodes and names it."""
    topology = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Topology",
        "metadata": {"name": opts.topology_name},
        "spec": {"levels": [{"nodeLabel": lv} for lv in levels(labels)]},
    }
    key, value = opts.node_label
    flavor = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": opts.flavor_name},
        "spec": {"nodeLabels": {key: value}, "topologyName": opts.topology_name},
    }
    return dump_all([topology, flavor])


def kwok_nodes(labels: dict[str, dict[str, str]], opts: EngineOptions) -> str:
    """A KWOK ``Node`` per labelled node, with its labels and GPU capacity."""
    docs = []
    key, value = opts.node_label
    for node in sorted(labels):
        gpus = opts.gpus.get(node, 0)
        node_labels = {
            "beta.kubernetes.io/arch": "amd64",
            "beta.kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/os": "linux",
            HOSTNAME: node,
            "kubernetes.io/role": "agent",
            "node-role.kubernetes.io/agent": "",
            "type": "kwok",
        }
        if gpus:
            node_labels[key] = value
        node_labels.update(dict(sorted(labels[node].items())))
        capacity = {"cpu": "144", "memory": "1Ti", "pods": "110"}
        if gpus:
            capacity["nvidia.com/gpu"] = str(gpus)
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": node,
                    "annotations": {
                        "kwok.x-k8s.io/node": "fake",
                        "node.alpha.kubernetes.io/ttl": "0",
                        "topograph.run/instance": node,
                        "topograph.run/region": "local",
                    },
                    "labels": node_labels,
                },
                "spec": {
                    "taints": [
                        {"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}
                    ]
                },
                "status": {
                    "allocatable": dict(capacity),
                    "capacity": dict(capacity),
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "True",
                            "reason": "KubeletReady",
                            "message": "kubelet is posting ready status",
                        }
                    ],
                    "nodeInfo": _node_info(node),
                    "phase": "Running",
                },
            }
        )
    return dump_all(docs)


def _node_info(node: str) -> dict[str, str]:
    """Node.status.nodeInfo with every field the Node schema requires; the ids are
    derived from the name so that the same fabric gives the same manifests."""
    digest = hashlib.sha1(node.encode()).hexdigest()
    uuid = f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"
    return {
        "architecture": "amd64",
        "operatingSystem": "linux",
        "machineID": digest[:32],
        "systemUUID": uuid,
        "bootID": uuid,
        "kernelVersion": "fake",
        "osImage": "fake",
        "containerRuntimeVersion": "fake",
        "kubeletVersion": "fake",
        "kubeProxyVersion": "fake",
    }
