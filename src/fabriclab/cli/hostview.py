"""What a tray of the running fabric shows its programs: sysfs (its /sys/class/infiniband)
and nvidia-smi."""

from __future__ import annotations

from pathlib import Path

import typer

from .common import NameOpt, after_dashes, command, fabric_name, group, say, write

commands = group("A tray's view of the running fabric.", panel="A tray's view")

# The fabric server's modules (numpy, scipy) are imported by the commands that use them:
# the others start without loading them.


@command(commands)
def sysfs(
    tray: str = typer.Argument(..., help="The tray (host name) whose HCAs to show."),
    directory: Path = typer.Argument(
        ..., metavar="DIR", help="The sys root to write (DIR/class/infiniband/...)."
    ),
    name: str | None = NameOpt,
    period: str = typer.Option(
        "1s", "--period", help="Time between refreshes (1, 0.5, 500ms, 1m; 50ms to 1h)."
    ),
    once: bool = typer.Option(False, "--once", help="Write the tree once and stop."),
) -> None:
    """Write TRAY's /sys/class/infiniband under DIR from the running fabric and keep it
    live until the fabric stops (node_exporter --path.sysfs=DIR reads it).

    Example: fabriclab sysfs sched-worker1 /tmp/sw1-sys --once
    """
    from ..sim.live.durations import seconds
    from ..sim.run import tools

    name = fabric_name(name)
    every = seconds(period, "--period", 0.05, 3600)
    tools.keep_sysfs(name, tray, directory, every, once=once)
    if not once:
        say(f"fabric {name!r} stopped: the tree at {directory} is no longer kept live")


@command(commands, "nvidia-smi", context_settings={"allow_interspersed_args": False})
def nvidia_smi(
    tray: str = typer.Argument(..., help="The tray whose GPUs answer."),
    args: list[str] | None = typer.Argument(
        None,
        help="After --: -q, or --query-gpu=FIELDS --format=csv[,noheader]; none: the "
        "summary screen.",
    ),
    name: str | None = NameOpt,
) -> None:
    """Print what nvidia-smi prints on TRAY of the running fabric now, its NVLink faults
    included: with no arguments its summary screen, -q (the Fabric section) or the
    --query-gpu form topograph uses.

    Example: fabriclab nvidia-smi sched-worker1 -- -q
    """
    from ..sim.run import tools

    write(tools.nvidia_smi(fabric_name(name), tray, after_dashes(args)), None)
