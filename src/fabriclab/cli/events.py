"""``fabriclab events``: a running fabric's event log, printed (the latest of it as a
table, or every event as JSON lines, read a line at a time) or followed until the fabric
stops."""

from __future__ import annotations

import typer

from ..errors import InputError, Problem
from .common import NameOpt, command, fabric_name, group, say, show_stream, table

commands = group("The running fabric's event log.", panel="The live fabric")

EVENT_COLUMNS = ("id", "timestamp", "severity", "event_type", "name", "object_name", "description")
EVENTS_SHOWN = 1000  # the table shows the latest events; --json gives them all


@command(commands)
def events(
    name: str | None = NameOpt,
    follow: bool = typer.Option(
        False,
        "--follow",
        "-f",
        help="Keep printing new events (through the log's rotations) until the fabric stops.",
    ),
    json_out: bool = typer.Option(False, "--json", help="JSON lines, as the log keeps them."),
) -> None:
    """The fabric's event log (faults, their clearing, links retraining, thresholds).

    Example: fabriclab events --follow
    """
    from .. import eventlog
    from ..sim.live.events import line as event_line
    from ..sim.run import records
    from ..statedir import state_dir

    name = fabric_name(name)
    path = eventlog.events_path(state_dir(), name)
    if not eventlog.log_files(path):
        raise InputError([Problem(name, f"no event log for fabric {name!r} ({path})")])
    line = event_line if json_out else _event_summary
    if follow:  # every event logged (the rotated files first), then each new one
        evs = eventlog.follow(path, 0, running=lambda: records.is_up(name))
        show_stream((line(e) for e in evs), chunk=1)
        say(f"fabric {name!r} stopped: its log ends here")
    elif json_out:
        show_stream(line(e) for e in eventlog.stream(path))
    else:
        shown, total = eventlog.latest(path, EVENTS_SHOWN)
        rows = [[str(e.get(c, "")) for c in EVENT_COLUMNS] for e in shown]
        table(f"events of {name!r}", EVENT_COLUMNS, rows)
        if total > len(shown):
            say(f"the latest {len(shown)} of {total} events: --json for every one")


def _event_summary(e: dict) -> str:
    return "  ".join(str(e.get(c, "")) for c in EVENT_COLUMNS)
