"""The admin socket's client end (fabriclab.sim.run.admin.call): a fabric that goes away
mid-request, by closing or by resetting the connection, is one InputError line."""

from __future__ import annotations

import socket
import struct
import threading

import pytest

from fabriclab.errors import InputError
from fabriclab.sim.run import admin


def _server(path, reset: bool):
    """A socket at ``path`` that takes one connection, reads the request and goes away
    (a reset when ``reset``: SO_LINGER 0 with data unread)."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    srv.listen(1)

    def serve():
        c, _ = srv.accept()
        c.recv(1)  # the rest of the request stays unread: closing now resets
        if reset:
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        c.close()
        srv.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return t


@pytest.mark.parametrize("reset", [False, True])
def test_a_fabric_gone_mid_request_is_one_error_line(tmp_path, reset):
    path = tmp_path / "f.admin"
    t = _server(path, reset)
    with pytest.raises(InputError) as e:
        admin.call(path, {"op": "tray", "host": "x" * 100_000}, timeout=10)
    t.join(10)
    assert [(p.where, p.what) for p in e.value.problems] == [
        (str(path), "the fabric closed the connection")
    ]
