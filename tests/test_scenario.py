"""Scenario files in process: every fault verb of 'fabriclab fault' as a step, with its
options; every form YAML allows for a bracketed target; the one-line error, showing the
quoting, where YAML itself refuses a '['."""

from __future__ import annotations

import pytest
from helpers import served

from fabriclab.cli import live as cli_live
from fabriclab.errors import InputError
from fabriclab.model.build import build
from fabriclab.sim.live import scenario
from fabriclab.sim.live.api import LiveFabric
from fabriclab.sim.live.clock import VirtualClock
from fabriclab.sim.live.faults.options import KINDS
from fabriclab.spec.load import load_spec

LEAF = "LAB-IBLEAF-01"


@pytest.fixture
def live():
    cluster = build(load_spec("lab"))
    with served(cluster, serve=False) as srv:
        yield LiveFabric(srv, cluster, VirtualClock())


def _events(live) -> list[str]:
    return [e["event_type"] for e in live.events.events]


def test_every_fault_verb_and_option_of_the_cli_is_a_scenario_verb():
    """The scenario's verbs and options are those of 'fabriclab fault' (and the fault
    kinds the live fabric knows), plus clear and traffic."""
    assert set(scenario.FAULT_VERBS) == {*cli_live.FAULTS, "clear"}
    assert set(KINDS) <= set(scenario.FAULT_VERBS)
    for verb, declared in cli_live.FAULTS.items():
        assert scenario._OPTIONS[verb] == set(declared.options), verb


# each verb as a step: the step, the faults in force after it ran (kind, target,
# options), the events it wrote
VERBS = {
    "down": (
        f"do: down {LEAF}[5]",
        [("down", f"{LEAF}[5]", {})],
        ["9001"],
    ),
    "flap": (
        f"do: flap {LEAF}[9]\n  period: 4s\n  count: 3",
        [("flap", f"{LEAF}[9]", {"period": 4.0, "count": 3})],
        ["9001"],
    ),
    "degrade": (
        f"do: degrade {LEAF}[7]\n  width: 2x\n  speed: HDR",
        [("degrade", f"{LEAF}[7]", {"width": "2x", "speed": "HDR"})],
        ["130", "9007"],
    ),
    "errors": (
        f"do: errors {LEAF}[6]\n  ber: 1e-10\n  down-after: 20",
        [("errors", f"{LEAF}[6]", {"ber": 1e-10, "down_after": 20})],
        ["916"],
    ),
    "drop": (
        "do: drop LAB-IBSPINE-01\n  rate: 50\n  seed: 7",
        [("drop", "LAB-IBSPINE-01", {"rate": 50.0, "seed": 7})],
        ["9011"],
    ),
    "nvlink": (
        "do: nvlink sched-worker2\n  gpus: 0,1",
        [("nvlink", "sched-worker2", {"gpus": [0, 1]})],
        ["9014"],
    ),
}


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_each_fault_verb_runs_with_its_options(live, verb):
    step, faults, events = VERBS[verb]
    r = live.scenario(f"- at: 2s\n  {step}\n", "s.yaml")
    assert r["steps"] == 1 and live.faults() == []
    live.advance(2)
    got = [(f["kind"], f["target"], f["options"]) for f in live.faults()]
    assert got == faults
    assert _events(live)[: len(events)] == events, live.events.events
    assert live.scenarios == []


def test_up_brings_back_what_down_took(live):
    live.scenario("- at: 1s\n  do: down sched-worker2\n- at: 3s\n  do: up sched-worker2\n", "s")
    live.advance(2)
    assert [f["kind"] for f in live.faults()] == ["down"]
    live.advance(2)
    events = _events(live)
    assert live.faults() == [] and events[0] == "9005" and "9006" in events


@pytest.mark.parametrize(
    ("clear", "left"),
    [("clear all", []), ("clear 1", ["nvlink"]), ("clear sched-worker2", ["down"])],
)
def test_clear_by_id_target_or_all(live, clear, left):
    text = (
        f"- at: 1s\n  do: down {LEAF}[1]\n"
        "- at: 1s\n  do: nvlink sched-worker2\n  gpus: [2, 3]\n"
        f"- at: 2s\n  do: {clear}\n"
    )
    live.scenario(text, "s.yaml")
    live.advance(1)
    assert [f["kind"] for f in live.faults()] == ["down", "nvlink"]
    live.advance(1)
    assert [f["kind"] for f in live.faults()] == left


