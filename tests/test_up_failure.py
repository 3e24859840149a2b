"""An ``up --detach`` that fails or is given up leaves nothing running: the server it
started and what that started in its process group are killed, whether the server did
not come up in time or ``up`` was interrupted while waiting for it."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest
from helpers import wait_for

from fabriclab.errors import InputError
from fabriclab.sim.run import detach

# a "server" that never comes up, with a child of its own in its process group
SLOW = """
import subprocess, sys, time
child = subprocess.Popen(["sleep", "300"])
open(sys.argv[1], "w").write(str(child.pid))
time.sleep(300)
"""


def _gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rpartition(")")[2].split()[0] in ("Z", "X")  # a zombie is no server


@pytest.fixture
def slow(tmp_path, monkeypatch):
    monkeypatch.setenv("FABRICLAB_STATE_DIR", str(tmp_path / "state"))
    pidfile = tmp_path / "child.pid"
    return [sys.executable, "-c", SLOW, str(pidfile)], pidfile, tmp_path / "up.log"


def _child(pidfile: Path) -> int:
    return int(wait_for(lambda: pidfile.exists() and pidfile.read_text(), 30, "the child"))


def test_a_server_that_does_not_come_up_in_time_is_killed_with_its_children(slow):
    argv, pidfile, log = slow
    with pytest.raises(InputError, match="did not come up in 2 s"):
        detach.spawn_detached(argv, "slowfab", log, timeout=2.0)
    child = _child(pidfile)
    wait_for(lambda: _gone(child), 10, f"the server's child {child} to be gone")


def test_up_interrupted_while_waiting_leaves_nothing_running(slow):
    argv, pidfile, log = slow

    def interrupt(signum, frame):
        if pidfile.exists():
            raise KeyboardInterrupt
        signal.setitimer(signal.ITIMER_REAL, 0.2)

    old = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        with pytest.raises(KeyboardInterrupt):
            detach.spawn_detached(argv, "slowfab", log, timeout=60.0)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    child = _child(pidfile)
    wait_for(lambda: _gone(child), 10, f"the server's child {child} to be gone")
