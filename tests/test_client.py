"""The Python client (fabriclab.client): a running fabric found by name or as the only
one up, driven (faults, events, traffic, clock, scenarios, tools), brought up and down;
its errors one line each, and a fabric that goes away one clear error."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import alive, wait_for

from fabriclab.client import CommandFailed, Fabric, FabricGone, NoEvent
from fabriclab.errors import FabriclabError, InputError
from fabriclab.sim.run.records import Instance, NotRunning

LINK = "LAB-IBLEAF-01[5]"  # sched-worker2/mlx5_0's cable


def _name(what: str) -> str:
    return f"client-{what}-{secrets.token_hex(3)}"


@pytest.fixture(scope="module")
def state() -> Iterator[Path]:
    """A state directory of this module's own, FABRICLAB_STATE_DIR while it runs."""
    d = tempfile.mkdtemp(prefix="fabriclab-")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FABRICLAB_STATE_DIR", d)
        yield Path(d)
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def lab(state: Path) -> Iterator[Fabric]:
    """The lab fabric, on a virtual clock, without OpenSM."""
    f = Fabric.up("lab", name=_name("lab"), sm=False, virtual_clock=True)
    try:
        yield f
    finally:
        f.down(missing_ok=True)


def test_connect_finds_the_only_fabric_up(lab: Fabric) -> None:
    assert Fabric.connect().name == lab.name
    assert Fabric.connect(lab.name).pid == lab.pid
    assert alive(lab.pid)


def test_connect_by_a_name_that_is_not_up_says_so(lab: Fabric) -> None:
    with pytest.raises(NotRunning) as e:
        Fabric.connect("nosuch")
    [p] = e.value.problems
    assert p.where == "nosuch" and "no fabric named 'nosuch' is up" in p.what


def test_connect_without_a_name_among_several_lists_them(lab: Fabric, state: Path) -> None:
    other = Instance("other", os.getpid(), "lab", None, None, "", 0.0)
    other.note_server(os.getpid())  # a live process: its record counts as a fabric up
    other.save()
    try:
        with pytest.raises(NotRunning) as e:
            Fabric.connect()
    finally:
        other.path.unlink()
    [p] = e.value.problems
    assert p.where == "sim"
    up = ", ".join(sorted([lab.name, "other"]))
    assert p.what == f"no fabric named 'sim' is up; up: {up} — name one with --name"


