"""The pytest plugin (fabriclab.pytest_plugin), run on small users' test files by pytest's
own pytester: a marked test gets a running fabric in a state directory of its own, and
the fabric is taken down and the directory removed after it, pass or fail; a test that
asks for nothing gets nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers import alive

pytest_plugins = ("pytester",)
RUN_TIMEOUT = 300.0

USER_TEST = """
import json, os
import pytest

@pytest.mark.fabric("lab", sm=False, virtual_clock=True)
def test_a_cable_down(fabric):
    with open("seen.json", "w") as f:
        json.dump({"pid": fabric.pid, "state": os.environ["FABRICLAB_STATE_DIR"],
                   "name": fabric.name}, f)
    fabric.fault("down", "LAB-IBLEAF-01[5]")
    [event] = fabric.events()
    assert event["name"] == "Link went down"
    assert "sched-worker2/mlx5_0[1]" in event["object_name"]
    FAIL
"""


def _seen(pytester: pytest.Pytester):
    return json.loads((pytester.path / "seen.json").read_text())


def _taken_down(seen: dict) -> None:
    assert not alive(seen["pid"]), f"the fabric's server (pid {seen['pid']}) still runs"
    assert not Path(seen["state"]).exists(), f"its state directory {seen['state']} is left"


def test_a_marked_test_gets_a_fabric_and_it_goes_after(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=USER_TEST.replace("FAIL", ""))
    r = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=RUN_TIMEOUT)
    r.assert_outcomes(passed=1)
    seen = _seen(pytester)
    assert seen["name"].startswith("test_a_cable_down-")
    _taken_down(seen)


def test_a_failing_test_has_its_fabric_taken_down_too(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=USER_TEST.replace("FAIL", "assert False, 'the test fails'"))
    r = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=RUN_TIMEOUT)
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["*AssertionError: the test fails*"])
    _taken_down(_seen(pytester))


def test_two_fabrics_from_the_factory_and_a_bad_spec(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_user="""
        import json
        import pytest
        from fabriclab.client import CommandFailed

        def test_two(fabric_factory):
            a = fabric_factory("lab", sm=False)
            b = fabric_factory("lab", sm=False)
            assert a.name != b.name
            with open("seen.json", "w") as f:
                json.dump([a.pid, b.pid], f)
            with pytest.raises(CommandFailed) as e:
                fabric_factory("nosuchspec", sm=False)
            assert e.value.problems[0].where == "nosuchspec"
        """
    )
    r = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=RUN_TIMEOUT)
    r.assert_outcomes(passed=1)
    pids = json.loads((pytester.path / "seen.json").read_text())
    assert [p for p in pids if alive(p)] == []


def test_a_test_that_asks_for_nothing_gets_nothing(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_plain="""
        import json, os

        def test_plain():
            with open("seen.json", "w") as f:
                json.dump(os.environ.get("FABRICLAB_STATE_DIR"), f)
        """
    )
    r = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--setup-show")
    r.assert_outcomes(passed=1)
    setups = [line for line in r.outlines if "SETUP" in line]
    assert not [line for line in setups if "fabric" in line], setups
    assert _seen(pytester) == os.environ.get("FABRICLAB_STATE_DIR")
    # the plugin was loaded all the same: its mark is declared
    marks = pytester.runpytest_subprocess("--markers")
    marks.stdout.fnmatch_lines(["@pytest.mark.fabric(spec='lab', **options):*"])
