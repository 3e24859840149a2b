"""``up --detach``'s start: the fabric server run in a session of its own, its log
appended to, its phases relayed, and nothing of it left running when it does not come
up (or ``up`` is given up)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from ...errors import InputError, Problem
from ...statedir import open_state_file, state_dir
from . import progress
from .records import Instance, NotRunning


def spawn_detached(
    argv: list[str],
    name: str,
    log: Path,
    timeout: float = 120.0,
    relay: tuple[progress.Relay, int] | None = None,
) -> Instance:
    """Start ``fabriclab up …`` (``argv``) in the background; return once it is up.
    ``relay``: where its phases are shown meanwhile, and the pipe's end it writes."""
    state_dir(create=True)
    env = dict(os.environ)
    fds: tuple[int, ...] = ()
    if relay is not None:
        env[progress.ENV] = str(relay[1])
        fds = (relay[1],)
    with os.fdopen(open_state_file(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "ab") as out:
        start = os.fstat(out.fileno()).st_size  # the log is appended to: this run's from here
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
            env=env,
            pass_fds=fds,
        )
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if relay is not None:
                relay[0].pump()
            if proc.poll() is not None:
                tail = _log_tail(log, start)
                raise InputError(
                    [
                        Problem(
                            name,
                            "the fabric server exited: "
                            + (" / ".join(tail) or f"status {proc.returncode}"),
                        )
                    ]
                )
            try:
                inst = Instance.load(name)
                if inst.pid == proc.pid:
                    return inst
            except NotRunning:
                pass
            time.sleep(0.05)
    except BaseException:  # up gave up (Ctrl-C, an error): nothing of it runs on
        _kill_session(proc)
        raise
    _kill_session(proc)
    raise InputError(
        [Problem(name, f"the fabric server did not come up in {timeout:g} s (see {log})")]
    )


def _kill_session(proc: subprocess.Popen) -> None:
    """SIGKILL ``proc`` and what it started in its process group, and reap it (its
    OpenSM dies with it; a record it wrote is stale, removed when next read)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # start_new_session: its group is its pid
    except ProcessLookupError:
        pass
    proc.wait()


def _log_tail(log: Path, start: int, lines: int = 3, most: int = 1 << 16) -> list[str]:
    """The last ``lines`` lines the log holds from byte ``start`` on (of its last
    ``most`` bytes), its phase lines left out (``up`` has shown them already)."""
    with open(log, "rb") as f:
        end = f.seek(0, os.SEEK_END)
        f.seek(max(start, end - most))
        text = f.read().decode(errors="replace").strip().splitlines()
    return [t for t in text if not progress.PHASE_LINE.match(t)][-lines:]
