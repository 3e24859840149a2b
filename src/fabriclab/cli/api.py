"""The api command: a running fabric seen from above over HTTP (Prometheus metrics, a
UFM-compatible REST API, fabriclab's own API and the web view)."""

from __future__ import annotations

import typer

from .common import NameOpt, command, fabric_name, group, say

commands = group("The fabric seen from above.", panel="Running a fabric")

ListenOpt = typer.Option(
    "127.0.0.1:8000",
    "--listen",
    metavar="[HOST:]PORT",
    help="Where to serve HTTP (HOST default 127.0.0.1; PORT 0: a free one); an address "
    "beyond this machine needs --credentials.",
)
CredentialsOpt = typer.Option(
    None,
    "--credentials",
    metavar="USER:PASSWORD|@FILE",
    help="Who may use the API (HTTP Basic, and tokens from POST /ufmRest/app/tokens); "
    "@FILE: USER:PASSWORD lines.  Default: $FABRICLAB_API_CREDENTIALS, else nobody needs "
    "any (loopback only).",
)


@command(commands)
def api(
    name: str | None = NameOpt,
    listen: str = ListenOpt,
    credentials: str | None = CredentialsOpt,
    fabric_pid: int | None = typer.Option(
        None, "--fabric-pid", metavar="PID", help="Stop when process PID (the fabric's) ends."
    ),
) -> None:
    """Serve a running fabric over HTTP until Ctrl-C: /metrics (infiniband_exporter's
    names), /ufmRest/... (UFM's REST API), /api/v1/... (faults, traffic, the clock) and
    the live web view at /.

    Example: fabriclab api --name sim --listen 127.0.0.1:8000
    """
    from ..api.serve import serve

    serve(fabric_name(name), listen, credentials, say, "--listen", fabric_pid)
