"""fabriclab's topology/block run by a real Slurm 24.11 (Debian 13's slurm-wlm).

On a Debian 13 machine the system's Slurm runs; on an older one (Debian 12's 22.05 has
no topology/block) the Debian 13 root's (tests/debian13.py).  ``fabriclab topology SPEC
-e slurm-block`` writes topology.conf; a real slurmctld with one slurmd per tray loads
it, and jobs must be placed by its blocks: on ``gb200-su`` (8 NVL72 racks, 144 trays) one
block per rack, an 18-node job inside one, ``--segment`` jobs in segments inside blocks,
a larger job over the fewest blocks, drained and down trays avoided, a partition change
picked up by ``scontrol reconfigure``; on a three-tier fabric with NVLink domains in
several pods, Slurm's own aggregated blocks stay inside pods where they can.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import debian13
import pytest
import yaml
from block_aggregates import needless_crossings, pods_of
from conftest import SPECS
from helpers import fl, wait_for
from slurm_harness import SlurmCluster, expand_hostlist, parse_blocks, slurm_cluster
from versions import slurm as slurm_version

from fabriclab.model.build import build
from fabriclab.spec.load import load_spec, preset_text

pytestmark = pytest.mark.realtools
BLOCK_SLURM = (24, 11)  # the release these tests are written against (Debian 13's)
PODS = str(SPECS / "nvl-pods.yaml")


def slurm_root() -> Path | None:
    """None where the system's Slurm is 24.11 or newer (Debian 13), else the Debian 13
    root, whose Slurm is."""
    if slurm_version() >= BLOCK_SLURM:
        return None
    root = debian13.root()
    assert slurm_version(root) >= BLOCK_SLURM, slurm_version(root)
    return root


def generate(spec: str) -> str:
    r = fl("topology", spec, "-e", "slurm-block")
    assert r.returncode == 0, r.stderr
    return r.stdout


@contextlib.contextmanager
def start(spec: str, tmp: Path, tag: str) -> Iterator[tuple[SlurmCluster, str]]:
    """A Slurm 24.11 cluster of the trays in ``spec``'s blocks, on its generated
    topology.conf."""
    conf = generate(spec)
    hosts = [node for block in parse_blocks(conf) for node in block.nodes]
    root = slurm_root()
    workdir = debian13.scratch(tag)[0] if root is not None else tmp
    # ReturnToService=1: a tray set DOWN stays down (test_a_drained_or_down_tray…)
    with slurm_cluster(
        hosts,
        conf,
        workdir,
        plugin="topology/block",
        root=root,
        cpus=2,
        timeout=240,
        return_to_service=1,
    ) as c:
        yield c, conf


@pytest.fixture(scope="module")
def su(tmp_path_factory):
    with start("gb200-su", tmp_path_factory.mktemp("slurm-block-su"), "su") as running:
        yield running


@pytest.fixture()
def cluster(su):
    c, _ = su
    try:
        yield c
    finally:
        c.cancel_all()


def racks() -> dict[str, set[str]]:
    """The model's NVLink domains: name -> trays."""
    return {d.name: {t.host for t in d.trays} for d in build(load_spec("gb200-su")).domains}


def base_blocks(c: SlurmCluster) -> dict[str, set[str]]:
    return {b.name: set(b.nodes) for b in c.blocks() if not b.aggregated}


def blocks_touched(nodes: set[str], blocks: dict[str, set[str]]) -> set[str]:
    return {name for name, members in blocks.items() if nodes & members}


def run_job(c: SlurmCluster, nodes: int, *extra: str) -> set[str]:
    job = c.submit(nodes, sleep_s=300, extra=extra)
    return set(expand_hostlist(c.wait_running(job, timeout=60)))


def test_scontrol_lists_the_racks_as_blocks(su):
    c, conf = su
    shown = c.blocks()
    base = [b for b in shown if not b.aggregated]
    # the generated blocks, in topology.conf's order: the racks, named after them
    assert [(b.name, b.nodes) for b in base] == [(b.name, b.nodes) for b in parse_blocks(conf)]
    assert {b.name: set(b.nodes) for b in base} == racks()
    assert [b.index for b in base] == list(range(8))
    assert {b.size for b in base} == {18}
    # Slurm's aggregates: consecutive racks in pairs, fours and all eight
    sizes = sorted(b.size for b in shown if b.aggregated)
    assert sizes == [36] * 4 + [72] * 2 + [144]
    for b in shown:
        assert len(b.nodes) == b.size, b


def test_an_18_node_job_lands_inside_one_block(cluster):
    blocks = base_blocks(cluster)
    first = run_job(cluster, 18)
    assert len(first) == 18 and len(blocks_touched(first, blocks)) == 1, first
    second = run_job(cluster, 18)
    assert len(blocks_touched(second, blocks)) == 1 and not first & second


def test_segment_jobs_are_placed_in_segments_inside_blocks(cluster):
    """One busy tray in every rack: no block has 18 free trays, so an 18-node job waits;
    with --segment=9 it runs, 9 trays in each of two blocks."""
    blocks = base_blocks(cluster)
    for members in blocks.values():
        run_job(cluster, 1, f"--nodelist={min(members)}")
    whole = cluster.submit(18, sleep_s=300)
    split = run_job(cluster, 18, "--segment=9")
    per_block = sorted(len(split & members) for members in blocks.values() if split & members)
    assert per_block == [9, 9], split
    assert cluster.job_info(whole)["JobState"] == "PENDING"


