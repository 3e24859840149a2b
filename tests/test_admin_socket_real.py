"""The admin socket of a running fabric against clients that misbehave: a line nested
974 deep is one error line and the server goes on; a client that sends requests and
never reads its answers is closed, and the real ibnetdiscover, run meanwhile, never
waits for it."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

from fabric_server import fabric_up
from helpers import wait_for

from fabriclab.sim.run import admin


def _path(f) -> Path:
    return admin.admin_path(Path(f.env["FABRICLAB_STATE_DIR"]), f.name)


def _lines(sock: socket.socket, n: int) -> list[dict]:
    buf = b""
    while buf.count(b"\n") < n:
        chunk = sock.recv(65536)
        assert chunk, f"the server closed the connection after {buf!r}"
        buf += chunk
    return [json.loads(line) for line in buf.splitlines()]


def test_a_line_nested_974_deep_is_answered_and_the_server_goes_on(real_tools, tmp_path):
    with fabric_up("lab", tmp_path) as f:
        line = b"[" * 974 + b"]" * 974 + b"\n"
        assert len(line) == 1949
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(30)
            s.connect(str(_path(f)))
            s.sendall(line + b'{"op": "clear", "id": true}\n{"op": "faults"}\n')
            assert _lines(s, 3) == [
                {"ok": False, "where": "request", "what": "nests deeper than 32 levels"},
                {"ok": False, "where": "request", "what": "id: want an integer"},
                {"ok": True, "result": []},
            ]
        r = f.fabriclab("fault", "--name", f.name, "down", "LAB-IBLEAF-01[5]")
        assert r.returncode == 0, r.stderr
        assert f.instance().alive()


def _never_reads(path: Path, stop: threading.Event, closed: list[float]) -> None:
    """Connect, send requests and read nothing, until the server closes the
    connection; then again, until ``stop``.  ``closed``: how long each connection
    lasted."""
    burst = b'{"op": "tray", "host": "sched-worker1"}\n' * 64
    while not stop.is_set():
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)  # the least the kernel keeps
        s.settimeout(60)
        s.connect(str(path))
        t = time.monotonic()
        try:
            while not stop.is_set():
                s.sendall(burst)
        except OSError:  # closed by the server: EPIPE or a reset (or no room for 60 s)
            closed.append(time.monotonic() - t)
        finally:
            s.close()


def test_a_client_that_never_reads_is_closed_and_stalls_no_mad(real_tools, tmp_path):
    with fabric_up("lab", tmp_path) as f:
        stop, closed = threading.Event(), []
        t = threading.Thread(target=_never_reads, args=(_path(f), stop, closed), daemon=True)
        t.start()
        try:
            wait_for(lambda: closed, 30, "the server to close the client that does not read")
            times = []
            for _ in range(9):
                start = time.monotonic()
                r = f.fabriclab("exec", "--name", f.name, "sched-worker1", "--", "ibnetdiscover")
                times.append(time.monotonic() - start)
                assert r.returncode == 0, r.stderr
                assert "LAB-IBLEAF-01" in r.stdout
        finally:
            stop.set()
            t.join(70)
        assert len(closed) >= 9, closed  # it was closed again and again meanwhile
        assert max(closed) < 5, closed  # each time as soon as its answers pile up
        assert max(times) < 20, times
        log = Path(f.instance().log).read_text()
        assert "bytes of answers unread" in log


def test_answers_left_waiting_close_the_client_and_a_half_closed_one_gets_its_answers(
    real_tools, tmp_path
):
    with fabric_up("lab", tmp_path) as f:
        log = Path(f.instance().log)
        # answers that outgrow the socket's buffer, never read: closed after STALL_MAX s
        idle = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        idle.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)
        idle.connect(str(_path(f)))
        idle.sendall(b'{"op": "tray", "host": "sched-worker1"}\n' * 100)
        start = time.monotonic()
        wait_for(
            lambda: f"no answer taken in {admin.STALL_MAX:g} s" in log.read_text(),
            admin.STALL_MAX + 30,
            lambda: f"the idle client closed; the log:\n{log.read_text()[-2000:]}",
        )
        assert time.monotonic() - start >= admin.STALL_MAX - 1
        idle.close()
        # a client that shuts its end after its requests still gets every answer
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(30)
            s.connect(str(_path(f)))
            s.sendall(b'{"op": "clock"}\n' + b'{"op": "tray", "host": "sched-worker1"}\n' * 50)
            s.shutdown(socket.SHUT_WR)
            buf = b""
            while chunk := s.recv(65536):
                buf += chunk
        answers = [json.loads(line) for line in buf.splitlines()]
        assert len(answers) == 51 and all(a["ok"] for a in answers)
