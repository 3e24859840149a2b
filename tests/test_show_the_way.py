"""Errors that show the way and long operations that show progress: the fabric a command
means without --name, the nearest names for one that names nothing, sysfs and events
--follow ending in one line when their fabric stops, nvidia-smi's summary screen, up's
phases, and down stopping OpenSM promptly."""

from __future__ import annotations

import io
import os
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fabric_server import fabric_up
from helpers import fl, wait_for

from fabriclab.cli.common import load_cluster
from fabriclab.formats import nvidia_smi
from fabriclab.sim.run import records
from fabriclab.sim.run.progress import Lines, Relay


def _env(state: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IBSIM_", "SIM_"))}
    env["FABRICLAB_STATE_DIR"] = str(state)
    return env


# --- the fabric a command means ------------------------------------------------------------


def _record(name: str) -> records.Instance:
    """A record of a fabric up (this process stands for its server)."""
    inst = records.Instance(name, os.getpid(), "lab", None, None, "", 0.0)
    inst.note_server(os.getpid())
    inst.save()
    return inst


def test_choose_the_only_fabric_up_or_list_them(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("FABRICLAB_STATE_DIR", str(tmp_path / "state"))
    with pytest.raises(records.NotRunning) as e:
        records.choose(None)
    assert str(e.value.problems[0]) == (
        f"sim: no fabric named 'sim' is up, nor any other ({tmp_path / 'state'})"
    )
    _record("A")
    assert records.choose(None) == "A"  # the only one up
    assert records.choose("B") == "B"  # a name given is the name
    _record("B")
    with pytest.raises(records.NotRunning) as e:
        records.choose(None)
    assert str(e.value.problems[0]) == (
        "sim: no fabric named 'sim' is up; up: A, B — name one with --name"
    )
    _record("sim")
    assert records.choose(None) == "sim"  # the default, when it is up


def test_exec_without_a_name_uses_the_only_fabric_up(tmp_path: Path) -> None:
    with fabric_up("lab", tmp_path / "a") as f:
        r = fl("exec", "sched-worker1", "--", "ibstat", "-l", env=f.env, cwd=f.workdir)
        assert r.returncode == 0, r.stderr
        assert r.stdout.split()[0] == "mlx5_0"
        r = fl("locate", "sched-worker1", "--json", env=f.env, cwd=f.workdir)
        assert r.returncode == 0 and '"source": "fabric"' in r.stdout, r.stderr
        # a second fabric up: the command names none, so it lists both
        env2 = dict(f.env)
        up = fl("up", "lab", "--name", "second", "--detach", env=env2, cwd=f.workdir)
        assert up.returncode == 0, up.stderr
        try:
            r = fl("exec", "sched-worker1", "--", "ibstat", env=f.env, cwd=f.workdir)
            assert r.returncode == 2
            assert r.stderr == (
                f"error: sim: no fabric named 'sim' is up; up: {f.name}, second — "
                "name one with --name\n"
            )
        finally:
            fl("down", "--name", "second", env=env2, cwd=f.workdir)


# --- the nearest names ---------------------------------------------------------------------


def test_a_name_that_names_nothing_suggests_the_nearest() -> None:
    c = load_cluster("lab")
    port, problem = c.locate("sched-wrker1")
    assert port is None
    assert problem == (
        "no tray, CA or node 'sched-wrker1' in this fabric (did you mean "
        "'sched-worker1', 'sched-worker2', 'sched-worker2/mlx5_1'?)"
    )
    _, problem = c.locate("LAB-IBLEAF-1:3", switches=True)
    assert "(did you mean 'LAB-IBLEAF-01'" in problem
    assert sorted(c.nearest("sched-worker9", trays=True)) == ["sched-worker1", "sched-worker2"]
    assert c.nearest("zzzzzz") == []
    assert str(c.no_tray("sched-wrker2")).endswith(
        "no such tray in this fabric (did you mean 'sched-worker2', 'sched-worker1'?)"
    )


def test_exec_and_nvidia_smi_suggest_the_nearest_trays(tmp_path: Path) -> None:
    with fabric_up("lab", tmp_path) as f:
        r = f.fabriclab("exec", "--name", f.name, "sched-wrker1", "--", "ibstat")
        assert r.returncode == 2
        assert "(did you mean 'sched-worker1'" in r.stderr and len(r.stderr.splitlines()) == 1
        r = f.fabriclab("nvidia-smi", "--name", f.name, "sched-workr2")
        assert r.returncode == 2
        assert r.stderr.startswith("error: sched-workr2: no such tray in this fabric (did you")
        r = f.fabriclab("fault", "--name", f.name, "down", "LAB-IBLEAF-1[3]")
        assert r.returncode == 2 and "did you mean 'LAB-IBLEAF-01'" in r.stderr, r.stderr


# --- endings when the fabric stops ---------------------------------------------------------


def _start(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "fabriclab.cli", *args],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_sysfs_and_events_follow_end_with_one_line_when_the_fabric_stops(tmp_path) -> None:
    env = _env(tmp_path / "state")
    name = f"endings{os.getpid()}"
    up = fl("up", "lab", "--name", name, "--detach", env=env, cwd=tmp_path)
    assert up.returncode == 0, up.stderr
    tree = tmp_path / "tree"
    sysfs = _start(["sysfs", "--name", name, "sched-worker1", str(tree)], env, tmp_path)
    follow = _start(["events", "--name", name, "--follow"], env, tmp_path)
    try:
        wait_for(
            lambda: (tree / "class" / "infiniband" / "mlx5_0").is_dir(),
            30,
            "the tray's tree written",
        )
        fault = fl("fault", "--name", name, "down", "sched-worker1/mlx5_0[1]", env=env)
        assert fault.returncode == 0, fault.stderr
        ready, _, _ = select.select([follow.stdout], [], [], 30)
        assert ready, "events --follow printed the fault's event"
        assert "sched-worker1" in follow.stdout.readline()
    finally:
        down = fl("down", "--name", name, env=env, cwd=tmp_path)
    try:
        assert down.returncode == 0, down.stderr
        _out, err = sysfs.communicate(timeout=30)
        assert sysfs.returncode == 0, err
        assert err == f"fabric {name!r} stopped: the tree at {tree} is no longer kept live\n"
        _out, err = follow.communicate(timeout=30)
        assert follow.returncode == 0, err
        assert err == f"fabric {name!r} stopped: its log ends here\n"
    finally:
        for p in (sysfs, follow):
            if p.poll() is None:
                p.kill()
                p.wait()


# --- nvidia-smi's summary screen -----------------------------------------------------------


def test_nvidia_smi_with_no_arguments_prints_its_summary_screen(tmp_path: Path) -> None:
    with fabric_up("lab", tmp_path) as f:
        screen = f.ok("nvidia-smi", "--name", f.name, "sched-worker1")
        bindir = tmp_path / "bin"
        f.ok("shims", "--name", f.name, "sched-worker1", str(bindir))
        shim = subprocess.run(
            [str(bindir / "nvidia-smi")], env=f.env, capture_output=True, text=True, timeout=60
        )
        assert shim.returncode == 0, shim.stderr
        csv = f.ok(
            "nvidia-smi",
            "--name",
            f.name,
            "sched-worker1",
            "--",
            *nvidia_smi.TOPOGRAPH_QUERY.split(),
        )
    lines = screen.splitlines()
    assert (
        "| NVIDIA-SMI 565.57.01              Driver Version: 565.57.01      CUDA Version: 12.7     |"
        in lines
    )
    gpus = [ln for ln in lines if "NVIDIA GB200" in ln]
    tray = load_cluster("lab").tray("sched-worker1")
    assert len(gpus) == len(tray.gpus) == 4
    assert (
        gpus[0]
        == "|   0  NVIDIA GB200                   On  |   00000000:18:00.0 Off |                    0 |"
    )
    assert all(len(ln) == 91 for ln in lines[1:])
    assert "|  No running processes found" in screen
    assert shim.stdout.splitlines()[1:] == lines[1:]  # the same screen (its clock aside)
    assert csv.splitlines()[0].count(", ") == 1 and len(csv.splitlines()) == 4


# --- up's phases, down's time --------------------------------------------------------------


def test_up_shows_its_phases_plainly_when_not_on_a_terminal(tmp_path: Path) -> None:
    env = _env(tmp_path / "state")
    name = f"phases{os.getpid()}"
    r = fl("up", "lab", "--name", name, "--detach", "--sm", env=env, cwd=tmp_path, timeout=300)
    try:
        assert r.returncode == 0, r.stderr
        lines = r.stderr.splitlines()
        phases = [ln.split("] ", 1)[1].split(":")[0] for ln in lines if "] " in ln]
        order = ["building the model", "serving", "OpenSM sweeping", "ready"]
        assert list(dict.fromkeys(phases)) == order, r.stderr
        assert all(ln[:8].count(":") == 2 for ln in lines if "] " in ln)  # HH:MM:SS
        assert "ready: subnet up (OpenSM)" in r.stderr
    finally:
        d = fl("down", "--name", name, env=env, cwd=tmp_path)
    assert d.returncode == 0, d.stderr


def test_down_stops_opensm_promptly(tmp_path: Path) -> None:
    with fabric_up("lab", tmp_path, sm=True) as f:
        wait_for(lambda: "SUBNET UP" in f.opensm_log(), 60, "OpenSM's SUBNET UP")
        t = time.monotonic()
        d = f.fabriclab("down", "--name", f.name)
        took = time.monotonic() - t
        assert d.returncode == 0, d.stderr
        # up (so that the block's end finds it to take down again)
        r = f.fabriclab("up", "lab", "--name", f.name, "--detach")
        assert r.returncode == 0, r.stderr
    # it took over 6 s when the server no longer answered OpenSM's last MADs (generous:
    # the command's own start takes half a second)
    assert took < 4.0, took


def test_a_relayed_phase_is_shown_once() -> None:
    r, w = os.pipe()
    out = io.StringIO()
    lines = Lines(out)
    lines.phase("building", "lab")
    relay = Relay(r, lines)
    os.write(w, b'{"phase": "building", "detail": "lab"}\n{"phase": "serving", "detail": "x"}\n')
    os.write(w, b'{"detail": "DISCOVERING, 10 MADs answered"}\nnot json\n{"phase": "ready"}\n')
    os.close(w)
    assert relay.pump() == "ready"
    shown = [ln.split("] ", 1)[1] for ln in out.getvalue().splitlines()]
    assert shown == [
        "building the model: lab",  # the detached up's own building: not again
        "serving: x",
        "serving: DISCOVERING, 10 MADs answered",
        "ready",
    ]
    assert relay.fd is None