def test_a_job_larger_than_a_block_spans_the_fewest_blocks(cluster):
    """19 trays: two racks, a pair Slurm aggregates (36); 40 trays: three racks inside
    one aggregate of four (72)."""
    shown = cluster.blocks()
    blocks = base_blocks(cluster)
    aggregates = {
        b.size: [set(a.nodes) for a in shown if a.aggregated and a.size == b.size] for b in shown
    }
    for nodes, touched, within in ((19, 2, 36), (40, 3, 72)):
        got = run_job(cluster, nodes)
        assert len(got) == nodes
        assert len(blocks_touched(got, blocks)) == touched, got
        assert any(got <= agg for agg in aggregates[within]), got
        cluster.cancel_all()


def test_a_drained_or_down_tray_changes_where_jobs_go(cluster):
    """An 18-node job goes to a rack; with one of that rack's trays drained, the next
    goes to another rack; with one of that one's trays down, to a third."""
    blocks = base_blocks(cluster)
    changed = []
    try:
        avoided: set[str] = set()
        for state in ("drain", "down"):
            got = run_job(cluster, 18)
            (name,) = blocks_touched(got, blocks)
            assert name not in avoided
            cluster.cancel_all()
            _wait_settled(cluster)  # a tray still completing the job takes no new state
            tray = min(blocks[name])
            cluster.run(
                "scontrol",
                "update",
                f"nodename={tray}",
                f"state={state}",
                "reason=test",
                check=True,
            )
            changed.append(tray)
            avoided.add(name)
            shown = cluster.run("sinfo", "-h", "-n", tray, "-o", "%t").stdout.strip()
            assert shown.startswith(state[:4]), (tray, shown)
            again = run_job(cluster, 18)
            (moved,) = blocks_touched(again, blocks)
            assert moved not in avoided and tray not in again, (state, name, moved)
            cluster.cancel_all()
    finally:
        cluster.cancel_all()
        _wait_settled(cluster)
        for tray in changed:
            cluster.run("scontrol", "update", f"nodename={tray}", "state=resume")
        _wait_settled(cluster, {"idle"})


def _wait_settled(c: SlurmCluster, allowed: set[str] | None = None, timeout: float = 60) -> None:
    """Wait until no tray is allocated or completing (``allowed``: until every tray's
    state is one of these)."""
    busy = {"alloc", "comp", "mix", "drng", "mix-", "plnd"}

    def states() -> set[str]:
        return set(c.run("sinfo", "-h", "-N", "-o", "%t").stdout.split())

    def settled() -> bool:
        now = states()
        return now <= allowed if allowed is not None else not now & busy

    wait_for(settled, timeout, lambda: f"the trays settled: {states()}", interval=0.2)


def test_reconfigure_picks_up_a_partition_change(su, tmp_path):
    """Rack 1's NVLink domain cut into two partitions of 9 trays (in the spec): the
    regenerated topology.conf has two blocks for it and base blocks of 9; ``scontrol
    reconfigure`` loads it, and a 9-node job lands inside one of the halves."""
    c, conf = su
    data = yaml.safe_load(preset_text("gb200-su"))
    data["nvlink"] = {
        "domains": [
            {
                "name": f"nvl72-r{r:02d}",
                "trays": f"gb-r{r:02d}-t[01-18]",
                **(
                    {
                        "partitions": [
                            {"id": 2, "gpus": "gb-r01-t[01-09]"},
                            {"id": 3, "gpus": "gb-r01-t[10-18]"},
                        ]
                    }
                    if r == 1
                    else {}
                ),
            }
            for r in range(1, 9)
        ]
    }
    spec = tmp_path / "gb200-su-split.yaml"
    spec.write_text(yaml.safe_dump(data))
    new = generate(str(spec))
    assert new.splitlines()[-1] == "BlockSizes=9,18,36,72"
    try:
        c.reconfigure(new)
        base = base_blocks(c)
        assert base["nvl72-r01-p2"] == set(expand_hostlist("gb-r01-t[01-09]"))
        assert base["nvl72-r01-p3"] == set(expand_hostlist("gb-r01-t[10-18]"))
        assert len(base) == 9
        got = run_job(c, 9)
        assert len(blocks_touched(got, base)) == 1, got
    finally:
        c.cancel_all()
        c.reconfigure(conf)


def test_aggregated_blocks_never_cross_a_pod_when_they_need_not(tmp_path):
    """Three tiers, NVLink domains in three pods (3, 4 and 2): Slurm's AggregatedBlocks
    of the generated topology.conf keep within pods wherever a pod's count allows."""
    pods = pods_of(PODS)
    with start(PODS, tmp_path, "pods") as (c, conf):
        shown = c.blocks()
        base = [list(b.nodes) for b in shown if not b.aggregated]
        assert base == [list(b.nodes) for b in parse_blocks(conf)]
        runs = [set(b.nodes) for b in shown if b.aggregated]
        assert runs
        assert not needless_crossings(runs, base, pods), [sorted(r) for r in runs]
        # and Slurm places by them: each job of two blocks' trays gets a pair Slurm
        # aggregates (there are four), each inside one pod
        for _ in range(4):
            got = run_job(c, 8)
            assert len({pods[n] for n in got}) == 1, got
