"""fabriclab's topology.conf run by a real Slurm (the system's: Debian 12's slurm-wlm
22.05 or Debian 13's 24.11).

For each fabric, ``fabriclab topology SPEC -e slurm-tree`` writes topology.conf; a real
slurmctld with one slurmd per tray loads it.  ``scontrol show topology`` must show
exactly the generated switches, each leaf over the trays the model cables to it, and
jobs submitted with ``--switches`` must be placed by that tree.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import SPECS
from helpers import fl, wait_for
from slurm_harness import Switch, expand_hostlist, parse_topology, slurm_available, slurm_cluster
from versions import slurm as slurm_version

from fabriclab.model.build import build
from fabriclab.spec.load import load_spec

pytestmark = pytest.mark.realtools
# A job asking for more nodes than the partition has: Slurm 22.05 queues it (PENDING,
# PartitionNodeLimit); 24.11 rejects it at submission ("Requested node configuration is
# not available").  Both observed with Debian's packages; releases in between untested.
REJECTS_OVERSIZED_AT_SUBMIT = (24, 11)


@dataclass
class Case:
    spec: str
    names: bool  # --names: switch names instead of S-<guid> ids

    @property
    def id(self) -> str:
        return self.spec.rsplit("/", 1)[-1]


THREE = Case(str(SPECS / "three-tier-hdr.yaml"), True)
CASES = [Case("lab", False), Case("gb200-su", False), THREE]


def generate(case: Case) -> str:
    r = fl("topology", case.spec, "-e", "slurm-tree", *(["--names"] if case.names else []))
    assert r.returncode == 0, r.stderr
    return r.stdout


@dataclass
class Running:
    case: Case
    conf: str
    cluster: object
    tiers: dict[str, int]  # switch (as topology.conf names it) -> model tier
    cabled: dict[str, set[str]]  # switch -> trays with an HCA cabled to it
    neighbours: dict[str, set[str]]  # switch -> switches cabled to it


@contextlib.contextmanager
def start(case: Case, workdir: Path) -> Iterator[Running]:
    """Generate ``case``'s topology.conf and start a Slurm cluster of its trays on it."""
    if slurm_available():
        pytest.fail(
            f"Slurm binaries missing {slurm_available()}: run scripts/install-system-deps.sh"
        )
    cluster = build(load_spec(case.spec))
    fabric = cluster.fabric
    key = (lambda sw: sw.name) if case.names else (lambda sw: f"S-{sw.guid:016x}")
    tray_of = {hca.guid: tray.host for tray in cluster.trays for hca in tray.hcas}
    tiers, cabled, neighbours = {}, {}, {}
    for sw in fabric.switches():
        k = key(sw)
        tiers[k] = sw.tier
        cabled[k] = set()
        neighbours[k] = set()
        for port in sw.iter_ports():
            if port.peer is None:
                continue
            far = port.peer.node
            if far.is_switch:
                neighbours[k].add(key(far))
            elif far.guid in tray_of:
                cabled[k].add(tray_of[far.guid])
    conf = generate(case)
    hosts = [t.host for t in cluster.trays]
    with slurm_cluster(hosts, conf, workdir, timeout=120) as c:
        yield Running(case, conf, c, tiers, cabled, neighbours)


@pytest.fixture(scope="module", params=CASES, ids=lambda c: c.id)
def running(request, tmp_path_factory):
    with start(request.param, tmp_path_factory.mktemp(f"slurm-{request.param.id}")) as r:
        yield r


def _leaves(shown: dict[str, Switch]) -> dict[str, set[str]]:
    return {n: set(s.nodes) for n, s in shown.items() if s.level == 0}


def test_scontrol_shows_exactly_the_generated_switches(running):
    conf = parse_topology(running.conf)
    shown = running.cluster.topology()
    assert set(shown) == set(conf)
    for name, sw in conf.items():
        got = shown[name]
        assert got.switches == sw.switches, name
        if sw.nodes:
            assert got.nodes == sw.nodes, name
        # Slurm's level is the tier in the model, counted from the leaves
        assert got.level == running.tiers[name] - 1, name
        # every child switch is one the model cables to this one
        assert sw.switches <= running.neighbours[name], name


