"""The collective model in process: NCCL's closed forms where they apply, nccl-tests'
bandwidth factors, the knobs NCCL reads, and what a placement costs on the fabric
(an oversubscribed tier, a failed uplink, fewer HCAs, crossed rails, SHARP)."""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path

import pytest

from fabriclab.errors import InputError
from fabriclab.formats import nccl_tests
from fabriclab.gpus import MODELS
from fabriclab.ib.enums import PhysState, PortState
from fabriclab.ib.rates import data_bytes_per_s, speed, width
from fabriclab.model.build import build
from fabriclab.sim.fabric import routed
from fabriclab.sim.fabric.datapaths import Snapshot
from fabriclab.sim.fabric.state import SimFabric
from fabriclab.sim.live.collectives import knobs, run, tuning
from fabriclab.sim.live.collectives.estimate import OPS
from fabriclab.sim.live.traffic.routes import WIRE_OVERHEAD_BYTES
from fabriclab.spec.load import load_spec

GIB = 1 << 30
ROOT = Path(__file__).resolve().parents[1]


@functools.cache
def fabric(spec: str):
    cluster = build(load_spec(spec))
    sim = run.routed_fabric(cluster)
    return cluster, sim, Snapshot(sim)


def est(spec: str, nodes: str, op: str = "all-reduce", size: int = GIB, env=None, **kw) -> dict:
    c, sim, snap = fabric(spec)
    return run.estimate(c, sim, run.Request(op, size, nodes, env=env, **kw), snap)


def nic_GBps() -> float:
    """What an NDR 4x link carries of payload at a 4096-byte MTU (GB/s)."""
    cap = data_bytes_per_s(width("4x"), speed("NDR"))
    return cap / ((4096 + WIRE_OVERHEAD_BYTES) / 4096) / 1e9


def test_ring_all_reduce_in_one_nvlink_partition_is_ncclss_closed_form():
    # 8 GB200 GPUs of two trays in one NVL72 domain: NCCL's ring latency (base 8.4 us +
    # 2(n-1) NVLink steps of 3.4 us, Simple) plus the bytes over n/(2(n-1)) of the GPUs'
    # NVLink bandwidth as NCCL counts it (18 x 40.1 GB/s)
    n, size = 8, GIB
    d = est("gb200-su", "gb-r01-t[01-02]", size=size, algo="ring", proto="simple")
    assert (d["algorithm"], d["protocol"], d["nodes"], d["ranks"]) == ("Ring", "Simple", 1, n)
    lat = 8.4 + 2 * (n - 1) * 3.4
    algbw = 18 * 40.1 * n / (2 * (n - 1))
    assert MODELS["gb200"].nccl_nvlink_GBps == pytest.approx(18 * 40.1)
    assert d["time_s"] * 1e6 == pytest.approx(lat + size / (1000 * algbw), rel=1e-9)
    assert d["links"] == []  # nothing on InfiniBand


def test_across_partitions_the_infiniband_term_dominates():
    inside = est("gb200-su", "gb-r01-t[01-02]", size=8 * GIB, algo="ring", proto="simple")
    across = est("gb200-su", "gb-r0[1-2]-t01", size=8 * GIB, algo="ring", proto="simple")
    assert across["nodes"] == 2 and across["time_s"] > 3 * inside["time_s"]
    # each tray's 4 HCAs, each at its link's payload rate: the bus bandwidth
    assert across["busbw_GBps"] == pytest.approx(4 * nic_GBps(), rel=0.01)
    assert {x["from"].split("[")[0] for x in across["links"]} >= {
        f"gb-r0{r}-t01/mlx5_{i}" for r in (1, 2) for i in range(4)
    }


