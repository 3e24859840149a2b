"""Every topograph expected output in tests/fixtures/topograph that applies, reproduced
byte for byte (or, where topograph's own test compares lines as a set, line for line)."""

from __future__ import annotations

import json

import pytest
from topograph_sets import (
    block_test_set,
    block_with_dfs_ib_test_set,
    block_with_diff_num_node_test_set,
    block_with_ib_test_set,
    block_with_multi_ib_test_set,
    short_name_test_set,
    tree_test_set,
)

from fabriclab.formats import nvidia_smi
from fabriclab.topology.cluset import compact
from fabriclab.topology.engines import k8s_labels
from fabriclab.topology.engines.slurm import (
    BLOCK,
    FLAT,
    TREE,
    BlockName,
    SlurmConfig,
    TopologySpec,
    generate,
)
from fabriclab.topology.graph import DomainMap, Graph
from fabriclab.topology.providers import infiniband
from fabriclab.topology.providers.simulation_model import SimulationModel

T = TopologySpec


def fixture(fixtures_dir, name: str) -> str:
    return (fixtures_dir / "topograph" / name).read_text()


CONF_CASES = [
    ("pkg_translate_topology_test.testTreeConfig.conf", tree_test_set, SlurmConfig(TREE)),
    (
        "pkg_translate_topology_test.testBlockConfig1_1.conf",
        block_test_set,
        SlurmConfig(BLOCK, [3]),
    ),
    (
        "pkg_translate_topology_test.testBlockConfig2.conf",
        block_with_multi_ib_test_set,
        SlurmConfig(BLOCK, [3]),
    ),
    (
        "pkg_translate_topology_test.testBlockConfig1_2.conf",
        block_with_ib_test_set,
        SlurmConfig(BLOCK, [3]),
    ),
    (
        "pkg_translate_topology_test.testBlockConfigDiffNumNodes.conf",
        block_with_diff_num_node_test_set,
        SlurmConfig(BLOCK),
    ),
    (
        "pkg_translate_topology_test.testBlockConfigDFS.conf",
        block_with_dfs_ib_test_set,
        SlurmConfig(BLOCK, [1]),
    ),
    (
        "pkg_translate_topology_test.shortNameExpectedResult.conf",
        short_name_test_set,
        SlurmConfig(TREE),
    ),
]

TREE_TOPOS = {
    "topo1": T(TREE, ["Node[201,205]"]),
    "topo2": T(TREE, ["Node[304,305]"], cluster_default=True),
}
BLOCK_TOPOS = {
    "topo1": T(BLOCK, ["Node[104,105]"], cluster_default=True),
    "topo2": T(BLOCK, ["Node[301,303]"]),
}
MIXED = {
    "topo1": T(TREE, ["Node[201,205]"]),
    "topo2": T(TREE, ["Node[104,105]", "Node[201,205-207]", "Node[401-403]"]),
    "topo3": T(BLOCK, ["Node[104-105,107-108]"]),
    "topo4": T(BLOCK, ["Node[301,302,303]"], [2]),
    "topo5": T(FLAT, cluster_default=True),
}
EMPTY = {
    "topo1": T(TREE, ["Node[201,205]"]),
    "topo2": T(TREE, ["NodeIsDown"]),
    "topo3": T(BLOCK, ["Node[104-105,107-108]"]),
    "topo4": T(BLOCK, ["NodeIsDown"], [2]),
    "topo5": T(FLAT, cluster_default=True),
}


def _block_only():
    g = block_with_multi_ib_test_set()
    g.tiers = None
    return g


def _complement_empty():
    d = DomainMap()
    for dom, names in (
        ("a1", ["n10", "n11", "n12"]),
        ("a2", ["n20", "n21"]),
        ("a3", ["n31", "n32", "n33"]),
    ):
        for n in names:
            d.add_host(dom, n, n)
    return Graph(None, d)


YAML_CASES = [
    ("TestTreeYamlTopology.expected", tree_test_set, TREE_TOPOS, False),
    ("TestTreeYamlTopology.expectedSkeleton", tree_test_set, TREE_TOPOS, True),
    ("TestBlockYamlTopology.expected", block_with_multi_ib_test_set, BLOCK_TOPOS, False),
    ("TestBlockYamlTopology.expectedSkeleton", block_with_multi_ib_test_set, BLOCK_TOPOS, True),
    ("TestBlockOnlyYamlTopology.expected", _block_only, BLOCK_TOPOS, False),
    ("TestMixedYamlTopology.expected", block_with_multi_ib_test_set, MIXED, False),
    ("TestEmptyPartitionTopology.expected", block_with_multi_ib_test_set, EMPTY, False),
    ("TestEmptyPartitionTopology.expectedSkeleton", block_with_multi_ib_test_set, EMPTY, True),
    (
        "TestGetBlockTopologyUnitComplementEmptyNodes.expected",
        _complement_empty,
        {"topo1": T(BLOCK, ["n[10-12]", "n[20-21]", "n[31-33]"], [2, 4])},
        False,
    ),
]


@pytest.mark.parametrize("name,graph,cfg", CONF_CASES, ids=[c[0].split(".")[1] for c in CONF_CASES])
def test_translate_conf(fixtures_dir, name, graph, cfg):
    assert generate(graph(), cfg) == fixture(fixtures_dir, name)


@pytest.mark.parametrize("name,graph,topos,skeleton", YAML_CASES, ids=[c[0] for c in YAML_CASES])
def test_translate_yaml(fixtures_dir, name, graph, topos, skeleton):
    got = generate(graph(), SlurmConfig("", topologies=topos), skeleton)
    assert got == fixture(fixtures_dir, f"pkg_translate_yaml_test.{name}.topology.yaml")