def test_each_leaf_holds_the_trays_the_model_cables_to_it(running):
    leaves = _leaves(running.cluster.topology())
    assert leaves
    for name, nodes in leaves.items():
        assert nodes == running.cabled[name], name
    # every tray sits under exactly one leaf
    every = [n for nodes in leaves.values() for n in nodes]
    assert sorted(every) == sorted(running.cluster.nodes)


def test_switches_one_job_fills_one_leaf(running):
    c = running.cluster
    leaves = _leaves(c.topology())
    size = min(len(v) for v in leaves.values())
    try:
        placed = []
        for _ in range(min(2, len(leaves))):
            job = c.submit(size, switches=1, sleep_s=300)
            nodes = set(expand_hostlist(c.wait_running(job, timeout=60)))
            assert any(nodes <= leaf for leaf in leaves.values()), nodes
            placed.append(nodes)
        if len(placed) == 2:
            assert not placed[0] & placed[1]
    finally:
        c.cancel_all()


def test_a_job_too_big_for_a_leaf_spans_leaves_or_cannot_run(running):
    """A job one node larger than the largest leaf runs over two leaves or more; where
    one leaf holds every tray (the lab) it cannot run: Slurm 24.11 refuses it at
    submission, 22.05 holds it (PartitionNodeLimit)."""
    c = running.cluster
    leaves = _leaves(c.topology())
    size = max(len(v) for v in leaves.values())
    if size + 1 > len(c.nodes):  # one leaf holds every tray (the lab): the job cannot run
        version = slurm_version()
        if version >= REJECTS_OVERSIZED_AT_SUBMIT:
            r = c.run("sbatch", "--parsable", f"--nodes={size + 1}", "--wrap", "sleep 1")
            assert r.returncode != 0, (version, r.stdout)
            assert "Requested node configuration is not available" in r.stderr, (version, r)
            assert c.job_ids() == []
            return
        try:
            job = c.submit(size + 1, sleep_s=1)
            # Slurm's own word that the job cannot run in this partition, then its state
            info = wait_for(
                lambda: (i := c.job_info(job)).get("Reason") == "PartitionNodeLimit" and i,
                30,
                lambda: f"the job held for PartitionNodeLimit: {c.job_info(job)} ({version})",
            )
            assert info["JobState"] == "PENDING", (info, version)
        finally:
            c.cancel_all()
        return
    try:
        job = c.submit(size + 1, sleep_s=300)
        nodes = set(expand_hostlist(c.wait_running(job, timeout=60)))
        assert len(nodes) == size + 1
        under = [name for name, leaf in leaves.items() if nodes & leaf]
        assert len(under) >= 2
    finally:
        c.cancel_all()


def test_a_job_for_two_leaves_stays_under_one_spine(tmp_path):
    """Three tiers: a job that needs two leaves goes under one spine, not across the core."""
    with start(THREE, tmp_path) as running:
        c = running.cluster
        shown = c.topology()
        assert any(s.level == 2 for s in shown.values())
        spines = {n: set(s.nodes) for n, s in shown.items() if s.level == 1}
        leaves = _leaves(shown)
        size = 2 * min(len(v) for v in leaves.values())
        job = c.submit(size, switches=2, sleep_s=300)
        nodes = set(expand_hostlist(c.wait_running(job, timeout=60)))
        assert any(nodes <= spine for spine in spines.values()), nodes
        assert len([1 for leaf in leaves.values() if nodes & leaf]) == 2


def test_reconfigure_with_a_regenerated_tree(running):
    """The update path: a new topology.conf (the same tree, switches named by id instead
    of name or the other way round) is loaded by ``scontrol reconfigure``."""
    c = running.cluster
    flipped = Case(running.case.spec, not running.case.names)
    new = generate(flipped)
    try:
        c.reconfigure(new)
        assert set(c.topology()) == set(parse_topology(new))
    finally:
        c.reconfigure(running.conf)