@pytest.mark.parametrize("op", list(OPS))
def test_bus_bandwidth_is_ncclss_factor_of_the_algorithm_bandwidth(op):
    d = est("gb200-su", "gb-r0[1-2]-t01", op=op, size=GIB)
    binary = OPS[op][1]
    assert d["busbw_GBps"] == pytest.approx(d["algbw_GBps"] * nccl_tests.bus_factor(binary, 8))
    assert d["algbw_GBps"] == pytest.approx(GIB / d["time_s"] / 1e9)


def test_nccl_algo_proto_and_channels_act_on_it():
    assert est("h100-su", "dgx[001-002]", env={"NCCL_ALGO": "tree"})["algorithm"] == "Tree"
    assert est("h100-su", "dgx[001-002]", env={"NCCL_PROTO": "LL"})["protocol"] == "LL"
    with pytest.raises(InputError) as e:  # CollNet off, NVLS within one group only
        est("h100-su", "dgx[001-002]", env={"NCCL_ALGO": "^ring,tree"})
    assert str(e.value).startswith("collective: no algorithm can run AllReduce here (Tree: left")
    one = est("gb200-su", "gb-r0[1-2]-t01", size=8 * GIB, env={"NCCL_MAX_NCHANNELS": "1"})
    assert one["channels"] == 1
    assert one["busbw_GBps"] == pytest.approx(nic_GBps(), rel=0.01)  # one HCA carries it


def test_nccl_ib_hca_restricted_to_two_hcas_halves_the_infiniband_bandwidth():
    all4 = est("gb200-su", "gb-r0[1-2]-t01", size=8 * GIB)
    two = est("gb200-su", "gb-r0[1-2]-t01", size=8 * GIB, env={"NCCL_IB_HCA": "=mlx5_0,mlx5_1"})
    assert two["busbw_GBps"] == pytest.approx(all4["busbw_GBps"] / 2, rel=0.01)
    used = {x["from"].split("/")[1].split("[")[0] for x in two["links"] if "/" in x["from"]}
    assert used == {"mlx5_0", "mlx5_1"}
    left_out = est("gb200-su", "gb-r0[1-2]-t01", size=8 * GIB, env={"NCCL_IB_HCA": "^mlx5_3"})
    assert left_out["busbw_GBps"] == pytest.approx(all4["busbw_GBps"] * 3 / 4, rel=0.02)


def test_spread_under_two_oversubscribed_leaves_is_slower_than_under_one():
    one = est("tests/specs/coll-oversub.yaml", "n[01-16]", op="all-to-all")
    two = est("tests/specs/coll-oversub.yaml", "n[01-08],n[17-24]", op="all-to-all")
    assert two["time_s"] > 1.5 * one["time_s"]
    spines = [x for x in two["links"] if "SPINE" in x["to"]]
    assert spines and all(x["GBps"] <= x["capacity_GBps"] for x in spines)
    assert not [x for x in one["links"] if "SPINE" in (x["to"] or "")]


def test_a_failed_uplink_on_the_path_raises_the_time():
    base = est("tests/specs/coll-oversub.yaml", "n[01-08],n[17-24]", op="all-to-all")
    cluster = build(load_spec("tests/specs/coll-oversub.yaml"))
    sim = SimFabric(cluster.fabric)
    uplink = next(
        p
        for n in sim.nodes
        if n.is_switch and "LEAF-01" in str(n.fabric_node.name)
        for p in n.ports[1:]
        if p is not None and p.peer is not None and p.peer.node.is_switch
    )
    for q in (uplink, uplink.peer):
        q.phys, q.state = PhysState.POLLING, PortState.DOWN
    start, _ = cluster.locate(None)
    routed.configure(sim, sim.port_of(start))  # the routes around it, as an SM sweeps
    req = run.Request("all-to-all", GIB, "n[01-08],n[17-24]")
    after = run.estimate(cluster, sim, req)
    assert after["time_s"] > 1.5 * base["time_s"]


