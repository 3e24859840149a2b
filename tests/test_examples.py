"""The files in examples/: each says what it shows; each scenario runs against its preset
on a running fabric (as its header says to bring it up, under the virtual clock) and
does what it says (the events it leaves); the partitions example names the lab's HCAs;
the spec validates; and the issue's scenario, a bracketed target in a flow mapping,
fails as one line that shows the quoting."""

from __future__ import annotations

import json
import re
import shlex
from collections import Counter
from pathlib import Path

import pytest
from fabric_server import fabric_up
from helpers import fl, one_error

from fabriclab.model.build import build
from fabriclab.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
SCENARIOS = sorted(p for p in EXAMPLES.glob("*.yaml") if "\nsteps:" in p.read_text())

# what each scenario leaves in the event log: at least this many of each event_type
OUTCOMES = {
    "lab-flap.yaml": {"9001": 5, "9002": 5, "916": 1, "9013": 1, "9009": 1},
    "lab-faults.yaml": {
        "9001": 4,  # down, three flaps (and the retrains after errors)
        "9002": 4,
        "130": 1,
        "9007": 1,
        "9008": 1,
        "916": 1,
        "9009": 1,
        "9011": 1,
        "9012": 1,
        "9014": 1,
        "9015": 1,
    },
    "gb200-su-spine-and-rack.yaml": {
        "9003": 1,
        "9004": 1,
        "9001": 64 + 3,  # the spine's 64 links, then three flaps
        "9002": 64 + 3,
        "9014": 1,
        "9015": 1,
    },
}


def _up_line(path: Path) -> list[str]:
    """The ``fabriclab up`` command a scenario's header says to run it on."""
    m = re.search(r"^#\s+fabriclab up (.+)$", path.read_text(), re.M)
    assert m, f"{path.name}: no '# fabriclab up ...' line says which fabric it runs on"
    return shlex.split(m.group(1))


def test_every_example_says_what_it_shows():
    files = sorted(p for p in EXAMPLES.iterdir() if p.is_file())
    assert len(files) >= 6, files
    for p in files:
        first = p.read_text().splitlines()[0]
        assert first.startswith("# ") and len(first) > 30, f"{p.name}: {first!r}"


def test_every_scenario_has_an_outcome_here():
    assert {p.name for p in SCENARIOS} == set(OUTCOMES)


def _scenario_params():
    out = []
    for p in SCENARIOS:
        marks = [pytest.mark.realtools] if "--sm" in _up_line(p) else []
        out.append(pytest.param(p, id=p.name, marks=marks))
    return out


@pytest.mark.parametrize("path", _scenario_params())
def test_example_scenario_runs_against_its_preset(path, tmp_path, request):
    argv = _up_line(path)
    spec, flags = argv[0], [a for a in argv[1:] if a not in ("--detach", "--sm")]
    assert "--virtual-clock" in flags, f"{path.name}: run it under the virtual clock"
    if "--sm" in argv:
        request.getfixturevalue("real_tools")
    with fabric_up(spec, tmp_path, sm="--sm" in argv, extra=flags) as f:
        r = f.fabriclab("scenario", "--name", f.name, "run", str(path))
        assert r.returncode == 0, r.stderr
        end = float(re.search(r"to t=(\S+) s", r.stderr).group(1))  # type: ignore[union-attr]
        f.ok("clock", "--name", f.name, "advance", str(end + 20))
        events = [json.loads(ln) for ln in f.ok("events", "--name", f.name, "--json").splitlines()]
        seen = Counter(e["event_type"] for e in events)
        for kind, least in OUTCOMES[path.name].items():
            assert seen[kind] >= least, (kind, seen)
        # every step ran: none was logged as failed, none is left
        log = Path(f.env["FABRICLAB_STATE_DIR"]) / f"{f.name}.log"
        failed = [ln for ln in log.read_text().splitlines() if "scenario " in ln]
        assert not failed, failed
        running = f.ok("fault", "--name", f.name, "list")
        assert "down" not in running and "nvlink" not in running, running


def test_the_issues_scenario_is_one_error_showing_the_quoting(tmp_path):
    """printf 'name: f\\nsteps:\\n  - {at: 10s, do: flap LAB-IBLEAF-01[9], period: 2s,
    count: 5}\\n' > f.yaml; fabriclab scenario --name L run f.yaml"""
    scenario = tmp_path / "f.yaml"
    scenario.write_text(
        "name: f\nsteps:\n  - {at: 10s, do: flap LAB-IBLEAF-01[9], period: 2s, count: 5}\n"
    )
    with fabric_up("lab", tmp_path / "up", extra=["--virtual-clock"]) as f:
        r = f.fabriclab("scenario", "--name", f.name, "run", str(scenario))
        one_error(
            r, f"{scenario}:3: not valid YAML", 'quote the value, do: "flap LAB-IBLEAF-01[9]"'
        )
        scenario.write_text(
            'name: f\nsteps:\n  - {at: 10s, do: "flap LAB-IBLEAF-01[9]", period: 2s, count: 5}\n'
        )
        f.ok("scenario", "--name", f.name, "run", str(scenario))
        f.ok("clock", "--name", f.name, "advance", "11")
        assert "flap" in f.ok("fault", "--name", f.name, "list")


def _members(text: str, partition: str) -> set[int]:
    body = re.search(rf"^{partition}=\S+\s*:(.*?);", text, re.M | re.S)
    assert body, partition
    return {int(g, 16) for g in re.findall(r"(0x[0-9a-f]{16})=full", body.group(1))}


def test_the_two_tenants_are_the_lab_trays_hcas():
    cluster = build(load_spec("lab"))
    text = (EXAMPLES / "two-tenants.conf").read_text()
    for tenant, host in (("TenantA", "sched-worker1"), ("TenantB", "sched-worker2")):
        guids = {cluster.fabric.find(f"{host} mlx5_{i}").ports[1].guid for i in range(4)}
        assert _members(text, tenant) == guids, tenant


def test_the_example_spec_validates():
    r = fl("validate", str(EXAMPLES / "my-lab.yaml"))
    assert r.returncode == 0 and "ok: lab: 2 trays" in r.stdout, r.stderr
