"""Kueue and KWOK manifests (engines/kueue_kwok.py) and the engines' YAML text
(engines/yaml_text.py), in-process."""

from __future__ import annotations

import yaml

from fabriclab.topology.engines import EngineOptions
from fabriclab.topology.engines.kueue_kwok import kueue_manifests, kwok_nodes, levels
from fabriclab.topology.engines.yaml_text import dump_all, go_scalar, quoted_scalar

LABELS = {
    "n1": {
        "fabric.topograph.run/tier-0": "leaf",
        "fabric.topograph.run/tier-1": "spine",
        "accelerator.topograph.run/domain": "nvl",
    },
    "n2": {"fabric.topograph.run/tier-0": "leaf"},
}


def test_levels_largest_first_then_domain_then_host():
    assert levels(LABELS) == [
        "fabric.topograph.run/tier-1",
        "fabric.topograph.run/tier-0",
        "accelerator.topograph.run/domain",
        "kubernetes.io/hostname",
    ]
    assert levels({}) == ["kubernetes.io/hostname"]


def test_kueue_topology_and_flavor_name_each_other():
    topology, flavor = yaml.safe_load_all(kueue_manifests(LABELS, EngineOptions()))
    assert topology["metadata"]["name"] == flavor["spec"]["topologyName"] == "nvl"
    assert flavor["spec"]["nodeLabels"] == {"nvidia.com/gpu.present": "true"}


def test_kwok_nodes_carry_labels_and_gpus():
    n1, n2 = yaml.safe_load_all(kwok_nodes(LABELS, EngineOptions(gpus={"n1": 4})))
    assert n1["metadata"]["labels"]["fabric.topograph.run/tier-1"] == "spine"
    assert n1["status"]["capacity"]["nvidia.com/gpu"] == "4"
    assert "nvidia.com/gpu" not in n2["status"]["capacity"]
    assert n1["status"]["nodeInfo"]["systemUUID"] != n2["status"]["nodeInfo"]["systemUUID"]


def test_scalars_in_both_styles():
    assert [go_scalar(v) for v in (True, 7, "topo1", "a: b", "true")] == [
        "true",
        "7",
        "topo1",
        "'a: b'",
        "'true'",
    ]
    assert [quoted_scalar(v) for v in (False, 1.5, "true")] == ["false", "1.5", '"true"']


def test_dump_all_reads_back():
    docs = [{"a": {"b": [1, {"c": "d", "e": []}]}, "x-y": {}}, {"z": "2"}]
    assert list(yaml.safe_load_all(dump_all(docs))) == docs
