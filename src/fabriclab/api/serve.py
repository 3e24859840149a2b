"""Running the API: ``fabriclab api --name N --listen [HOST:]PORT`` (and the process
``fabriclab up --api`` starts beside the fabric): the listening socket, the credentials,
the record other commands find it by, uvicorn until a signal."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Callable

from ..errors import InputError, Problem
from ..inputs import parse_host_port
from ..sim.run import apirecord
from .app import make_app
from .auth import Auth, check_listen, load_credentials
from .source import Source

CREDENTIALS_ENV = "FABRICLAB_API_CREDENTIALS"  # USER:PASSWORD or @FILE, kept out of argv
FOLLOW_EVERY = 0.5  # seconds between looks at the fabric's process (--fabric-pid)


def serve(
    name: str,
    listen: str,
    credentials: str | None,
    say: Callable[[str], None],
    where: str,
    fabric_pid: int | None = None,
) -> None:
    """Serve the API of fabric ``name`` on ``listen`` until SIGTERM or SIGINT (or, with
    ``fabric_pid``, until that process ends: the API ``up --api`` started)."""
    import uvicorn

    host, port = parse_host_port(listen, where)
    auth = Auth(load_credentials(credentials or os.environ.get(CREDENTIALS_ENV)))
    check_listen(host, auth, where)
    source = Source.remote(name)
    source.layout()  # the fabric is up and readable, before anything listens
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise InputError([Problem(f"{where} {listen}", f"cannot listen: {e.strerror}")]) from None
    sock.listen(128)
    bound = sock.getsockname()
    shown = f"[{bound[0]}]" if family == socket.AF_INET6 else bound[0]
    url = f"http://{shown}:{bound[1]}/"
    config = uvicorn.Config(
        make_app(source, auth), log_level="warning", access_log=False, timeout_graceful_shutdown=2
    )
    server = uvicorn.Server(config)
    if fabric_pid is not None:
        threading.Thread(target=_follow, args=(server, fabric_pid), daemon=True).start()
    apirecord.save(name, url, os.getpid(), auth.required)
    say(f"fabric {name!r} seen from above at {url} (metrics, /ufmRest, /api/v1, the page)")
    # uvicorn stops on SIGTERM and SIGINT, then raises the signal again against the
    # handler it found: this one, so that the record is removed below rather than the
    # process killed outright
    signal.signal(signal.SIGTERM, _exit)
    try:
        server.run(sockets=[sock])
    finally:
        apirecord.remove(name, os.getpid())
        sock.close()


def _exit(signum: int, _frame) -> None:
    raise SystemExit(128 + signum)


def _follow(server, pid: int) -> None:
    """Stop ``server`` once process ``pid`` has ended."""
    while not server.should_exit:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            server.should_exit = True
            return
        except PermissionError:
            pass
        time.sleep(FOLLOW_EVERY)
