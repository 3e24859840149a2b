"""How 'fault net' words become the admin request 'net', and its answer a line."""

from __future__ import annotations

import typer
from rich.markup import escape

from ..errors import InputError, Problem

TARGET = typer.Argument(
    ..., help=escape("A link (SWITCH[port] or ENDPOINT/IFACE), an Ethernet switch, or a network.")
)
ACTION = typer.Argument(None, help="down or up.")
RATE = typer.Option(
    None, "--rate", help="Cap each direction of its links: 1gbit, 100mbit ...; off lifts it."
)
DELAY = typer.Option(None, "--delay", help="Delay in ms (netem).")
LOSS = typer.Option(None, "--loss", help="Percent of packets lost (netem).")


def request(
    target: str, action: str | None, rate: str | None, delay: float | None, loss: float | None
) -> dict:
    """The request for ``fault net TARGET [down|up] [--rate R] [--delay MS] [--loss PCT]``."""
    req: dict = {"op": "net", "target": target}
    if action in ("down", "up"):
        req["action"] = action
    elif action is not None:
        raise InputError([Problem(action, "want down or up")])
    elif rate is not None:
        req.update(action="rate", rate=None if rate == "off" else rate)
    elif delay is not None or loss is not None:
        req.update(action="netem", delay_ms=delay, loss_pct=loss)
    else:
        raise InputError([Problem("fault net", "say down, up, --rate, --delay or --loss")])
    return req


def line(r: dict) -> str:
    """The answer as one line."""
    return f"{r['kind']} {r['target']}: {r['action']}, {len(r.get('links', []))} link(s)"
