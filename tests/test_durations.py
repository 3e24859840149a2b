"""One duration syntax everywhere: the parser, and the fault, clock and scenario paths
that use it (in process; the command line's is in test_live_real)."""

from __future__ import annotations

import pytest
from helpers import served

from fabriclab.errors import InputError
from fabriclab.model.build import build
from fabriclab.sim.live import admin_requests
from fabriclab.sim.live.api import LiveFabric
from fabriclab.sim.live.clock import VirtualClock
from fabriclab.sim.live.durations import seconds
from fabriclab.spec.load import load_spec


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("2", 2.0),
        ("2.5", 2.5),
        ("2s", 2.0),
        ("500ms", 0.5),
        ("1m", 60.0),
        ("1h", 3600.0),
        (" 3 s ", 3.0),
        ("1e-3", 0.001),
        (4, 4.0),
        (0.25, 0.25),
    ],
)
def test_every_form(text, want):
    assert seconds(text, "--period") == want


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("2x", "--period: '2x' is not a duration (2, 2.5, 2s, 500ms, 1m, 1h)"),
        ("", "--period: '' is not a duration"),
        ("-1s", "--period: '-1s' is not a duration"),
        (True, "--period: True is not a duration"),
        ("9" * 100, "is not a duration"),
        ("2d", "'2d' is not a duration"),
    ],
)
def test_a_bad_duration_is_one_problem_naming_the_option(text, message):
    with pytest.raises(InputError) as e:
        seconds(text, "--period")
    assert len(e.value.problems) == 1 and message in str(e.value)


def test_out_of_range_names_the_span():
    with pytest.raises(InputError, match=r"--period: '25h': want 0\.001 s to 1 day$"):
        seconds("25h", "--period", 0.001, 86400)
    with pytest.raises(InputError, match=r"SECONDS: -1: want 0 s to 3650 days"):
        seconds(-1, "SECONDS")


@pytest.fixture
def live():
    cluster = build(load_spec("lab"))
    with served(cluster, serve=False) as srv:
        yield LiveFabric(srv, cluster, VirtualClock())


def test_flap_period_and_clock_advance_take_durations(live):
    f = admin_requests.answer(
        live,
        {
            "op": "fault",
            "kind": "flap",
            "target": "LAB-IBLEAF-01[9]",
            "options": {"period": "2s", "count": 2},
        },
    )
    assert f["options"] == {"period": 2.0, "count": 2}
    assert admin_requests.answer(live, {"op": "advance", "seconds": "500ms"}) == {"now": 0.5}
    assert admin_requests.answer(live, {"op": "advance", "seconds": 1}) == {"now": 1.5}
    with pytest.raises(InputError, match="SECONDS: 'soon' is not a duration"):
        admin_requests.answer(live, {"op": "advance", "seconds": "soon"})
    with pytest.raises(InputError, match="--period: '2 weeks' is not a duration"):
        live.fault("flap", "LAB-IBLEAF-01[8]", period="2 weeks")


def test_a_scenario_and_the_command_mean_the_same(live):
    live.scenario("- at: 500ms\n  do: flap LAB-IBLEAF-01[9]\n  period: 1m\n", "s.yaml")
    live.advance(1)
    assert live.faults()[0]["options"]["period"] == 60.0
