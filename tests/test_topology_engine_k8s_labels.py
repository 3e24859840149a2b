"""Kubernetes node labels (engines/k8s_labels.py), in-process."""

from __future__ import annotations

import json

import pytest
from topology_graphs import racks, two_leaves

from fabriclab.topology.engines.k8s_labels import (
    LabelError,
    kubectl_script,
    label_value,
    labels_json,
    node_labels,
)
from fabriclab.topology.fnv import fnv1a64
from fabriclab.topology.graph import DomainMap, Graph


def test_fnv1a64_is_gos_hash_fnv_new64a():
    # Go: fnv.New64a() over "" and "a" (the FNV reference values)
    assert fnv1a64(b"") == 0xCBF29CE484222325
    assert fnv1a64(b"a") == 0xAF63DC4C8601EC8C


def test_label_values_over_63_characters_are_hashed():
    assert label_value("x" * 63) == "x" * 63
    assert label_value("x" * 64) == f"x{fnv1a64(b'x' * 64):x}"


def test_node_labels_tiers_closest_first_and_domains():
    labels = node_labels(two_leaves())
    assert labels["n1"] == {
        "fabric.topograph.run/tier-0": "leaf1",
        "fabric.topograph.run/tier-1": "spine",
        "accelerator.topograph.run/domain": "nvl-a",
    }


def test_node_labels_sub_domain():
    labels = node_labels(Graph(None, racks(2, 1)))
    assert labels["n2"] == {
        "accelerator.topograph.run/domain": "nvl",
        "accelerator.topograph.run/sub-domain": "rack1",
    }


def test_a_node_in_two_domains_is_a_label_error():
    domains = DomainMap()
    domains.add_host("a", "i1", "n1")
    domains.add_host("b", "i1", "n1")
    with pytest.raises(LabelError, match="multiple accelerator labels a, b for node n1"):
        node_labels(Graph(None, domains))


def test_labels_json_sorted():
    text = labels_json({"n2": {"b": "1", "a": "2"}, "n1": {}})
    assert list(json.loads(text)) == ["n1", "n2"] and text.index('"a"') < text.index('"b"')


def test_kubectl_script_removes_stale_tier_labels():
    script = kubectl_script(
        {
            "n1": {"fabric.topograph.run/tier-0": "l", "fabric.topograph.run/tier-1": "s"},
            "n2": {"fabric.topograph.run/tier-0": "l"},
        }
    )
    assert script.splitlines()[-1] == (
        "kubectl label node n2 --overwrite fabric.topograph.run/tier-0=l "
        "fabric.topograph.run/tier-1-"
    )
