"""Names as a spec grows (--trays): a name that fits its pattern's zero padding never
changes (gb-r01-t01 at 144, 2,048 and 8,192 trays), a number past it is as wide as it
needs to be, trays and NVLink domains numbered alike widen at the same number (rack
100's trays gb-r100-t.. are domain nvl72-r100's), and validate, inspect and up say which
pattern was outgrown and how wide it became."""

from __future__ import annotations

import os
import re

import pytest
from helpers import fl

from fabriclab.model.build import build
from fabriclab.model.name_patterns import outgrown
from fabriclab.spec.load import load_spec

TRAYS = "gb-r[01-{last}]-t[01-18]{rest}"
OUTGROWN = {
    "trays[0].hosts": "from gb-r100-t01 on the number is 3 digits wide (the names that fit keep 2)",
    "nvlink.name": "nvl72-r{n:02d} outgrows its 2-digit field: from nvl72-r100 on the number "
    "is 3 digits wide (the names that fit keep 2)",
}


@pytest.mark.parametrize(
    ("trays", "racks", "hosts"),
    [
        (144, 8, "gb-r[01-08]-t[01-18]"),
        (2048, 114, "gb-r[01-113]-t[01-18],gb-r114-t[01-14]"),
        (8192, 456, "gb-r[01-455]-t[01-18],gb-r456-t[01-02]"),
    ],
)
def test_names_stay_and_trays_and_domains_agree(trays, racks, hosts):
    spec = load_spec("gb200-su", trays=trays)
    assert spec.trays[0].hosts == hosts
    cluster = build(spec)
    names = [t.host for t in cluster.trays]
    assert len(names) == trays
    # every name of the 144-tray preset is the same at every size
    assert names[:144] == [f"gb-r{r:02d}-t{t:02d}" for r in range(1, 9) for t in range(1, 19)]
    assert names[-1] == f"gb-r{racks:02d}-t{(trays - 1) % 18 + 1:02d}"
    assert [d.name for d in cluster.domains] == [f"nvl72-r{r:02d}" for r in range(1, racks + 1)]
    for domain in cluster.domains:  # nvl72-r100 holds gb-r100-t01 ...
        rack = domain.name.removeprefix("nvl72-r")
        assert {re.sub(r"^gb-r(\d+)-t\d+$", r"\1", t.host) for t in domain.trays} == {rack}
    warnings = {p.where: p.what for p in outgrown(spec, cluster)}
    assert warnings == {p.where: p.what for p in cluster.warnings}
    if racks < 100:
        assert warnings == {}
    else:
        assert (
            warnings["trays[0].hosts"]
            == f"{hosts} outgrows its 2-digit field: " + (OUTGROWN["trays[0].hosts"])
        )
        assert warnings["nvlink.name"] == OUTGROWN["nvlink.name"]
        assert warnings["fabric.fat_tree.names.leaf"].startswith(
            "SU1-IBLEAF-R{rail}-{group:02d} outgrows its 2-digit field: from SU1-IBLEAF-R1-100 on"
        )
        assert set(warnings) <= {
            *OUTGROWN,
            *(f"fabric.fat_tree.names.{r}" for r in ("leaf", "spine")),
        }


def test_validate_and_inspect_say_which_pattern_grew():
    for command in ("validate", "inspect"):
        r = fl(command, "gb200-su", "--trays", "2048")
        assert r.returncode == 0, r.stderr
        lines = r.stderr.splitlines()
        assert lines[0] == (
            "warning: trays[0].hosts: gb-r[01-113]-t[01-18],gb-r114-t[01-14] outgrows its "
            "2-digit field: " + OUTGROWN["trays[0].hosts"]
        )
        assert lines[1] == "warning: nvlink.name: " + OUTGROWN["nvlink.name"]
        r = fl(command, "gb200-su", "--trays", "144")
        assert (r.returncode, r.stderr) == (0, "")


SMALL = """\
name: small
trays:
  - hosts: t[01-08]
    gpus: 1
    hcas: 1
nvlink:
  trays_per_domain: 1
  name: nvl{n:02d}
fabric:
  fat_tree:
    tiers: 2
    switch: quantum-2
    hosts_per_leaf: 32
    names:
      leaf: L{n:02d}
      spine: S{n:02d}
"""


def test_up_says_which_pattern_grew(tmp_path):
    spec = tmp_path / "small.yaml"
    spec.write_text(SMALL)
    env = dict(os.environ, FABRICLAB_STATE_DIR=str(tmp_path / "state"))
    name = f"fltest{os.getpid()}widths"
    r = fl("up", str(spec), "--trays", "100", "--name", name, "--detach", env=env)
    try:
        assert r.returncode == 0, r.stderr
        assert r.stderr.splitlines()[:2] == [
            "warning: trays[0].hosts: t[01-100] outgrows its 2-digit field: from t100 on the "
            "number is 3 digits wide (the names that fit keep 2)",
            "warning: nvlink.name: nvl{n:02d} outgrows its 2-digit field: from nvl100 on the "
            "number is 3 digits wide (the names that fit keep 2)",
        ]
        blocks = fl("topology", "--name", name, "-e", "slurm-block", env=env)
        assert blocks.returncode == 0, blocks.stderr
        assert re.findall(r"^BlockName=(\S+) Nodes=(\S+)$", blocks.stdout, re.M)[-2:] == [
            ("nvl99", "t99"),
            ("nvl100", "t100"),
        ]
    finally:
        fl("down", "--name", name, env=env)
