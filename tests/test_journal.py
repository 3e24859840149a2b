"""The journal read back in process: a damaged journal is refused whole with one line
naming the field (never an internal error, never a fabric resumed half or with what
'fault' would refuse), hand-damaged cases and a hypothesis run that damages a real
journal at random; flows come back all at once, as they were."""

from __future__ import annotations

import copy
import json
import time

import pytest
from helpers import served
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fabriclab.errors import InputError
from fabriclab.model.build import build
from fabriclab.sim.fabric import minhop
from fabriclab.sim.live import journal
from fabriclab.sim.live.api import LiveFabric
from fabriclab.sim.live.clock import VirtualClock
from fabriclab.sim.live.traffic.engine import TrafficEngine
from fabriclab.spec.load import load_spec

LEAF = "LAB-IBLEAF-01"
CLUSTER = build(load_spec("lab"))


def _fresh(srv, clock: float = 0.0) -> LiveFabric:
    minhop.fill(srv.sim)
    c = VirtualClock(clock)
    return LiveFabric(srv, CLUSTER, c, traffic=TrafficEngine(srv.sim, c))


@pytest.fixture(scope="module")
def good() -> dict:
    """A journal with a fault of every kind, a scenario half run, flows, error state
    and counters."""
    with served(CLUSTER, serve=False) as srv:
        live = _fresh(srv)
        live.fault("down", f"{LEAF}[5]")
        live.fault("errors", f"{LEAF}[6]", ber=1e-10, down_after=255)
        live.fault("flap", f"{LEAF}[7]", period=4, count=3)
        live.fault("degrade", f"{LEAF}[8]", width="2x")
        live.fault("drop", "LAB-IBSPINE-01", rate=50, seed=3)
        live.fault("nvlink", "sched-worker2", gpus=[0, 1])
        live.scenario(
            f"- at: 1s\n  do: down {LEAF}[3]\n- at: 100s\n  do: flap {LEAF}[4]\n  period: 2s\n",
            "s.yaml",
        )
        live.traffic_request("send", ["sched-worker1", "sched-worker2"], {"bytes": "10G"})
        live.traffic_request("all-to-all", ["sched-worker[1-2]"], {"rate": "1GB/s"})
        live.advance(3)
        return json.loads(json.dumps({"version": journal.VERSION, **live.snapshot()}))


def _resume(tmp_path, doc) -> LiveFabric:
    """``doc`` written as a journal, read and restored as ``up --resume`` does, then
    used: fault list, scenario list, traffic list, a clock advance."""
    path = tmp_path / "x.journal"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    checked = journal.load(path)
    with served(CLUSTER, serve=False) as srv:
        live = _fresh(srv, checked["clock"])
        live.restore(checked, f"journal {path}")
        live.faults()
        live.scenarios_running()
        live.traffic_request("list", [], {})
        live.advance(1)
        live.faults()
        return live


def _refused(tmp_path, doc) -> str:
    with pytest.raises(InputError) as e:
        _resume(tmp_path, doc)
    text = str(e.value)
    assert "\n" not in text and "Traceback" not in text and "internal" not in text
    return text


def test_the_good_journal_resumes(tmp_path, good):
    live = _resume(tmp_path, good)
    assert {f["kind"] for f in live.faults()} >= {"down", "errors", "degrade", "drop", "nvlink"}
    assert len(live.scenarios) == 1 and live.scenarios[0].done == 1


def _set(doc: dict, path: tuple, value) -> dict:
    d = copy.deepcopy(doc)
    at = d
    for k in path[:-1]:
        at = at[k]
    if value is _DELETE:
        del at[path[-1]]
    else:
        at[path[-1]] = value
    return d


_DELETE = object()


def _fault(doc: dict, kind: str) -> int:
    return next(i for i, f in enumerate(doc["faults"]) if f["kind"] == kind)


