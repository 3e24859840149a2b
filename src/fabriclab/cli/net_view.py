"""The command 'fault net': faults on the other networks, as the admin request 'net',
and its answer as a line."""

from __future__ import annotations

import typer
from rich.markup import escape

from ..errors import InputError, Problem
from .common import JsonOpt, SubNameOpt, fabric_name, print_json, show

TARGET = typer.Argument(
    ..., help=escape("A link (SWITCH[port] or ENDPOINT/IFACE), an Ethernet switch, or a network.")
)
ACTION = typer.Argument(None, help="down, up or flap.")
RATE = typer.Option(
    None, "--rate", help="Cap each direction of its links: 1gbit, 100mbit ...; off lifts it."
)
DELAY = typer.Option(None, "--delay", help="Delay in ms (netem).")
LOSS = typer.Option(None, "--loss", help="Percent of packets lost (netem).")
PERIOD = typer.Option(
    "2s",
    "--period",
    metavar="S",
    help="With flap: each flap's length (2, 500ms, 1m); down half of it.",
)
COUNT = typer.Option(1, "--count", help="With flap: how many flaps.")


def fault_net(
    ctx: typer.Context,
    target: str = TARGET,
    action: str | None = ACTION,
    rate: str | None = RATE,
    delay: float | None = DELAY,
    loss: float | None = LOSS,
    period: str = PERIOD,
    count: int = COUNT,
    name: str | None = SubNameOpt,
    json_out: bool = JsonOpt,
) -> None:
    """Faults on the other networks (up --networks): a link, switch or network down, up
    or flapping, a link's rate capped, delay and loss (where the kernel has netem).

    Example: fabriclab fault net LAB-OOB-01 down
    """
    from ..sim.run import admin

    req = request(target, action, rate, delay, loss)
    if action == "flap":
        req.update(period=period, count=count)
    r = admin.request(fabric_name(name or ctx.obj), req)
    print_json(r) if json_out else show(line(r))


def request(
    target: str, action: str | None, rate: str | None, delay: float | None, loss: float | None
) -> dict:
    """The request for ``fault net TARGET [down|up|flap] [--rate R] [--delay MS] [--loss
    PCT]``."""
    req: dict = {"op": "net", "target": target}
    if action in ("down", "up", "flap"):
        req["action"] = action
    elif action is not None:
        raise InputError([Problem(action, "want down, up or flap")])
    elif rate is not None:
        req.update(action="rate", rate=None if rate == "off" else rate)
    elif delay is not None or loss is not None:
        req.update(action="netem", delay_ms=delay, loss_pct=loss)
    else:
        raise InputError([Problem("fault net", "say down, up, flap, --rate, --delay or --loss")])
    return req


def line(r: dict) -> str:
    """The answer as one line."""
    what = r["action"]
    if what == "flap":
        what = f"flapping {r['count']} time(s), {r['period']:g} s each"
    return f"{r['kind']} {r['target']}: {what}, {len(r.get('links', []))} link(s)"