def test_a_rail_misaligned_placement_costs_more_than_an_aligned_one():
    aligned = est("tests/specs/coll-rails.yaml", "r[1-8]:0")
    crossed = est("tests/specs/coll-rails.yaml", "r1:0,r2:1,r3:2,r4:3,r5:0,r6:1,r7:2,r8:3")
    assert crossed["time_s"] > 1.5 * aligned["time_s"]
    assert not [x for x in aligned["links"] if "SPINE" in (x["to"] or "")]
    assert [x for x in crossed["links"] if "SPINE" in (x["to"] or "")]


def test_sharp_lowers_the_all_reduce_time_where_the_switches_allow_it():
    on = {"NCCL_COLLNET_ENABLE": "1"}
    ring = est("tests/specs/coll-sharp.yaml", "s[1-8]")
    sharp = est("tests/specs/coll-sharp.yaml", "s[1-8]", env=on)
    assert sharp["algorithm"] == "CollNetDirect" and sharp["time_s"] < 0.7 * ring["time_s"]
    # SHARP's tree ends in a switch: the spine's links carry one stream per leaf
    assert any(x["to"] is not None and "SPINE" in x["to"] for x in sharp["links"])
    plain = est("tests/specs/coll-rails.yaml", "r[1-8]", env=on)
    assert plain["algorithm"] != "CollNetDirect"
    assert "CollNetDirect: no switch on the fabric has a SHARP Aggregation Node" in plain["why"]


def test_point_to_point_over_nvlink_and_infiniband():
    d = est("gb200-su", "gb-r0[1-2]-t01", op="send-recv", size=8 * GIB, gpus_per_node=1)
    # one rank per tray, one HCA each way: the link's payload rate
    assert d["algbw_GBps"] == pytest.approx(nic_GBps(), rel=0.01)
    nv = est("gb200-su", "gb-r01-t[01-02]", op="all-to-all", size=8 * GIB)
    assert nv["links"] == [] and nv["algbw_GBps"] > 5 * nic_GBps()


def test_the_hca_filter_reads_as_nccl_reads_it():
    f = knobs.HcaFilter.parse
    assert f("mlx5").allows("mlx5_3") and f("mlx5_1").allows("mlx5_10")
    assert not f("=mlx5_1").allows("mlx5_10") and f("=mlx5_1").allows("mlx5_1")
    assert not f("^mlx5_0").allows("mlx5_0") and f("^mlx5_0").allows("mlx5_1")
    assert not f("^=mlx5_0,mlx5_1:1").allows("mlx5_1") and f("^=mlx5_0").allows("mlx5_01")
    assert f("mlx5_0:2").allows("mlx5_0", 2) and not f("mlx5_0:2").allows("mlx5_0", 1)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"NCCL_ALGO": "ring,bogus"}, "NCCL_ALGO: unknown name 'bogus'; one of: Tree, Ring"),
        ({"NCCL_PROTO": "allreduce:LL;Simple"}, "NCCL_PROTO: every entry but the first"),
        ({"NCCL_ALGO": "allgather:ring;foo:tree"}, "NCCL_ALGO: unknown collective 'foo'"),
        ({"NCCL_MAX_NCHANNELS": "0"}, "NCCL_MAX_NCHANNELS: 0 is out of range 1-64"),
        ({"NCCL_MIN_NCHANNELS": "x"}, "NCCL_MIN_NCHANNELS: want an integer, not 'x'"),
        ({"NCCL_CROSS_NIC": "3"}, "NCCL_CROSS_NIC: 3 is out of range 0-2"),
        ({"NCCL_IB_HCA": "mlx5_0:x"}, "NCCL_IB_HCA: port 'x' of 'mlx5_0' is not a number"),
    ],
)
def test_bad_knobs_are_one_line_errors(env, message):
    with pytest.raises(InputError) as e:
        knobs.Knobs.read(env, "AllReduce")
    assert str(e.value).startswith(message), str(e.value)
    assert "\n" not in str(e.value)