def test_nvlink_takes_one_gpu_as_a_number(live):
    live.scenario("- at: 0s\n  do: nvlink sched-worker1\n  gpus: 3\n", "s.yaml")
    assert live.faults()[0]["options"] == {"gpus": [3]}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "- at: 1s\n  do: nvlink LAB-IBLEAF-01[5]\n",
            "s.yaml:2: LAB-IBLEAF-01[5]: nvlink takes a tray",
        ),
        ("- at: 1s\n  do: nvlink sched-worker1\n  gpus: x\n", "s.yaml:2: --gpus: 'x'"),
        ("- at: 1s\n  do: nvlink sched-worker1\n  rate: 5\n", "s.yaml:3: nvlink takes no option"),
        ("- at: 1s\n  do: errors X[1]\n  colour: red\n", "(options: ber, down-after)"),
    ],
)
def test_a_bad_nvlink_or_option_step_is_one_error(live, text, message):
    with pytest.raises(InputError) as e:
        live.scenario(text, "s.yaml")
    assert message in str(e.value), str(e.value)
    assert live.faults() == []


# every form YAML allows for a step whose target has brackets: each is one flap step
FORMS = {
    "block, plain": "steps:\n  - at: 10s\n    do: flap LAB-IBLEAF-01[9]\n    count: 2\n",
    "block, quoted": 'steps:\n  - at: 10s\n    do: "flap LAB-IBLEAF-01[9]"\n    count: 2\n',
    "flow, quoted": 'steps:\n  - {at: 10s, do: "flap LAB-IBLEAF-01[9]", count: 2}\n',
    "flow, single-quoted": "steps:\n  - {at: 10s, do: 'flap LAB-IBLEAF-01[9]', count: 2}\n",
    "shell quotes, as typed for 'fault'": "- at: 10s\n  do: flap 'LAB-IBLEAF-01[9]'\n  count: 2\n",
    "a list of words": '- at: 10s\n  do: [flap, "LAB-IBLEAF-01[9]"]\n  count: 2\n',
    "a block list of words": "- at: 10s\n  do:\n    - flap\n    - LAB-IBLEAF-01[9]\n  count: 2\n",
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_every_yaml_form_of_a_bracketed_target_works(live, form):
    live.scenario(FORMS[form], "s.yaml")
    live.advance(10)
    got = [(f["kind"], f["target"], f["options"]["count"]) for f in live.faults()]
    assert got == [("flap", "LAB-IBLEAF-01[9]", 2)]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (  # the reproducer: a flow mapping, unquoted
            "name: f\nsteps:\n  - {at: 10s, do: flap LAB-IBLEAF-01[9], period: 2s, count: 5}\n",
            "s.yaml:3: not valid YAML: did not find expected ',' or '}': inside {...} YAML "
            "reads '[' as the start of a list: quote the value, "
            'do: "flap LAB-IBLEAF-01[9]" (one key a line, do: flap LAB-IBLEAF-01[9] needs '
            "no quotes)",
        ),
        (
            "- {at: 1s, do: degrade sched-worker1/mlx5_0[1]}\n",
            "s.yaml:1: not valid YAML: did not find expected ',' or '}': inside {...} YAML "
            "reads '[' as the start of a list: quote the value, "
            'do: "degrade sched-worker1/mlx5_0[1]"',
        ),
        (
            "- at: 1s\n  do: [flap, LAB-IBLEAF-01[9]]\n",
            "s.yaml:2: not valid YAML: did not find expected ',' or ']': inside [...] YAML "
            "reads '[' as the start of a list: quote it, \"LAB-IBLEAF-01[9]\"",
        ),
    ],
)
def test_a_bracket_yaml_refuses_is_one_error_showing_the_quoting(live, text, message):
    with pytest.raises(InputError) as e:
        live.scenario(text, "s.yaml")
    assert len(e.value.problems) == 1
    assert str(e.value).startswith(message), str(e.value)
    assert "\n" not in str(e.value)
    # and the quoting it shows is accepted
    fixed = text.replace("flap LAB-IBLEAF-01[9],", '"flap LAB-IBLEAF-01[9]",')
    fixed = fixed.replace("degrade sched-worker1/mlx5_0[1]}", '"degrade sched-worker1/mlx5_0[1]"}')
    fixed = fixed.replace("flap, LAB-IBLEAF-01[9]]", 'flap, "LAB-IBLEAF-01[9]"]')
    if "degrade" in fixed:
        fixed = fixed.replace("}", ", width: 2x}")
    live.scenario(fixed, "s.yaml")


