"""Kueue and KWOK manifests that match the topology labels.

Kueue's ``Topology`` (kueue.x-k8s.io/v1beta2) lists its levels largest first and
``kubernetes.io/hostname`` last: fabric tiers from the top down, then the NVLink domain.
The ``ResourceFlavor`` selects the GPU nodes and names that topology.  KWOK ``Node``
objects carry the same labels and GPU capacity, so a scheduler can be tested at scale
without kubelets.
"""

from __future__ import annotations

import hashlib
import json
import re

from . import k8s

HOSTNAME = "kubernetes.io/hostname"
_TIER = re.compile(r"^fabric\.topograph\.run/tier-(\d+)$")


def _dump_all(docs: list[dict]) -> str:
    """Multi-document YAML.  Strings are written JSON-quoted (valid YAML, never
    reinterpreted as numbers or booleans); PyYAML's emitter takes seconds for the
    8,192 nodes of a large fabric, this takes a fraction of one."""
    out: list[str] = []
    for d in docs:
        out.append("---\n")
        _emit(d, 0, out)
    return "".join(out)


def _scalar(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    return json.dumps(str(v))


def _emit(obj, indent: int, out: list[str]) -> None:
    pad = " " * indent
    if isinstance(obj, dict):
        for k, v in obj.items():
            key = k if _PLAIN_KEY.match(k) else json.dumps(k)
            if isinstance(v, dict) and v:
                out.append(f"{pad}{key}:\n")
                _emit(v, indent + 2, out)
            elif isinstance(v, list) and v:
                out.append(f"{pad}{key}:\n")
                _emit(v, indent, out)
            elif isinstance(v, (dict, list)):
                out.append(f"{pad}{key}: {'{}' if isinstance(v, dict) else '[]'}\n")
            else:
                out.append(f"{pad}{key}: {_scalar(v)}\n")
    else:
        for item in obj:
            if isinstance(item, dict) and item:
                first = True
                for k, v in item.items():
                    lead = f"{pad}- " if first else f"{pad}  "
                    first = False
                    if isinstance(v, (dict, list)) and v:
                        out.append(f"{lead}{k}:\n")
                        _emit(v, indent + 4 if isinstance(v, dict) else indent + 2, out)
                    else:
                        out.append(f"{lead}{k}: {_scalar(v)}\n")
            else:
                out.append(f"{pad}- {_scalar(item)}\n")


_PLAIN_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


def levels(labels: dict[str, dict[str, str]]) -> list[str]:
    tiers = sorted({int(m.group(1)) for l in labels.values() for k in l if (m := _TIER.match(k))},
                   reverse=True)
    out = [f"{k8s.TIER_PREFIX}{t}" for t in tiers]
    if any(k8s.DOMAIN_KEY in l for l in labels.values()):
        out.append(k8s.DOMAIN_KEY)
    out.append(HOSTNAME)
    return out


def kueue_manifests(labels: dict[str, dict[str, str]], opts) -> str:
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
    return _dump_all([topology, flavor])


def kwok_nodes(labels: dict[str, dict[str, str]], opts) -> str:
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
        docs.append({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": node,
                "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0",
                                "topograph.run/instance": node, "topograph.run/region": "local"},
                "labels": node_labels,
            },
            "spec": {"taints": [{"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}]},
            "status": {
                "allocatable": dict(capacity),
                "capacity": dict(capacity),
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                "message": "kubelet is posting ready status"}],
                "nodeInfo": _node_info(node),
                "phase": "Running",
            },
        })
    return _dump_all(docs)


def _node_info(node: str) -> dict[str, str]:
    """Node.status.nodeInfo with every field the Node schema requires; the ids are
    derived from the name so that the same fabric gives the same manifests."""
    h = hashlib.sha1(node.encode()).hexdigest()
    uuid = f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"
    return {"architecture": "amd64", "operatingSystem": "linux", "machineID": h[:32],
            "systemUUID": uuid, "bootID": uuid, "kernelVersion": "fake", "osImage": "fake",
            "containerRuntimeVersion": "fake", "kubeletVersion": "fake",
            "kubeProxyVersion": "fake"}
