"""CA descriptions "<host> <hca>": one reading for the spec writer (import) and the topology
provider, in process."""

from __future__ import annotations

import pytest

from fabriclab.ib import rates
from fabriclab.ib.enums import NodeType
from fabriclab.model.cluster import host_and_hca
from fabriclab.model.fabric import Fabric, Node
from fabriclab.model.to_spec import spec_from_fabric
from fabriclab.topology.providers.infiniband import Report, hosts_of


@pytest.mark.parametrize(
    "desc,parts",
    [
        ("sched-worker1 mlx5_0", ("sched-worker1", "mlx5_0")),
        ("gpu-07.cluster mlx5", ("gpu-07.cluster", "mlx5")),
        ("node:1 HCA-1", ("node:1", "HCA-1")),
        ("MT4129 ConnectX7   Mellanox Technologies", None),
        ("Mellanox Technologies Aggregation Node", None),
        ("lonely", None),
        (" x y", None),
        ("x  y", None),
    ],
)
def test_host_and_hca(desc, parts):
    assert host_and_hca(desc) == parts


def _fabric(*descs: str) -> Fabric:
    f = Fabric()
    sw = f.add(Node(NodeType.SWITCH, 0x1000, 8, "MF0;sw1:MQM9700/U1", name="sw1"))
    for i, desc in enumerate(descs, 1):
        ca = f.add(Node(NodeType.CA, 0x2000 + 16 * i, 1, desc))
        f.connect(ca.port(1), sw.port(i), rates.WIDTHS["4x"], rates.SPEEDS["NDR"])
    return f


def test_hosts_and_trays_read_the_same_descriptions():
    """Every "<host> <hca>" CA is a host to the topology; the spec makes it a tray HCA only
    when both names are ones a spec keeps (an HCA name ends in its number)."""
    f = _fabric("a1 mlx5_0", "a1 mlx5_1", "b.lab hca", "c:1 mlx5_0", "MT4129 ConnectX7 Mellanox")
    report = Report()
    assert {h: [n.desc for n in cas] for h, cas in hosts_of(f, report).items()} == {
        "a1": ["a1 mlx5_0", "a1 mlx5_1"],
        "b.lab": ["b.lab hca"],
        "c:1": ["c:1 mlx5_0"],
    }
    assert [p.where for p in report.problems] == [f"CA 0x{0x2050:016x}"]
    spec = spec_from_fabric(f, "t")
    assert [(t["hosts"], [h["name"] for h in t["hcas"]]) for t in spec["trays"]] == [
        ("a1", ["mlx5_0", "mlx5_1"])
    ]
    assert [c["desc"] for c in spec["fabric"]["explicit"]["cas"]] == [
        "b.lab hca",
        "c:1 mlx5_0",
        "MT4129 ConnectX7 Mellanox",
    ]
