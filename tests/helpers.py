"""Small helpers several test files share."""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import threading
from contextlib import contextmanager
from pathlib import Path

from realtools import UMAD2SIM

from fabriclab.model.cluster import Cluster, find_port
from fabriclab.sim.wire.server import FabricServer

_served = itertools.count()


def no_timestamp(text: str) -> list[str]:
    """ibnetdiscover's lines without its '# Topology file:' header (it holds the time)."""
    return [line for line in text.splitlines() if not line.startswith("# Topology file:")]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now (the kernel picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def served(cluster: Cluster, serve: bool = True, **kw):
    """``cluster``'s fabric served in this process (on a thread when ``serve``), under a
    name of its own; the FabricServer, stopped after."""
    name = f"flserved{os.getpid()}x{next(_served)}"
    start, _ = find_port(cluster, None)
    srv = FabricServer(
        cluster.fabric,
        name,
        resolve=lambda t: cluster.locate(t, switches=True),
        default_port=start,
        **kw,
    )
    srv.bind()
    thread = None
    if serve:
        up = threading.Event()
        thread = threading.Thread(target=srv.serve_forever, kwargs={"ready": up.set}, daemon=True)
        thread.start()
        assert up.wait(30)
    try:
        yield srv
    finally:
        srv.stop()
        if thread is not None:
            thread.join(10)
        srv.close()


def run_tool(
    name: str,
    host: str,
    argv: list[str],
    cwd: Path,
    timeout: float = 60,
    remote: tuple[str, int] | None = None,
    **kw,
) -> subprocess.CompletedProcess:
    """A real tool attached at ``host`` of a fabric served under ``name``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IBSIM_", "SIM_"))}
    env.update(LD_PRELOAD=UMAD2SIM, IBSIM_SOCKNAME=name, SIM_HOST=host)
    if remote:
        env.update(IBSIM_SERVER_NAME=remote[0], IBSIM_SERVER_PORT=str(remote[1]))
    return subprocess.run(
        argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, **kw
    )
