"""A miswired fabric (``fabriclab up --swap A,B``) and ``fabriclab check``: the model
keeps the intended cabling (the spec) and serves the actual one; the checker names both
ends of each wrong cable, in process and from the real ibnetdiscover's dump."""

from __future__ import annotations

import re

import pytest
from fabric_server import fabric_up
from helpers import fl, no_timestamp

from fabriclab.errors import InputError
from fabriclab.formats import ibnetdiscover
from fabriclab.model import miswire
from fabriclab.model.build import build
from fabriclab.model.cluster import find_port
from fabriclab.spec.load import load_spec

LEAF, SPINE = "MF0;LAB-IBLEAF-01:MQM9701/U1", "MF0;LAB-IBSPINE-01:MQM9701/U1"
W1, W2, W1B = "sched-worker1 mlx5_0", "sched-worker2 mlx5_0", "sched-worker1 mlx5_1"
SWAPS = ["LAB-IBLEAF-01[1],LAB-IBLEAF-01[5]", "LAB-IBLEAF-01[2],LAB-IBSPINE-01[5]"]


def _miswired():
    cluster = build(load_spec("lab"))
    for pair in SWAPS:
        miswire.swap(cluster, *pair.split(","))
    return cluster


def _expected() -> list[str]:
    return [
        f'wrong cable "{LEAF}"[1] <-> "{W2}"[1] (the spec cables "{LEAF}"[1] to "{W1}"[1]; '
        f'the spec cables "{W2}"[1] to "{LEAF}"[5])',
        f'wrong cable "{LEAF}"[5] <-> "{W1}"[1] (the spec cables "{LEAF}"[5] to "{W2}"[1]; '
        f'the spec cables "{W1}"[1] to "{LEAF}"[1])',
        f'wrong cable "{SPINE}"[5] <-> "{W1B}"[1] ("{SPINE}"[5] is free; '
        f'the spec cables "{W1B}"[1] to "{LEAF}"[2])',
    ]


def test_swap_and_compare_in_process():
    intended = build(load_spec("lab")).fabric
    actual = _miswired().fabric
    assert miswire.compare(intended, intended) == []
    assert sorted(miswire.compare(intended, actual)) == sorted(_expected())
    assert actual.find(LEAF).ports[2].peer is None and actual.link_count() == intended.link_count()


@pytest.mark.parametrize(
    ("a", "b", "what"),
    [
        ("LAB-IBLEAF-01[1]", "sched-worker1/mlx5_0[1]", "both ends of one cable"),
        ("LAB-IBLEAF-01[40]", "LAB-IBLEAF-01[41]", "neither port is cabled"),
        ("LAB-IBLEAF-01[99]", "LAB-IBLEAF-01[1]", "has no port 99"),
        ("nosuch[1]", "LAB-IBLEAF-01[1]", "no switch or HCA 'nosuch'"),
        ("LAB-IBLEAF-01", "LAB-IBLEAF-01[1]", "a port is written SWITCH[port]"),
    ],
)
def test_a_bad_swap_is_one_error_and_changes_nothing(a, b, what):
    cluster = build(load_spec("lab"))
    before = cluster.fabric.signature()
    with pytest.raises(InputError) as e:
        miswire.swap(cluster, a, b)
    assert what in e.value.problems[0].what
    assert cluster.fabric.signature() == before


@pytest.mark.realtools
def test_real_ibnetdiscover_on_a_served_miswired_fabric_and_check(real_tools, tmp_path):
    extra = [a for s in SWAPS for a in ("--swap", s)]
    with fabric_up("lab", tmp_path, extra=extra) as f:
        real = f.run("sched-worker2", "ibnetdiscover").stdout
    # the real tool sees the actual cabling, exactly as the model of it renders
    miswired = _miswired()
    start, _ = find_port(miswired, "sched-worker2")
    assert no_timestamp(real) == no_timestamp(ibnetdiscover.render(miswired.fabric, start))
    # the leaf's port 1 leads to worker2 now, the spine's port 5 to worker1's mlx5_1
    assert re.search(rf'^\[1\]\s+"H-[0-9a-f]+"\[1\]\([0-9a-f]+\)\s+# "{W2}"', real, re.M)
    assert re.search(rf'^\[5\]\s+"H-[0-9a-f]+"\[1\]\([0-9a-f]+\)\s+# "{W1B}"', real, re.M)
    dump = tmp_path / "miswired.ibnetdiscover"
    dump.write_text(real)
    r = fl("check", "lab", "--ibnetdiscover", str(dump))
    assert r.returncode == 1, r.stderr
    assert sorted(r.stdout.splitlines()) == sorted(_expected())
    # the intended fabric checks clean
    good = tmp_path / "good.ibnetdiscover"
    intended = build(load_spec("lab"))
    good.write_text(ibnetdiscover.render(intended.fabric, find_port(intended, None)[0]))
    r = fl("check", "lab", "--ibnetdiscover", str(good))
    assert (r.returncode, r.stdout) == (0, ""), r.stderr