# the damage, what the one line names; ``kind``: the index of that kind's fault
DAMAGE = [
    (("clock",), "10", "clock: Input should be a valid number"),
    (("faults",), "down", "faults: Input should be a valid array"),
    (("faults",), {"1": {}}, "faults: Input should be a valid array"),
    (("next_fault",), _DELETE, "next_fault: Field required"),
    (("faults", "down", "id"), "1", "faults.0.id: Input should be a valid integer"),
    (("faults", "down", "target"), _DELETE, "faults.0.target: Field required"),
    (("faults", "down", "since"), "yesterday", "faults.0.since: Input should be a valid number"),
    (("faults", "flap", "progress"), {"flaps": "x"}, "progress.flaps: Input should be a valid"),
    (("faults", "flap", "progress"), {"flaps": 0}, "progress.down: Field required"),
    (("faults", "errors", "options", "ber"), 1.0, "--ber: 1: want a bit-error rate"),
    (("faults", "flap", "options", "period"), 0, "--period"),
    (("faults", "drop", "options", "rate"), 500, "--rate: 500: want a percentage"),
    (("faults", "degrade", "options", "width"), "12x", "--width: 12x is not narrower"),
    (("faults", "nvlink", "options", "gpus"), [9], "--gpus: no GPU 9"),
    (("faults", "down", "kind"), "explode", "faults.0.kind: Input should be"),
    (("faults", "down", "target"), "NOPE[1]", "faults.0: NOPE[1]"),
    (("scenarios", 0, "steps", 1, "at"), "soon", "scenarios.0.steps.1.at: Input should be"),
    (("scenarios", 0, "done"), -5, "scenarios.0.done: Input should be greater than"),
    (("scenarios", 0, "done"), 7, "scenarios.0.done: 7 of 2 steps"),
    (("scenarios", 0, "steps", 1, "options"), {"period": -1}, "scenarios.0.steps.1: --period"),
    (("traffic", 0, "src"), "99:1", "traffic.0.src: 99:1: not a CA port"),
    (("traffic", 0, "left"), "many", "traffic.0.left: Input should be a valid integer"),
    (("ber",), {"99": {}}, "ber.99: no errors fault 99"),
    (("counters",), {"1:1": [{}, {}, {}, {}]}, "counters.1:1.4: Field required"),
    (("surprise",), 1, "surprise: Extra inputs are not permitted"),
]


@pytest.mark.parametrize("path,value,message", DAMAGE, ids=[d[2][:40] for d in DAMAGE])
def test_a_damaged_journal_is_one_line_naming_the_field(tmp_path, good, path, value, message):
    if len(path) > 1 and path[0] == "faults" and isinstance(path[1], str):
        i = _fault(good, path[1])
        path = ("faults", i, *path[2:])
        message = message.replace("faults.0", f"faults.{i}")
    text = _refused(tmp_path, _set(good, path, value))
    assert f"journal {tmp_path / 'x.journal'}: " in text
    assert message in text, text


@pytest.mark.parametrize(
    "text,message",
    [
        ("[" * 100_000 + "]" * 100_000, "unreadable journal"),
        ('{"version": 1, "meta": ' + "[" * 5000 + "]" * 5000 + "}", "unreadable journal"),
        ("\xff\xfe", "unreadable journal"),
        ('{"version": 2}', "not a version 1 journal"),
        ("[]", "not a version 1 journal"),
    ],
)
def test_a_journal_that_is_no_document_is_one_line(tmp_path, text, message):
    assert message in _refused(tmp_path, text)


def _paths(doc, prefix=()):
    """Every place in ``doc``."""
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, (*prefix, i))


SWAPS = st.sampled_from(
    ["x", "", "1", 0, -1, 1.5, 1e300, True, None, [], {}, [1, "a"], {"a": 1}, _DELETE]
)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_every_damage_is_a_clean_resume_or_one_line(tmp_path, good, data):
    """Type swaps, missing keys and deep nesting anywhere in a real journal: either the
    fabric resumes and answers, or up --resume says one line; never anything else."""
    paths = [p for p in _paths(good) if p and p != ("version",)]
    doc = good
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(paths))
        value = data.draw(
            st.one_of(SWAPS, st.integers(1, 400).map(lambda n: json.loads("[" * n + "]" * n)))
        )
        try:
            doc = _set(doc, path, value)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier damage took that place away
    try:
        _resume(tmp_path, doc)
    except InputError as e:
        assert "\n" not in str(e) and str(e).startswith(("journal ", str(tmp_path))), str(e)


def test_flows_come_back_all_at_once_as_they_were(tmp_path, good):
    live = _resume(tmp_path, good)
    flows = live.traffic_request("list", [], {})["flows"]
    assert len(flows) == len(good["traffic"]) == 3
    assert all((f["timeout"], f["retry_count"]) == (20, 7) for f in flows)  # NCCL's
    sized = [f for f in flows if f["size"] is not None]
    assert len(sized) == 1 and sized[0]["size"] == good["traffic"][0]["left"]
    assert all(f["limit"] == pytest.approx(1e9) for f in flows if f["size"] is None)


def test_thousands_of_flows_resume_in_one_pass(tmp_path, good):
    """20,000 flows of the journal are routed once, not one by one (tens of seconds
    before; bench/journal_resume.py measures it)."""
    doc = copy.deepcopy(good)
    flows = good["traffic"]
    doc["traffic"] = [dict(flows[i % len(flows)], id=i + 1) for i in range(20_000)]
    start = time.monotonic()
    live = _resume(tmp_path, doc)
    assert len(live.traffic.flows()) == 20_000
    assert time.monotonic() - start < 10
