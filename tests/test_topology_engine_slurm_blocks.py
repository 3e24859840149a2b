"""Blocks of topology/block (engines/slurm/blocks.py), their names (block_names.py) and
topograph's block-tree complement (block_tree.py), in-process."""

from __future__ import annotations

import pytest
from topology_graphs import racks, two_leaves

from fabriclab.topology.engines.slurm import BlockName, SlurmTopologyError
from fabriclab.topology.engines.slurm.block_names import block_names
from fabriclab.topology.engines.slurm.block_tree import complement, infer_two_level_block_sizes
from fabriclab.topology.engines.slurm.blocks import Block, block_sizes, domain_blocks


def test_domain_blocks_one_per_domain_sorted():
    blocks = domain_blocks(two_leaves().domains)
    assert [(block.id, block.name, block.nodes) for block in blocks] == [
        ("block001", "nvl-a", ["n1", "n2"]),
        ("block002", "nvl-b", ["n3"]),
    ]


@pytest.mark.parametrize(
    "sizes,count,want",
    [([], 1, [2]), ([], 2, [2, 4]), ([], 3, [2, 4]), ([], 4, [2, 4, 8]), ([18, 36], 5, [18, 36])],
)
def test_block_sizes_inferred_as_doublings_of_the_smallest_block(sizes, count, want):
    blocks = [Block(f"b{i}", nodes=["x"] * (2 + i)) for i in range(count)]
    assert block_sizes(blocks, sizes) == want


def test_block_sizes_of_no_blocks_is_an_error():
    with pytest.raises(SlurmTopologyError, match="topology contains no blocks"):
        block_sizes([], [])


def test_block_name_expands_go_templates():
    naming = BlockName("^gb-r([0-9]+)-(?P<tray>t[0-9]+)", "rack${1}$$")
    assert naming.name("block001", "nvl", ["gb-r01-t01", "gb-r01-t02"]) == "rack01$"
    assert BlockName("^(x)", "$1a-${1}-$tray").name("b", "", ["x"]) == "-x-"  # $1a is group "1a"


@pytest.mark.parametrize(
    "naming,nodes,message",
    [
        (
            BlockName("^r([0-9])", "rack${1}"),
            ["r1", "r2"],
            'produce different block names "rack1" and "rack2"',
        ),
        (
            BlockName("^r([0-9])", "rack${1}"),
            ["x1"],
            'node "x1" in block "b" .domain "d". does not match',
        ),
        (BlockName("^r", "${9}"), ["r1"], "produces an empty name"),
    ],
)
def test_block_name_refuses_what_topograph_refuses(naming, nodes, message):
    with pytest.raises(SlurmTopologyError, match=message):
        naming.name("b", "d", nodes)


def test_block_name_refuses_a_bad_regexp_in_re2_syntax():
    with pytest.raises(SlurmTopologyError, match=r"invalid blockName\.nodeNameRegexp"):
        BlockName("(?<=x)y", "z")  # a lookbehind: Python's re has it, Go's (RE2) does not


def test_block_names_refuse_duplicates():
    blocks = [Block("b1", nodes=["r1-a"]), Block("b2", nodes=["r1-b"])]
    with pytest.raises(
        SlurmTopologyError, match='blocks "b1" and "b2" produce duplicate block name "rack1"'
    ):
        block_names(blocks, BlockName("^r([0-9])", "rack${1}"))
    assert block_names(blocks, None) == ["b1", "b2"]


def test_two_level_sizes_are_the_largest_rack_and_a_doubling_that_holds_the_domain():
    assert infer_two_level_block_sizes(racks(6, 4)) == [4, 8]
    assert infer_two_level_block_sizes(racks(4, 4)) == [4]
    assert infer_two_level_block_sizes(two_leaves().domains) == []  # no sub-domains


def test_complement_splits_a_domain_into_its_racks():
    domains = racks(6, 4)
    blocks, sizes = complement(
        [Block("block001", "nvl", [f"n{i}" for i in range(1, 7)])], [], domains
    )
    assert sizes == [4, 8]
    assert [(block.id, block.name, block.nodes) for block in blocks] == [
        ("block001", "rack0", ["n1", "n2", "n3", "n4"]),
        ("block002", "rack1", ["n5", "n6"]),
    ]


def test_complement_pads_to_a_whole_number_of_the_largest_size():
    blocks, sizes = complement(domain_blocks(two_leaves().domains), [1, 4], two_leaves().domains)
    assert sizes == [1, 4]
    # nvl-a fills two base blocks, nvl-b one and an empty one; the root is padded to 4
    assert [(block.name, block.nodes) for block in blocks] == [
        ("nvl-a", ["n1"]),
        ("nvl-a", ["n2"]),
        ("nvl-b", ["n3"]),
        ("", []),
    ]


def test_complement_leaves_blocks_without_domains_alone():
    blocks = [Block("block001", "", ["n1"])]
    assert complement(blocks, [2], None) == (blocks, [2])
    assert complement(blocks, [2], two_leaves().domains) == (blocks, [2])