@pytest.mark.parametrize(
    ("do", "message"),
    [
        (
            "flap 'LAB-IBLEAF-01[9]",
            "s.yaml:2: do: wants 'VERB ARGS', e.g. 'flap LEAF[17]': No closing",
        ),
        ("[]", "s.yaml:2: do: wants 'VERB ARGS'"),
        ("{verb: flap}", "s.yaml:2: do: wants 'VERB ARGS'"),
    ],
)
def test_a_do_that_is_not_words_is_one_error(live, do, message):
    with pytest.raises(InputError) as e:
        live.scenario(f"- at: 1s\n  do: {do}\n", "s.yaml")
    assert message in str(e.value), str(e.value)


def test_other_yaml_errors_are_left_as_they_are(live):
    with pytest.raises(InputError) as e:
        live.scenario("- at: 1s\n  do: flap X\n - at", "s.yaml")
    assert "quote" not in str(e.value) and "not valid YAML" in str(e.value)


def test_steps_at_one_time_run_in_file_order(live):
    """A step's own catching up (the fault it injects) runs no later step first: down
    then up at the same time leaves the link up, with nothing failed."""
    live.scenario(f"- at: 1s\n  do: down {LEAF}[3]\n- at: 1s\n  do: up {LEAF}[3]\n", "s.yaml")
    sc = live.scenarios[0]
    live.advance(1)
    assert live.faults() == [] and live.scenarios == []
    assert sc.log == ["s.yaml:2: down LAB-IBLEAF-01[3]", "s.yaml:4: up LAB-IBLEAF-01[3]"]


def test_a_long_bad_line_is_refused_at_once(live):
    """The quoting hint looks only at a line a person wrote: a huge one is refused as
    YAML refuses it, at once."""
    import time

    text = "- {at: 1s, do: " + "a" * 400_000 + "}}\n"  # minutes for the hint's searches
    start = time.monotonic()
    with pytest.raises(InputError, match="not valid YAML") as e:
        live.scenario(text, "s.yaml")
    assert "quote" not in str(e.value) and time.monotonic() - start < 5


def test_steps_of_scenarios_due_at_one_time_run_in_the_order_they_started(live):
    """A step's own catching up runs no other scenario's step first: 'down' of the first
    scenario, then 'up' of the second, at the same time, leave the link up."""
    live.scenario(f"- at: 1s\n  do: down {LEAF}[3]\n", "a.yaml")
    live.scenario(f"- at: 1s\n  do: up {LEAF}[3]\n", "b.yaml")
    a, b = live.scenarios
    live.advance(2)
    assert live.faults() == [] and live.scenarios == []
    assert a.log == ["a.yaml:2: down LAB-IBLEAF-01[3]"]
    assert b.log == ["b.yaml:2: up LAB-IBLEAF-01[3]"]


def test_hundreds_of_steps_due_at_one_time_run_one_after_another(live):
    """400 scenarios with a step due at the same instant: a loop, no recursion; each
    step ran, in the order the scenarios started."""
    for i in range(400):
        live.scenario(f"- at: 1s\n  do: {'down' if i % 2 == 0 else 'up'} {LEAF}[3]\n", f"{i}.yaml")
    scs = list(live.scenarios)
    live.advance(2)
    assert live.scenarios == [] and live.faults() == []
    assert all("no fault" not in line for sc in scs for line in sc.log)
