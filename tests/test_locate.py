"""Cluster.locate, the one resolver of where a tool runs (render --from, SIM_HOST, up
--sm-at, the server's attach): every form it accepts and every way it says no."""

from __future__ import annotations

import pytest

from fabriclab.model.build import build
from fabriclab.model.cluster import Cluster, Tray, find_port
from fabriclab.spec.load import load_spec, parse_spec_text

LAB = build(load_spec("lab"))
LEAF = "MF0;LAB-IBLEAF-01:MQM9701/U1"


def _ca(desc: str):
    return LAB.fabric.find(desc)


@pytest.mark.parametrize(
    "text,desc",
    [
        (None, "sched-worker1 mlx5_0"),  # the first tray's first HCA
        ("sched-worker2", "sched-worker2 mlx5_0"),
        ("sched-worker2:mlx5_3", "sched-worker2 mlx5_3"),
        ("sched-worker2/mlx5_3", "sched-worker2 mlx5_3"),
        ("sched-worker2:mlx5_3:1", "sched-worker2 mlx5_3"),
        ("sched-worker1 mlx5_2", "sched-worker1 mlx5_2"),  # a CA by description
    ],
)
def test_ca_forms(text, desc):
    for switches in (False, True):
        port, problem = LAB.locate(text, switches=switches)
        assert problem == "" and port is not None
        assert port.node is _ca(desc) and port.num == 1


def test_a_ca_by_node_id_and_guid():
    ca = _ca("sched-worker2 mlx5_1")
    assert LAB.locate(ca.label)[0] is ca.ports[1]
    assert LAB.locate(f"0x{ca.guid:016x}")[0] is ca.ports[1]


@pytest.mark.parametrize(
    "text,problem",
    [
        ("nosuch", "no tray, CA or node 'nosuch' in this fabric"),
        (
            "sched-worker1:mlx5_9",
            "tray 'sched-worker1' has no HCA 'mlx5_9' (it has mlx5_0, mlx5_1, mlx5_2, mlx5_3)",
        ),
        ("sched-worker1:mlx5_0:x", "bad port 'x'"),
        ("sched-worker1:mlx5_0:2", "sched-worker1 mlx5_0 has ports 1-1"),
        (LEAF, f"{LEAF!r} is a switch; run from a tray or CA"),
    ],
)
def test_what_a_tool_cannot_run_from(text, problem):
    assert LAB.locate(text) == (None, problem)
    assert find_port(LAB, text) == (None, problem)


def test_switches_where_the_caller_allows_them():
    """A switch by description, id or GUID is reached at its port 0; any node takes
    ``:PORT``, within its ports."""
    leaf = LAB.fabric.find(LEAF)
    for text in (LEAF, leaf.label, f"0x{leaf.guid:016x}"):
        assert LAB.locate(text, switches=True) == (leaf.ports[0], "")
    assert LAB.locate(f"{leaf.label}:7", switches=True) == (leaf.ports[7], "")
    assert LAB.locate(f"{leaf.label}:0", switches=True) == (leaf.ports[0], "")
    assert LAB.locate(f"{leaf.label}:66", switches=True) == (None, f"{LEAF!r} has no port 66")
    ca = _ca("sched-worker1 mlx5_1")
    assert LAB.locate(f"{ca.label}:1", switches=True) == (ca.ports[1], "")
    assert LAB.locate(f"{ca.label}:0", switches=True) == (
        None,
        "'sched-worker1 mlx5_1' has no port 0",
    )
    # a CA with ``:PORT`` only where switches are allowed (render --from does not take it)
    assert LAB.locate(f"{ca.label}:1")[0] is None
    # and what names nothing still says so
    assert LAB.locate("nosuch:3", switches=True) == (
        None,
        "no tray, CA or node 'nosuch:3' in this fabric",
    )
    assert LAB.locate("", switches=True) == (None, "no tray, CA or node '' in this fabric")


def test_a_fabric_without_a_ca():
    spec = parse_spec_text(
        "name: bare\nfabric:\n  explicit:\n    switches:\n      - name: sw1\n", "bare.yaml"
    )
    cluster = build(spec)
    assert cluster.locate(None) == (None, "the fabric has no CA to run from")


def test_a_tray_without_hcas():
    cluster = Cluster("gpus-only", LAB.fabric, [Tray("g1")], [])
    assert cluster.locate("g1") == (None, "tray 'g1' has no HCA")
    # no tray has an HCA: the first CA of the fabric
    assert cluster.locate(None)[0] is LAB.fabric.cas()[0].ports[1]