def test_connect_without_a_name_and_none_up(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    empty = tmp_path / "state"
    monkeypatch.setenv("FABRICLAB_STATE_DIR", str(empty))
    with pytest.raises(NotRunning) as e:
        Fabric.connect()
    assert [str(p) for p in e.value.problems] == [
        f"sim: no fabric named 'sim' is up, nor any other ({empty})"
    ]


def test_a_fault_is_listed_logged_and_cleared(lab: Fabric) -> None:
    last = max((e["id"] for e in lab.events()), default=0)
    f = lab.fault("down", LINK)
    assert (f["kind"], f["target"]) == ("down", LINK)
    assert f["id"] in [x["id"] for x in lab.faults()]
    [down] = lab.events(since=last)
    assert (down["event_type"], down["name"]) == ("9001", "Link went down")
    assert "sched-worker2/mlx5_0[1]" in down["object_name"]
    assert lab.clear(f["id"]) == [f["id"]]
    assert lab.faults() == []
    up = lab.wait_event(timeout=10, since=down["id"], event_type=9002)
    assert up["object_name"] == down["object_name"]


def test_fault_options_and_up(lab: Fabric) -> None:
    f = lab.fault("flap", "LAB-IBLEAF-01[9]", period=2, count=3)
    assert f["options"] == {"period": 2.0, "count": 3}
    assert lab.fault("up", "LAB-IBLEAF-01[9]") == {"cleared": [f["id"]]}


def test_follow_yields_each_new_event_once(lab: Fabric) -> None:
    last = max((e["id"] for e in lab.events()), default=0)
    events = lab.follow(since=last)
    f = lab.fault("nvlink", "sched-worker2", gpus="0,1")
    first = next(events)
    assert (first["id"], first["event_type"]) == (last + 1, "9014")
    lab.clear(f["id"])
    second = next(events)
    assert (second["id"], second["event_type"]) == (last + 2, "9015")
    events.close()


def test_waiting_for_an_event_that_does_not_come(lab: Fabric) -> None:
    with pytest.raises(NoEvent) as e:
        lab.wait_event(timeout=0.3, event_type=916)
    assert [str(p) for p in e.value.problems] == [
        f"{lab.name}: no event event_type=916 within 0.3 s"
    ]


def test_the_clock_advances(lab: Fabric) -> None:
    before = lab.clock()
    assert before["virtual"] is True
    assert lab.advance(5) == before["now"] + 5
    assert lab.clock()["now"] == before["now"] + 5


def test_traffic_starts_lists_and_stops(lab: Fabric) -> None:
    started = lab.traffic("send", "sched-worker1/mlx5_2", "sched-worker2/mlx5_2", bytes="1Mi")
    assert started["verb"] == "send" and started["count"] == 1
    [fid] = started["ids"]
    [flow] = [f for f in lab.flows() if f["id"] == fid]
    assert (flow["from"], flow["to"], flow["size"]) == (
        "sched-worker1/mlx5_2",
        "sched-worker2/mlx5_2",
        1 << 20,
    )
    ring = lab.traffic("ring", "sched-worker[1-2]", rate="10Gb/s")
    assert ring["count"] == 2
    assert lab.stop(fid) == {"verb": "stop", "ids": [fid], "count": 1}
    assert lab.stop(fid)["count"] == 0  # already stopped
    # (no SM here: no link is ACTIVE, so every flow retries)
    assert [f["id"] for f in lab.flows(state="retrying")] == ring["ids"]
    assert [f["id"] for f in lab.flows(src="sched-worker2", state="running,retrying")] == [
        ring["ids"][1]
    ]
    assert [f["id"] for f in lab.flows(limit=1)] == [fid]
    assert lab.flows(id=fid)[0]["state"] == "stopped"
    summary = lab.flow_summary()
    assert summary["flows"] == 3 and summary["states"]["stopped"] == 1
    assert summary["states"]["retrying"] == 2
    assert set(summary) == {"flows", "states", "sent", "delivered", "rate"}
    assert lab.stop() == {"verb": "stop", "ids": ring["ids"], "count": 2}
    assert all(f["state"] != "running" for f in lab.flows())


SCENARIO = """name: one-down
steps:
  - at: 0s
    do: down LAB-IBLEAF-01[6]
  - at: 10s
    do: clear LAB-IBLEAF-01[6]
"""


def test_a_scenario_from_text_or_a_file(lab: Fabric, tmp_path: Path) -> None:
    r = lab.scenario(SCENARIO)
    assert (r["name"], r["steps"], r["virtual"]) == ("one-down", 2, True)
    assert [s["name"] for s in lab.scenarios()] == ["one-down"]
    lab.advance(10)
    assert lab.scenarios() == [] and lab.faults() == []
    path = tmp_path / "again.yaml"
    path.write_text(SCENARIO.replace("one-down", "again"))
    for given in (path, str(path)):  # a Path, or a string of one line: a file
        assert lab.scenario(given)["name"] == "again"
        lab.advance(10)
    path.write_text("steps:\n  - at: 0s\n    do: explode LAB-IBLEAF-01[6]\n")
    with pytest.raises(InputError) as e:
        lab.scenario(path)
    assert e.value.problems[0].where == f"{path}:3"
    with pytest.raises(InputError) as e:
        lab.scenario(tmp_path / "missing.yaml")
    assert e.value.problems[0].where == str(tmp_path / "missing.yaml")


def test_a_trays_view_and_its_nvidia_smi(lab: Fabric) -> None:
    view = lab.tray("sched-worker1")
    assert [h["name"] for h in view["hcas"]] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    r = lab.exec("sched-worker1", ["nvidia-smi", "--query-gpu=fabric.state", "--format=csv"])
    assert r.returncode == 0 and r.stdout.splitlines()[0] == "fabric.state"
    inputs = lab.topology_inputs("sched-worker1")
    assert "sched-worker1 mlx5_0" in inputs["ibnetdiscover"]
    assert set(lab.stats()) >= {"mads", "answered"}


def test_locate_names_a_port_with_its_lid_and_far_end(lab: Fabric) -> None:
    found = lab.locate("LAB-IBLEAF-01[6]")
    (leaf,) = found["nodes"]
    assert (leaf["type"], leaf["name"], found["source"]) == ("switch", "LAB-IBLEAF-01", "fabric")
    (port,) = leaf["ports"]
    assert port["port"] == 6 and port["peer"] == "sched-worker2/mlx5_1[1]" and port["lid"] > 0
    hcas = lab.locate("sched-worker1")["nodes"]
    assert [n["hca"] for n in hcas] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    with pytest.raises(InputError):
        lab.locate("LAB-IBLEAF-99")


@pytest.mark.realtools
def test_exec_runs_a_real_tool_on_a_tray(lab: Fabric, real_tools) -> None:
    r = lab.exec("sched-worker1", ["ibstat", "-l"])
    assert (r.returncode, r.stdout.split()) == (0, ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"])
    with pytest.raises(InputError) as e:
        lab.exec("sched-worker1", ["no-such-tool-here"])
    assert [str(p) for p in e.value.problems] == ["no-such-tool-here: command not found"]


def test_an_error_is_one_problem(lab: Fabric) -> None:
    with pytest.raises(InputError) as e:
        lab.fault("down", "nowhere")
    assert [str(p) for p in e.value.problems] == [
        "nowhere: no tray, CA or node 'nowhere' in this fabric"
    ]
    with pytest.raises(InputError) as e:
        lab.request("teleport")
    assert [str(p) for p in e.value.problems] == ["request: unknown operation 'teleport'"]


def test_up_that_fails_gives_the_commands_error(state: Path) -> None:
    with pytest.raises(CommandFailed) as e:
        Fabric.up("nosuchspec", name=_name("bad"), sm=False)
    [p] = e.value.problems
    assert p.where == "nosuchspec" and p.what.startswith("no such file, and not a preset")
    assert isinstance(e.value, FabriclabError)


def test_up_down_and_a_fabric_that_goes_away(state: Path) -> None:
    with Fabric.up("lab", name=_name("gone"), sm=False, cold=True, verbose=2) as f:
        pid = f.pid
        argv = Instance.load(f.name).cmdline or []  # the server's: the options as flags
        assert f.spec == "lab" and "--cold" in argv and "-vv" in argv
        os.kill(pid, signal.SIGKILL)  # the server dies: its socket and record stay behind
        wait_for(lambda: not alive(pid), 10, "the killed server to exit")
        for call in (f.clock, f.events, lambda: next(f.follow())):
            with pytest.raises(FabricGone) as e:
                call()
            assert [str(p) for p in e.value.problems] == [
                f"{f.name}: fabric {f.name!r} is no longer up"
            ]
    # leaving the block takes down only a fabric that is up: a gone one is no error
    with Fabric.up("lab", name=_name("down"), sm=False) as f:
        pid = f.pid
    assert not alive(pid)
    with pytest.raises(NotRunning):
        Instance.load(f.name)
    with pytest.raises(FabricGone):
        f.down()