def test_nccl_algo_per_collective():
    k = knobs.Knobs.read({"NCCL_ALGO": "ring;allreduce:tree"}, "AllReduce")
    assert k.algos == {tuning.TREE}
    k = knobs.Knobs.read({"NCCL_ALGO": "ring;allreduce:tree"}, "AllGather")
    assert k.algos == {tuning.RING}
    k = knobs.Knobs.read({"NCCL_PROTO": "^LL128"}, "AllReduce")
    assert k.protos == {tuning.LL, tuning.SIMPLE}


@pytest.mark.parametrize(
    ("nodes", "message"),
    [
        ("gb-r01-t01:7", "gb-r01-t01: GPU 7: the tray has 4 GPUs"),
        ("nope[1-2]", "nope1: no such tray"),
        ("gb-r01-t01:2-1", "--nodes: GPUs '2-1': the range runs backwards"),
        ("gb-r01-t01,gb-r01-t01", "--nodes: host 'gb-r01-t01' appears twice"),
    ],
)
def test_bad_placements_are_one_line_errors(nodes, message):
    with pytest.raises(InputError) as e:
        est("gb200-su", nodes)
    assert str(e.value).startswith(message), str(e.value)


def test_a_tray_left_without_an_hca_is_named():
    with pytest.raises(InputError) as e:
        est("gb200-su", "gb-r0[1-2]-t01", env={"NCCL_IB_HCA": "mlx6"})
    assert str(e.value) == "gb-r01-t01: NCCL_IB_HCA leaves this tray no HCA"


def test_the_calibration_table_of_the_docs_is_the_models():
    spec = importlib.util.spec_from_file_location("calibration", ROOT / "bench" / "calibration.py")
    calibration = importlib.util.module_from_spec(spec)
    sys.modules["calibration"] = calibration  # (its dataclasses look their module up)
    spec.loader.exec_module(calibration)
    page = (ROOT / "docs" / "collectives.md").read_text()
    for line in calibration.markdown():
        assert line in page, f"docs/collectives.md lacks the model's row:\n{line}"


def test_adaptive_routing_spreads_flows_over_equal_cost_paths():
    spec, nodes = "tests/specs/coll-adaptive.yaml", "n[01-08],n17,n19,n21,n23,n25,n27,n29,n31"
    off = {"NCCL_IB_ADAPTIVE_ROUTING": "0"}
    tables = est(spec, nodes, op="all-to-all", env=off)
    spread = est(spec, nodes, op="all-to-all")
    # by the tables, these trays' LIDs leave the first leaf by fewer uplinks than it has
    up = [x for x in spread["links"] if x["from"].startswith("IB-LEAF-01") and "SPINE" in x["to"]]
    assert len(up) == 2 and len({round(x["bytes"], -3) for x in up}) == 1
    up_tables = [
        x for x in tables["links"] if x["from"].startswith("IB-LEAF-01") and "SPINE" in x["to"]
    ]
    assert len(up_tables) < len(up)
    assert spread["time_s"] < 0.6 * tables["time_s"]
    # a fabric without it: the tables' paths whatever NCCL asks
    plain = est("tests/specs/coll-oversub.yaml", nodes, op="all-to-all")
    assert plain["time_s"] == pytest.approx(tables["time_s"])


def test_a_gpu_whose_nvlinks_failed_leaves_its_group_for_infiniband():
    cluster = build(load_spec("gb200-su"))
    sim = run.routed_fabric(cluster)
    req = run.Request("all-reduce", GIB, "gb-r01-t[01-02]")
    whole = run.estimate(cluster, sim, req)
    cluster.nvlink_fault("gb-r01-t02", [3])
    split = run.estimate(cluster, sim, req)
    assert (whole["nodes"], split["nodes"]) == (1, 2)
    assert whole["links"] == [] and split["links"]
    assert split["time_s"] > 3 * whole["time_s"]
