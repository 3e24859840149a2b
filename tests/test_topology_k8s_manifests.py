"""Kubernetes-facing output checked offline against the schemas its consumers enforce.

- KWOK ``Node`` objects: the Kubernetes 1.37 strict schema (``kubernetes-validate``).
- Kueue ``Topology`` and ``ResourceFlavor`` (kueue.x-k8s.io/v1beta2): the openAPIV3Schema
  of Kueue's CRDs (``config/components/crd/bases``), transcribed below as JSON Schema,
  plus the CRDs' CEL rules (``x-kubernetes-validations``) written out as Python checks.
- Every label key and value: Kubernetes' label syntax (apimachinery's IsQualifiedName
  and IsValidLabelValue).
"""

from __future__ import annotations

import json
import re

import jsonschema
import kubernetes_validate
import pytest
import yaml
from conftest import SPECS

from fabriclab.model.build import build
from fabriclab.spec.load import load_spec
from fabriclab.topology import inputs as topology_inputs
from fabriclab.topology.engines import EngineOptions, run
from fabriclab.topology.providers import local_graph

K8S_VERSION = "1.37.0"

# Kueue v1beta2 CRDs: topologies.kueue.x-k8s.io and resourceflavors.kueue.x-k8s.io.
_LABEL_KEY = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
_OBJECT = {
    "apiVersion": {"type": "string"},
    "kind": {"type": "string"},
    "metadata": {"type": "object"},
}
TOPOLOGY_SCHEMA = {
    "type": "object",
    "properties": {
        **_OBJECT,
        "spec": {
            "type": "object",
            "required": ["levels"],
            "properties": {
                "levels": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": 16,
                    "items": {
                        "type": "object",
                        "required": ["nodeLabel"],
                        "properties": {
                            "nodeLabel": {
                                "type": "string",
                                "minLength": 1,
                                "maxLength": 316,
                                "pattern": _LABEL_KEY,
                            }
                        },
                    },
                }
            },
        },
    },
}
RESOURCE_FLAVOR_SCHEMA = {
    "type": "object",
    "properties": {
        **_OBJECT,
        "spec": {
            "type": "object",
            "properties": {
                "nodeLabels": {
                    "type": "object",
                    "maxProperties": 8,
                    "additionalProperties": {"type": "string"},
                },
                "topologyName": {"type": "string", "maxLength": 253, "pattern": _DNS_SUBDOMAIN},
            },
        },
    },
}


def topology_cel(obj: dict) -> list[str]:
    """The Topology CRD's CEL rules on spec.levels (the create-time ones)."""
    labels = [lvl["nodeLabel"] for lvl in obj["spec"]["levels"]]
    out = []
    if len(set(labels)) != len(labels):
        out.append("must be unique")
    if "kubernetes.io/hostname" in labels and labels[-1] != "kubernetes.io/hostname":
        out.append("the kubernetes.io/hostname label can only be used at the lowest level")
    return out


def flavor_cel(obj: dict) -> list[str]:
    spec = obj["spec"]
    if "topologyName" in spec and len(spec.get("nodeLabels") or {}) < 1:
        return ["at least one nodeLabel is required when topology is set"]
    return []


# Kubernetes label syntax (apimachinery validation: IsQualifiedName, IsValidLabelValue).
_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)


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


def _metadata_name_ok(name: str) -> bool:
    return len(name) <= 253 and re.match(_DNS_SUBDOMAIN, name) is not None


CASES = [
    ("lab", False, False),
    ("gb200-su", False, False),
    ("gb200-su", False, True),
    ("h100-su", True, False),
    (str(SPECS / "three-tier-hdr.yaml"), False, True),
    (str(SPECS / "skewed-rails.yaml"), False, False),
]


def _engine(spec: str, engine: str, compat: bool, names: bool) -> str:
    cluster = build(load_spec(spec))
    inputs = topology_inputs.from_cluster(cluster)
    graph = local_graph(inputs, None, compat=compat, names=names)
    return run(engine, graph, EngineOptions(gpus=inputs.gpus))


