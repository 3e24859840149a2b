"""Slurm output that Debian's Slurm 22.05 cannot load (topology/block arrived in 23.11,
topology.yaml in 25.05), checked against the syntax topology.conf(5) and topology.yaml(5)
document:

- block: ``BlockName=<name> Nodes=<hostlist>`` lines and one ``BlockSizes=`` line whose
  sizes each are a power-of-two multiple of the one before; names at most 64 characters;
  a node in at most one block; ``#`` starts a comment.
- topology.yaml: a list of topologies, ``topology`` first, exactly one of ``tree``,
  ``block`` or ``flat``; at most one ``cluster_default: true`` counts.
"""

from __future__ import annotations

import itertools
import re

import pytest
import yaml
from conftest import SPECS

from fabriclab.model.build import build
from fabriclab.spec.hostlist import expand
from fabriclab.spec.load import load_spec
from fabriclab.topology import inputs as topology_inputs
from fabriclab.topology.engines import EngineOptions, run
from fabriclab.topology.engines.slurm import BLOCK, FLAT, TREE, TopologySpec
from fabriclab.topology.providers import local_graph

_KV = re.compile(r"^(\w+)=(\S+)$")


def check_block_conf(text: str) -> tuple[dict[str, list[str]], list[int]]:
    """Blocks and BlockSizes of a topology/block topology.conf; AssertionError if the
    text breaks topology.conf(5)'s block syntax."""
    blocks: dict[str, list[str]] = {}
    sizes: list[int] | None = None
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        kv = {}
        for tok in line.split():
            m = _KV.match(tok)
            assert m, f"line {n}: {raw!r}: not Key=Value"
            kv[m[1].lower()] = m[2]
        if "blocksizes" in kv:
            assert sizes is None and set(kv) == {"blocksizes"}, f"line {n}"
            sizes = [int(s) for s in kv["blocksizes"].split(",")]
        else:
            assert set(kv) <= {"blockname", "nodes"} and "blockname" in kv, f"line {n}: {raw!r}"
            name = kv["blockname"]
            assert len(name) <= 64 and name not in blocks, f"line {n}: block {name}"
            blocks[name] = expand(kv["nodes"]) if "nodes" in kv else []
    assert sizes, "no BlockSizes line"
    for a, b in itertools.pairwise(sizes):
        ratio = b // a
        assert b % a == 0 and ratio > 1 and ratio & (ratio - 1) == 0, f"BlockSizes {sizes}"
    every = [n for nodes in blocks.values() for n in nodes]
    assert len(every) == len(set(every)), "a node in two blocks"
    return blocks, sizes


def check_topology_yaml(text: str) -> list[dict]:
    doc = yaml.safe_load(text)
    assert isinstance(doc, list) and doc
    names = set()
    for topo in doc:
        assert next(iter(topo)) == "topology", topo
        assert topo["topology"] not in names
        names.add(topo["topology"])
        kinds = [k for k in ("tree", "block", "flat") if k in topo]
        assert len(kinds) == 1, topo
        assert set(topo) <= {"topology", "cluster_default", "tree", "block", "flat"}
        if "tree" in topo:
            for sw in topo["tree"]["switches"]:
                assert set(sw) <= {"switch", "children", "nodes"} and "switch" in sw
        if "block" in topo:
            check_block_conf(
                "".join(
                    f"BlockName={b['block']}"
                    + (f" Nodes={b['nodes']}" if b.get("nodes") else "")
                    + "\n"
                    for b in topo["block"]["blocks"]
                )
                + "BlockSizes="
                + ",".join(map(str, topo["block"]["block_sizes"]))
            )
    return doc


def _engine(spec: str, engine: str, topologies=None, compat=False) -> tuple[str, list[str]]:
    cluster = build(load_spec(spec))
    inputs = topology_inputs.from_cluster(cluster)
    graph = local_graph(inputs, None, compat=compat, names=False)
    return (
        run(engine, graph, EngineOptions(gpus=inputs.gpus, topologies=topologies or {})),
        [t.host for t in cluster.trays],
    )


@pytest.mark.parametrize("spec", ["lab", "gb200-su"])
@pytest.mark.parametrize("compat", [False, True])
def test_block_output_follows_topology_conf_syntax(spec, compat):
    text, hosts = _engine(spec, "slurm-block", compat=compat)
    blocks, sizes = check_block_conf(text)
    # one block per NVLink domain, every tray in one
    assert sorted(n for nodes in blocks.values() for n in nodes) == sorted(hosts)
    assert sizes[0] == min(len(v) for v in blocks.values() if v)


def test_gb200_su_blocks_are_the_racks():
    text, _ = _engine("gb200-su", "slurm-block")
    blocks, sizes = check_block_conf(text)
    racks = {frozenset(nodes) for nodes in blocks.values()}
    assert racks == {frozenset(expand(f"gb-r{r:02d}-t[01-18]")) for r in range(1, 9)}
    assert sizes == [18, 36, 72, 144]


@pytest.mark.parametrize("spec", ["lab", "gb200-su", str(SPECS / "three-tier-hdr.yaml")])
def test_topology_yaml_follows_its_man_page(spec):
    cluster = build(load_spec(spec))
    hosts = [t.host for t in cluster.trays]
    topologies = {
        "fabric": TopologySpec(TREE, hosts, cluster_default=True),
        "flat": TopologySpec(FLAT, hosts[:1]),
    }
    if cluster.domains:
        topologies["nvl"] = TopologySpec(BLOCK, hosts)
    text, _ = _engine(spec, "slurm-yaml", topologies)
    doc = check_topology_yaml(text)
    assert [t["topology"] for t in doc] == sorted(topologies)
    assert sum(bool(t.get("cluster_default")) for t in doc) == 1


@pytest.mark.parametrize(
    "bad",
    [
        "BlockName=b1 Nodes=n[1-2]\nBlockSizes=2,3\n",
        "BlockName=b1 Nodes=n[1-2]\nBlockName=b2 Nodes=n2\nBlockSizes=1\n",
        "BlockName=b1 Nodes=n[1-2] Switches=s1\nBlockSizes=2\n",
        "BlockName=b1 Nodes=n[1-2]\n",
    ],
)
def test_block_syntax_check_can_fail(bad):
    with pytest.raises(AssertionError):
        check_block_conf(bad)
