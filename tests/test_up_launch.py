"""``fabriclab up``'s own checks and reports: a detached server that fails is reported
with its own log lines only (not an earlier run's, from the same appended log), and
``--max-clients`` is bounded by the descriptors the server may open."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import pytest
from helpers import fl

from fabriclab.errors import InputError
from fabriclab.sim.wire import admission


def _env(tmp_path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IBSIM_", "SIM_"))}
    env["FABRICLAB_STATE_DIR"] = str(tmp_path / "state")
    return env


def test_a_detached_failure_quotes_this_runs_log_lines_only(real_tools, tmp_path):
    env, name = _env(tmp_path), f"flup{os.getpid()}"
    first = fl("up", "lab", "--name", name, "--detach", "--resume", env=env, cwd=tmp_path)
    assert first.returncode != 0
    assert "no journal to resume from" in first.stderr, first.stderr
    (tmp_path / "state" / f"{name}.journal").write_text("not a journal\n")
    second = fl("up", "lab", "--name", name, "--detach", "--resume", env=env, cwd=tmp_path)
    assert second.returncode != 0
    # up's phases (timestamped lines, not a terminal), then its one error line
    lines = [t for t in second.stderr.strip().splitlines() if t.startswith("error:")]
    assert len(lines) == 1 and "the fabric server exited" in lines[0], second.stderr
    assert second.stderr.strip().splitlines()[-1] == lines[0], second.stderr
    assert "building the model" not in lines[0], lines  # the log's phase lines not quoted
    assert "unreadable journal" in lines[0], lines  # this run's error ...
    assert "no journal to resume from" not in lines[0], lines  # ... and not the last run's
    log = (tmp_path / "state" / f"{name}.log").read_text()
    assert "no journal to resume from" in log  # the log keeps both runs


def _up_with_file_limit(limit: int, *args: str, env: dict, cwd) -> subprocess.CompletedProcess:
    def lower() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    return subprocess.run(
        [sys.executable, "-m", "fabriclab.cli", "up", "lab", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=lower,
    )


def test_max_clients_beyond_the_file_limit_is_refused(real_tools, tmp_path):
    env = _env(tmp_path)
    name = f"flmax{os.getpid()}"
    try:
        r = _up_with_file_limit(
            256, "--name", name, "--detach", "--max-clients", "1000", env=env, cwd=tmp_path
        )
    finally:
        fl("down", "--name", name, env=env, cwd=tmp_path)
    assert r.returncode != 0
    assert r.stderr.strip().splitlines() == [
        "error: --max-clients: 1000: more clients than the server may open descriptors for "
        "(the file limit, RLIMIT_NOFILE, is 256, and 64 are kept for the server): at most 192"
    ]
    assert not (tmp_path / "state" / f"{name}.json").exists()  # nothing was started


def test_max_clients_is_checked_against_the_hard_file_limit():
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    assert admission.check_max_clients(1) == 1
    if hard != resource.RLIM_INFINITY:
        top = hard - admission.FD_RESERVE
        assert admission.check_max_clients(top) == top
        with pytest.raises(InputError, match=f"at most {top}$"):
            admission.check_max_clients(top + 1)
    with pytest.raises(InputError, match="want at least 1"):
        admission.check_max_clients(0)