@pytest.mark.parametrize(
    "name,graph",
    [
        ("TestApplyNodeLabelsWithTree", lambda: tree_test_set(long_label=True)),
        ("TestApplyNodeLabelsWithBlock", block_with_multi_ib_test_set),
    ],
)
def test_k8s_labels(fixtures_dir, name, graph):
    want = json.loads(
        fixture(fixtures_dir, f"pkg_engines_k8s_labeler_test.{name}.expected.labels.json")
    )
    assert k8s_labels.node_labels(graph()) == want


def test_long_label_value_is_hashed_like_topograph():
    # the 64-character switch id of the tree test set, as topograph's own test expects
    assert (
        k8s_labels.label_value("S3very-very-long-id-to-check-label-value-limits-of-63-characters")
        == "xf946c4acef2d5939"
    )
    assert k8s_labels.label_value("x" * 63) == "x" * 63


def test_slinky_oci_sim_tree(fixtures_dir):
    model = SimulationModel.load(fixtures_dir / "topograph" / "tests__models__large.yaml")
    got = generate(model.sim_graph("oci-sim"), SlurmConfig(TREE))
    assert got == fixture(fixtures_dir, "tests__ci__expected.slinky-oci-sim-tree.conf")


def test_slinky_dra_block_with_block_names(fixtures_dir):
    model = SimulationModel.load(fixtures_dir / "topograph" / "tests__models__large.yaml")
    cfg = SlurmConfig(BLOCK, [8, 16, 32], BlockName("^srv([0-9]{2})", "rack${1}"))
    got = generate(model.dra_graph(), cfg)
    assert got == fixture(fixtures_dir, "tests__ci__expected.slinky-dra-block.conf")


def test_cluset_compaction():
    assert compact(["n-1101", "n-1102", "n-1201"]) == ["n-[1101-1102,1201]"]
    assert compact(["Node201", "Node202", "Node205"]) == ["Node[201-202,205]"]
    assert compact(["S2", "S3", "x"]) == ["S[2-3]", "x"]
    assert compact(["gb-r01-t02", "gb-r01-t01", "gb-r02-t01"]) == ["gb-r01-t[01-02]", "gb-r02-t01"]


def test_nvidia_smi_parse_cases(fixtures_dir):
    cases = json.loads(
        fixture(fixtures_dir, "pkg_accelerator_accelerator_test.ParseNvidiaSMIOutput.cases.json")
    )
    assert cases["command"].endswith(nvidia_smi.TOPOGRAPH_QUERY)
    for case in cases["cases"]:
        if case["err"] is None:
            assert nvidia_smi.topograph_partition(case["output"]) == case["partition"], case["name"]
        else:
            with pytest.raises(ValueError) as e:
                nvidia_smi.topograph_partition(case["output"])
            assert str(e.value) == case["err"], case["name"]


def test_pdsh_nvidia_smi_output(fixtures_dir):
    ans = nvidia_smi.parse_pdsh(
        fixture(fixtures_dir, "pkg_providers_infiniband_bm_test.pdsh_nvidia_smi_csv.txt"), "pdsh"
    )
    assert ans.raw == {"node-1": "uuid-1, 7\nuuid-1, 7\n", "node-2": "uuid-2, 8\n"}
    assert [p.where for p in ans.problems] == ["pdsh:3"]


@pytest.mark.parametrize(
    "name,switches,hca",
    [
        ("01_Single_CA", {}, {"H-043f720300f4bc9e": "ngcprd10-luna3086"}),
        ("02_Single_Switch", {"Switch-1": {}}, {}),
        (
            "03_Switch_with_connections",
            {
                "S-08c0eb03008cc87c": {
                    "S-08c0eb0300539a5c": "MF0;IB-ComputeLeaf-101:MQM8700/U1",
                    "S-08c0eb0300539a9c": "MF0;IB-ComputeLeaf-102:MQM8700/U1",
                }
            },
            {},
        ),
    ],
)
def test_topograph_ibnetdiscover_parser(fixtures_dir, name, switches, hca):
    got_sw, got_hca = infiniband.topograph_parse(
        fixture(fixtures_dir, f"pkg_ib_ib_test.ParseIbnetdiscoverFile.{name}.in.txt")
    )
    assert got_sw == switches and got_hca == hca


def test_topograph_parser_multiple_entries(fixtures_dir):
    sw, hca = infiniband.topograph_parse(
        fixture(fixtures_dir, "pkg_ib_ib_test.ParseIbnetdiscoverFile.04_Multiple_entries.in.txt")
    )
    assert set(sw) == {"S-08c0eb03008cc87c", "S-b8cef603008032b8"}
    assert sw["S-b8cef603008032b8"] == {
        "S-08c0eb03008ccc3c": "MF0;IB-ComputeSpine-01:MQM8700/U1",
        "S-08c0eb03008ccb5c": "MF0;IB-ComputeSpine-02:MQM8700/U1",
        "S-08c0eb03008cc87c": "MF0;IB-ComputeSpine-03:MQM8700/U1",
    }
    assert hca == {"H-043f720300f4bc9e": "ngcprd10-luna3086"}


def test_lone_gb200_tray_gives_an_empty_topology(fixtures_dir):
    text = fixture(fixtures_dir, "tests__output__ibnetdiscover__example-bad.out")
    graph = infiniband.compat_graph([text], ["dgx-gb200-n01-c1"], None)
    assert generate(graph, SlurmConfig(TREE)) == ""
