"""An NVLink fault on a tray (Cluster.nvlink_fault / nvlink_clear), as the model and
the formats show it: the nvidia-smi view (-q Fabric section, --query-gpu=fabric.*) and
the Slurm block feed, by default and under --compat topograph."""

from __future__ import annotations

import re

import pytest

from fabriclab.errors import InputError
from fabriclab.formats import nvidia_smi
from fabriclab.model.build import build
from fabriclab.model.cluster import ZERO_UUID
from fabriclab.spec.load import load_spec
from fabriclab.topology.command import topology_command
from fabriclab.topology.errors import TopologyProblem

TRAY = "gb-r01-t05"


@pytest.fixture()
def su():
    return build(load_spec("gb200-su"))


def _blocks(cluster, compat=None):
    text, report = topology_command(
        spec="gb200-su",
        engine="slurm-block",
        ib_files=[],
        smi_file=None,
        nodes=None,
        compat=compat,
        names=False,
        block_sizes=None,
        block_name=None,
        topologies=None,
        skeleton=False,
        label_format="json",
        trays=None,
        cluster_loader=lambda spec, trays: cluster,
    )
    blocks = dict(re.findall(r"^BlockName=(\S+) Nodes=(\S+)$", text, re.M))
    return blocks, report


def test_the_nvidia_smi_view_shows_a_faulted_tray(su):
    tray = su.tray(TRAY)
    healthy = nvidia_smi.render_query(
        tray, ["--query-gpu=fabric.state,fabric.status,fabric.cliqueId", "--format=csv,noheader"]
    )
    assert healthy == "Completed, Success, 1\n" * 4
    assert su.nvlink_fault(TRAY) == tray.gpus
    q = nvidia_smi.render_query(
        tray,
        [
            "--query-gpu=fabric.state,fabric.status,fabric.clusterUuid,fabric.cliqueId",
            "--format=csv,noheader",
        ],
    )
    assert q == f"Completed, Insufficient Resources, {ZERO_UUID}, 0\n" * 4
    topograph_form = nvidia_smi.render_query(tray, nvidia_smi.TOPOGRAPH_QUERY.split())
    assert topograph_form == f"{ZERO_UUID}, 0\n" * 4
    fabric = nvidia_smi.render_q_fabric(tray)
    assert fabric.count("State                             : Completed") == 4
    assert fabric.count("Status                            : Insufficient Resources") == 4
    assert fabric.count("CliqueId                          : 0\n") == 4
    assert fabric.count("Bandwidth                     : Degraded") == 4
    # the other trays of the rack are untouched; clearing restores the tray
    assert "Success" in nvidia_smi.render_q_fabric(su.tray("gb-r01-t06"))
    su.nvlink_clear(TRAY)
    assert (
        nvidia_smi.render_query(
            tray,
            ["--query-gpu=fabric.state,fabric.status,fabric.cliqueId", "--format=csv,noheader"],
        )
        == healthy
    )


def test_one_faulted_gpu_shows_alone(su):
    su.nvlink_fault(TRAY, [2])
    lines = nvidia_smi.render_query(
        su.tray(TRAY), ["--query-gpu=index,fabric.status", "--format=csv,noheader"]
    ).splitlines()
    assert lines == ["0, Success", "1, Success", "2, Insufficient Resources", "3, Success"]


def test_slurm_blocks_move_a_faulted_tray_out_of_its_rack(su):
    before, _ = _blocks(su)
    assert "gb-r01-t[01-18]" in before.values()
    su.nvlink_fault(TRAY)
    # default: the tray is in no NVLink domain, so in no block; the rest of the rack stays
    after, report = _blocks(su)
    assert "gb-r01-t[01-04,06-18]" in after.values()
    assert not any(TRAY in nodes or nodes == "gb-r01-t[01-18]" for nodes in after.values())
    assert not report.left_out
    # topograph reads only ClusterUUID and CliqueId and accepts the all-zero answer: the
    # faulted tray becomes a block of its own (with every other faulted tray)
    compat, _ = _blocks(su, "topograph")
    assert TRAY in compat.values() and "gb-r01-t[01-04,06-18]" in compat.values()


def test_a_partly_faulted_tray_default_and_topograph(su):
    su.nvlink_fault(TRAY, [0, 3])
    blocks, report = _blocks(su)
    assert "gb-r01-t[01-04,06-18]" in blocks.values()
    assert report.left_out and any(p.where == TRAY for p in report.problems)
    # topograph fails the whole request on a host whose GPUs disagree
    with pytest.raises(TopologyProblem, match="ambiguous NVL partition IDs"):
        _blocks(su, "topograph")


@pytest.mark.parametrize(
    ("host", "gpus", "what"),
    [
        (
            "gb-r99-t01",
            None,
            "no such tray in this fabric (did you mean 'gb-r08-t01', 'gb-r07-t01', 'gb-r06-t01'?)",
        ),
        (TRAY, [4], "no GPU 4 (the tray has GPUs 0-3)"),
    ],
)
def test_a_bad_target_changes_nothing(su, host, gpus, what):
    with pytest.raises(InputError) as e:
        su.nvlink_fault(host, gpus)
    assert e.value.problems[0].what == what
    assert not any(g.nvlink_fault for t in su.trays for g in t.gpus)
