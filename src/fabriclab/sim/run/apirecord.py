"""The API's record beside a fabric's (``<name>.api.json`` in the state directory): its
URL and process, written by ``fabriclab api`` once it listens, read by ``up``,
``status`` and the tests; and the API's process that ``up --api`` starts and stops."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

from ...statedir import open_state_file, replace_state_file, state_dir
from .records import process_identity, process_state_of

STOP_WAIT = 5.0  # seconds the API is given to stop before it is killed


def record_path(name: str) -> Path:
    """Where fabric ``name``'s API record is."""
    return state_dir() / f"{name}.api.json"


def save(name: str, url: str, pid: int, auth: bool) -> None:
    """Record the API of fabric ``name`` (atomically, as the user's own file)."""
    path = record_path(name)
    start, cmdline = process_identity(pid)
    doc = {"url": url, "pid": pid, "start": start, "cmdline": cmdline, "auth": auth}
    data = json.dumps(doc).encode()
    replace_state_file(path, lambda f: f.write(data), tag=str(pid))


def load(name: str) -> dict | None:
    """Fabric ``name``'s API record while its process runs (else None)."""
    try:
        with os.fdopen(open_state_file(record_path(name), os.O_RDONLY)) as f:
            doc = json.loads(f.read(1 << 16))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("pid"), int):
        return None
    if process_state_of(doc["pid"], doc.get("start"), doc.get("cmdline")) != "alive":
        return None
    return doc


def remove(name: str, pid: int) -> None:
    """Remove the record if it is still process ``pid``'s."""
    doc = None
    with contextlib.suppress(OSError, ValueError):
        with os.fdopen(open_state_file(record_path(name), os.O_RDONLY)) as f:
            doc = json.loads(f.read(1 << 16))
    if isinstance(doc, dict) and doc.get("pid") == pid:
        record_path(name).unlink(missing_ok=True)


def start(argv: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start the API's process (``argv``: ``fabriclab api ...``), its output to ``log``."""
    fd = open_state_file(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        return subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=fd, stderr=fd, env=env, start_new_session=True
        )
    finally:
        os.close(fd)


def wait(name: str, proc: subprocess.Popen, timeout: float) -> dict | None:
    """The API's record once it listens; None when its process ended first or
    ``timeout`` passed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        doc = load(name)
        if doc is not None and doc["pid"] == proc.pid:
            return doc
        if proc.poll() is not None:
            return None
        time.sleep(0.05)
    return None


def stop(proc: subprocess.Popen | None) -> None:
    """Stop the API's process: SIGTERM, then SIGKILL after :data:`STOP_WAIT`."""
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(STOP_WAIT)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait()
