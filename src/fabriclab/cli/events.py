"""``fabriclab events``: a running fabric's event log, printed or followed until the
fabric stops."""

from __future__ import annotations

import typer

from ..errors import InputError, Problem
from .common import NameOpt, command, fabric_name, group, say, show, table

commands = group("The running fabric's event log.", panel="The live fabric")

EVENT_COLUMNS = ("id", "timestamp", "severity", "event_type", "name", "object_name", "description")


@command(commands)
def events(
    name: str | None = NameOpt,
    follow: bool = typer.Option(
        False, "--follow", "-f", help="Keep printing new events until the fabric stops."
    ),
    json_out: bool = typer.Option(False, "--json", help="JSON lines, as the log keeps them."),
) -> None:
    """The fabric's event log (faults, their clearing, links retraining, thresholds).

    Example: fabriclab events --follow
    """
    from ..sim.live import events as event_log
    from ..sim.run import records
    from ..statedir import state_dir

    name = fabric_name(name)
    path = event_log.events_path(state_dir(), name)
    if not path.exists():
        raise InputError([Problem(name, f"no event log for fabric {name!r} ({path})")])
    evs, offset = event_log.read_new(path, 0)
    line = event_log.line if json_out else _event_summary
    if json_out or follow:
        for e in evs:
            show(line(e))
    else:
        rows = [[str(e.get(c, "")) for c in EVENT_COLUMNS] for e in evs]
        table(f"events of {name!r}", EVENT_COLUMNS, rows)
    if follow:
        for e in event_log.follow(path, offset, running=lambda: records.is_up(name)):
            show(line(e))
        say(f"fabric {name!r} stopped: its log ends here")


def _event_summary(e: dict) -> str:
    return "  ".join(str(e.get(c, "")) for c in EVENT_COLUMNS)
