"""The options of ``fabriclab topology`` and the API's parameters turned into engine
options (topology/options.py): in-process, and through the command where a defect was."""

from __future__ import annotations

import os
from functools import partial

import helpers
import pytest

from fabriclab.topology.errors import OptionError, TopologyProblem
from fabriclab.topology.options import (
    load_topologies,
    parse_block_name,
    parse_block_sizes,
    validate_block_sizes,
)

fl = partial(helpers.fl, env={**os.environ, "COLUMNS": "200"})  # its tables whole


def test_block_sizes_parsed_and_checked():
    assert parse_block_sizes("18,36,72") == [18, 36, 72]
    assert parse_block_sizes(None) == []
    with pytest.raises(OptionError) as e:
        parse_block_sizes("3,x")
    assert str(e.value) == "--block-sizes: not a list of numbers: '3,x'"


@pytest.mark.parametrize(
    "sizes,message",
    [
        ([0], "blockSizes[0]=0 must be positive"),
        ([65537], "blockSizes[0]=65537 exceeds maximum allowed value 65536"),
        ([3, 9], "blockSizes[1]=9 must be a power-of-two multiple of blockSizes[0]=3"),
        ([1] * 21, "blockSizes has too many entries (21); max allowed is 20"),
    ],
)
def test_block_sizes_follow_slurms_rules(sizes, message):
    with pytest.raises(OptionError) as e:
        validate_block_sizes(sizes)
    assert str(e.value) == message  # the API answers it as is, with no "where"
    assert e.value.status == 400 and isinstance(e.value, TopologyProblem)


def test_block_name_option():
    assert parse_block_name("^gb-r([0-9]+)=rack${1}").format == "rack${1}"
    with pytest.raises(OptionError, match="--block-name: expected REGEXP=FORMAT"):
        parse_block_name("no-equals")


def test_topologies_file(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(
        "gpu: {plugin: topology/block, nodes: 'n[1-2]', block_sizes: [2],\n"
        "      block_name: {node_name_regexp: '^n', format: 'b=1'}}\n"
    )
    (spec,) = load_topologies(str(path)).values()
    assert spec.nodes == ["n1", "n2"] and spec.block_sizes == [2]
    assert (spec.block_name.node_name_regexp, spec.block_name.format) == ("^n", "b=1")


@pytest.mark.parametrize(
    "entry,where",
    [
        ("{plugin: topology/tree, nodes: 'n[1-'}", "t.nodes"),
        ("{plugin: topology/block, block_sizes: [3, 5]}", "t.block_sizes"),
        (
            "{plugin: topology/block, block_name: {node_name_regexp: '(', format: x}}",
            "t.block_name",
        ),
        ("{plugin: topology/tree, colour: red}", "t"),
    ],
)
def test_topologies_file_problems_name_their_entry(tmp_path, entry, where):
    path = tmp_path / "t.yaml"
    path.write_text(f"t: {entry}\n")
    with pytest.raises(OptionError) as e:
        load_topologies(str(path))
    assert e.value.problems[0].where == f"{path}: {where}"


def test_block_name_format_with_an_equals_sign_is_kept(tmp_path):
    """A --topologies block_name was joined into REGEXP=FORMAT and cut at its last '=':
    a format with '=' lost its start to the regexp, and no node matched."""
    path = tmp_path / "t.yaml"
    path.write_text(
        "gpu:\n  plugin: topology/block\n  nodes: ['gb-r0[1-2]-t[01-18]']\n"
        "  block_name: {node_name_regexp: '^gb-r([0-9]+)', format: 'rack=${1}'}\n"
    )
    r = fl("topology", "gb200-su", "-e", "slurm-yaml", "--topologies", str(path))
    assert r.returncode == 0, r.stderr
    assert "        - block: rack=01\n" in r.stdout and "        - block: rack=02\n" in r.stdout