@pytest.mark.parametrize(
    "spec,compat,names", CASES, ids=lambda v: v.rsplit("/", 1)[-1] if isinstance(v, str) else str(v)
)
def test_kwok_nodes_are_valid_kubernetes_nodes(spec, compat, names):
    docs = [d for d in yaml.safe_load_all(_engine(spec, "kwok", compat, names)) if d]
    assert docs and all(d["kind"] == "Node" for d in docs)
    for doc in docs:
        # strict: unknown fields are errors too
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        assert _metadata_name_ok(doc["metadata"]["name"])
        for key, value in doc["metadata"]["labels"].items():
            assert label_problems(key, value) == [], (doc["metadata"]["name"], key, value)
        gpus = doc["status"]["capacity"]["nvidia.com/gpu"]
        assert int(gpus) > 0


def test_kwok_node_schema_check_can_fail():
    """The validator is live: a Node with a bad field is refused."""
    doc = yaml.safe_load(_engine("lab", "kwok", False, False).split("---\n")[1])
    doc["spec"]["taints"][0]["effect"] = 7
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


@pytest.mark.parametrize(
    "spec,compat,names", CASES, ids=lambda v: v.rsplit("/", 1)[-1] if isinstance(v, str) else str(v)
)
def test_kueue_manifests_validate_against_the_crds(spec, compat, names):
    docs = [d for d in yaml.safe_load_all(_engine(spec, "kueue", compat, names)) if d]
    kinds = {d["kind"]: d for d in docs}
    assert set(kinds) == {"Topology", "ResourceFlavor"}
    topo, flavor = kinds["Topology"], kinds["ResourceFlavor"]
    for d in docs:
        assert d["apiVersion"] == "kueue.x-k8s.io/v1beta2"
        assert _metadata_name_ok(d["metadata"]["name"])
    jsonschema.validate(topo, TOPOLOGY_SCHEMA)
    jsonschema.validate(flavor, RESOURCE_FLAVOR_SCHEMA)
    assert topology_cel(topo) == [] and flavor_cel(flavor) == []
    assert flavor["spec"]["topologyName"] == topo["metadata"]["name"]
    # the levels are exactly the labels the nodes carry, largest first, hostname last
    labels = json.loads(_engine(spec, "k8s-labels", compat, names))
    carried = set().union(*(set(v) for v in labels.values()))
    levels = [lvl["nodeLabel"] for lvl in topo["spec"]["levels"]]
    assert levels[-1] == "kubernetes.io/hostname"
    assert set(levels[:-1]) == carried
    tiers = [lvl for lvl in levels if lvl.startswith("fabric.topograph.run/tier-")]
    assert tiers == sorted(tiers, key=lambda k: -int(k.rsplit("-", 1)[1]))


def test_kueue_schema_and_rules_can_fail():
    topo = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Topology",
        "metadata": {"name": "t"},
        "spec": {"levels": [{"nodeLabel": "kubernetes.io/hostname"}, {"nodeLabel": "a/b"}]},
    }
    assert topology_cel(topo)
    topo["spec"]["levels"] = [{"nodeLabel": "Bad_Prefix/x"}]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(topo, TOPOLOGY_SCHEMA)
    topo["spec"]["levels"] = [{"nodeLabel": f"l{i}"} for i in range(17)]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(topo, TOPOLOGY_SCHEMA)


@pytest.mark.parametrize(
    "spec,compat,names", CASES, ids=lambda v: v.rsplit("/", 1)[-1] if isinstance(v, str) else str(v)
)
def test_node_labels_obey_kubernetes_label_syntax(spec, compat, names):
    labels = json.loads(_engine(spec, "k8s-labels", compat, names))
    assert labels
    for node, kv in labels.items():
        for key, value in kv.items():
            assert label_problems(key, value) == [], (node, key, value)


@pytest.mark.parametrize(
    "key,value,problem",
    [
        ("fabric.topograph.run/tier-0", "x" * 64, "value"),
        ("fabric.topograph.run/tier-0", "-leading", "value"),
        ("Fabric.run/tier", "v", "prefix"),
        ("a/" + "k" * 64, "v", "name"),
        ("", "v", "name"),
    ],
)
def test_label_problems_names_what_is_wrong(key, value, problem):
    assert any(problem in p for p in label_problems(key, value))
