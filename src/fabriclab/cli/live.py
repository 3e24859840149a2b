"""The commands that change or watch the running fabric: fault, traffic, scenario, clock."""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape

from . import net_view
from . import traffic_view as view
from .common import (
    JsonOpt,
    NameOpt,
    SubNameOpt,
    command,
    fabric_name,
    group,
    print_json,
    say,
    show,
    table,
)

# The fabric server's modules (numpy, scipy) are imported by the commands that use them:
# the others start without loading them.

PANEL = "The live fabric"
commands = group("The running fabric's faults, traffic, events and time.", panel=PANEL)
fault_app = group(
    """Faults on a running fabric ('fabriclab up'): links down, flapping, narrower or
    slower, with bit errors or lost MADs; a tray's NVLinks failed.

    Example: fabriclab fault down LAB-IBLEAF-01[9]"""
)
traffic_app = group(
    """Traffic on a running fabric: flows between HCAs, routed over the forwarding tables
    at their fair share or a rate of their own, moving the port counters.

    Example: fabriclab traffic all-to-all 'sched-worker[1-2]' --bytes 10G"""
)
scenario_app = group(
    """Scenario files run on a running fabric: a YAML timeline of faults and traffic.

    Example: fabriclab scenario run leaf-flap.yaml"""
)
clock_app = group(
    """The running fabric's clock.

    Example: fabriclab clock advance 30"""
)
for name, sub in (
    ("fault", fault_app),
    ("traffic", traffic_app),
    ("scenario", scenario_app),
    ("clock", clock_app),
):
    commands.add_typer(sub, name=name, rich_help_panel=PANEL)


def _group_name(ctx: typer.Context, name: str | None = NameOpt) -> None:
    ctx.obj = name


for sub in (fault_app, traffic_app, scenario_app, clock_app):
    sub.callback()(_group_name)


def _live(ctx: typer.Context, name: str | None, req: dict):
    """The running fabric's answer to ``req`` (its name given to the command or its group)."""
    from ..sim.run import admin

    return admin.request(fabric_name(name or ctx.obj), req)


# --- subcommands declared as data --------------------------------------------------------

Param = tuple[Any, Any]  # (its type, its typer.Argument or typer.Option)


@dataclass(frozen=True)
class Verb:
    """A subcommand as data: its help, then its arguments and options in order (parameter
    name -> Param); ``--name`` follows them."""

    help: str
    arguments: dict[str, Param]
    options: dict[str, Param] = field(default_factory=dict)


def _arg(help: str, metavar: str | None = None) -> Param:
    """A required argument (a string); its help shown as written (``[port]`` too)."""
    return str, typer.Argument(..., metavar=metavar, help=escape(help))


def _opt(annotation: Any, default: Any, flag: str, help: str) -> Param:
    """An option: its type, default (``...``: required), flag and help."""
    return annotation, typer.Option(default, flag, help=help)


Run = Callable[[typer.Context, "str | None", list, dict], None]


def _add(group: typer.Typer, verb: str, declared: Verb, run: Run) -> None:
    """Make ``verb`` a command of ``group`` as ``declared``; it calls ``run(ctx, the
    fabric's name, the arguments in order, the options given)``."""
    params = {**declared.arguments, **declared.options, "name": (str | None, SubNameOpt)}
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    signature = [inspect.Parameter("ctx", kind, annotation=typer.Context)]
    signature += [
        inspect.Parameter(p, kind, default=d, annotation=t) for p, (t, d) in params.items()
    ]

    def made(ctx: typer.Context, name: str | None, **values) -> None:
        args = [values[a] for a in declared.arguments]
        run(ctx, name, args, {o: values[o] for o in declared.options})

    made.__signature__ = inspect.Signature(signature)  # type: ignore[attr-defined]
    made.__annotations__ = {p.name: p.annotation for p in signature}
    made.__doc__ = declared.help
    command(group, verb)(made)


# --- fault -------------------------------------------------------------------------------

TARGET = {
    "target": _arg(
        "SWITCH[port] or HOST/HCA[port] (either end names the link), a switch or a tray."
    )
}
FAULTS = {
    "down": Verb(
        """Take a link down (either end), every link of a switch (it stops answering
        MADs), or every HCA link of a tray.

        Example: fabriclab fault down sched-worker1/mlx5_0[1]""",
        TARGET,
    ),
    "up": Verb(
        """Bring back what a down or flap fault took down.

        Example: fabriclab fault up sched-worker1/mlx5_0[1]""",
        TARGET,
    ),
    "flap": Verb(
        """Flap a link: down and up again, COUNT times, every PERIOD seconds.

        Example: fabriclab fault flap LAB-IBLEAF-01[9] --period 2s --count 5""",
        TARGET,
        {
            "period": _opt(
                str,
                "2s",
                "--period",
                "Each flap's length (2, 2.5, 2s, 500ms, 1m); down half of it.",
            ),
            "count": _opt(int, 1, "--count", "How many flaps."),
        },
    ),
    "degrade": Verb(
        """Retrain a link narrower or slower (iblinkinfo then says 'Could be ...').

        Example: fabriclab fault degrade LAB-IBLEAF-01[9] --width 2x""",
        TARGET,
        {
            "width": _opt(str | None, None, "--width", "Retrain at this width (2x, 1x)."),
            "speed": _opt(str | None, None, "--speed", "Retrain at this speed (HDR, EDR...)."),
        },
    ),
    "errors": Verb(
        """Put a bit-error rate on a link: its error counters grow at the pace it implies.

        Example: fabriclab fault errors LAB-IBLEAF-01[9] --ber 1e-10""",
        TARGET,
        {
            "ber": _opt(float, ..., "--ber", "Bit-error rate, e.g. 1e-10."),
            "down_after": _opt(
                int | None,
                None,
                "--down-after",
                "Error recoveries before the link goes down and retrains.",
            ),
        },
    ),
    "drop": Verb(
        """Make a port (or every port of a switch) lose MADs it is asked to answer.

        Example: fabriclab fault drop LAB-IBSPINE-01 --rate 50""",
        TARGET,
        {
            "rate": _opt(float, 100.0, "--rate", "Percent of MADs lost (ibsim's Error)."),
            "seed": _opt(int | None, None, "--seed", "Seed of the losses (repeatable)."),
        },
    ),
    "nvlink": Verb(
        """Fail the NVLinks of a tray's GPUs, as its BMC does: nvidia-smi's Fabric state
        and the NVLink domain feeds (slurm-block, topograph) follow.

        Example: fabriclab fault nvlink sched-worker2 --gpus 0,1""",
        {"target": _arg("The tray.")},
        {"gpus": _opt(str | None, None, "--gpus", "GPU indices, e.g. 0,1 (default: all).")},
    ),
}


def _fault(kind: str, ctx: typer.Context, name: str | None, args: list, options: dict) -> None:
    opts = {k: v for k, v in options.items() if v is not None}
    f = _live(ctx, name, {"op": "fault", "kind": kind, "target": args[0], "options": opts})
    if kind == "up":
        show(f"cleared fault(s) {', '.join(map(str, f['cleared']))}")
        return
    shown_opts = " ".join(
        f"{k}={v}" for k, v in f["options"].items() if k != "seed" and v is not None
    )
    show(f"fault {f['id']}: {f['kind']} {f['target']} {shown_opts}".rstrip())


for kind, declared in FAULTS.items():
    _add(fault_app, kind, declared, partial(_fault, kind))


command(fault_app, "net")(net_view.fault_net)


@command(fault_app, "list")
def fault_list(ctx: typer.Context, name: str | None = SubNameOpt, json_out: bool = JsonOpt) -> None:
    """The faults in force: what, where, since when, how far along.

    Example: fabriclab fault list
    """
    faults = _live(ctx, name, {"op": "faults"})
    if json_out:
        print_json(faults)
        return
    rows = [
        (
            str(f["id"]),
            f["kind"],
            f["target"],
            " ".join(f"{k}={v}" for k, v in f["options"].items() if v is not None),
            f"{f['since']:.3f}",
            " ".join(f"{k}={v}" for k, v in f["progress"].items()),
        )
        for f in faults
    ]
    table("faults", ("id", "kind", "target", "options", "since (s)", "progress"), rows)


@command(fault_app, "clear")
def fault_clear(
    ctx: typer.Context,
    fault_id: int | None = typer.Argument(None, metavar="[ID]", help="The fault (default: all)."),
    name: str | None = SubNameOpt,
) -> None:
    """Clear one fault, or all of them.

    Example: fabriclab fault clear 3
    """
    ids = _live(ctx, name, {"op": "clear", "id": fault_id})
    show(f"cleared {len(ids)} fault(s) {' '.join(map(str, ids))}".rstrip())


# --- traffic -----------------------------------------------------------------------------

ENDPOINT = "A tray (its first HCA) or HOST/HCA."
SET = {"hosts": _arg("A hostlist of trays or HOST/HCA.", metavar="SET")}
AMOUNT = {
    "bytes": _opt(str | None, None, "--bytes", "Bytes to deliver (4096, 64Mi, 10G)."),
    "rate": _opt(str | None, None, "--rate", "Payload per second (12.5GB/s, 100Gb/s)."),
    "timeout": _opt(int | None, None, "--timeout", view.TIMEOUT_HELP),
    "retry_count": _opt(int | None, None, "--retry-count", view.RETRY_HELP),
}
FLOWS = {
    "send": Verb(
        """A flow from FROM to TO, of a number of bytes or at a rate.

        Example: fabriclab traffic send sched-worker1 sched-worker2 --bytes 64Mi""",
        {"src": _arg(ENDPOINT, metavar="FROM"), "dst": _arg(ENDPOINT, metavar="TO")},
        AMOUNT,
    ),
    "all-to-all": Verb(
        """A flow from every endpoint of SET to every other.

        Example: fabriclab traffic all-to-all 'sched-worker[1-2]' --rate 100Gb/s""",
        SET,
        AMOUNT,
    ),
    "ring": Verb(
        """A flow from each endpoint of SET to the next.

        Example: fabriclab traffic ring 'sched-worker[1-2]' --bytes 1G""",
        SET,
        AMOUNT,
    ),
}


def _traffic(verb: str, ctx: typer.Context, name: str | None, args: list, options: dict) -> None:
    opts = {k: v for k, v in options.items() if v is not None}
    r = _live(ctx, name, {"op": "traffic", "verb": verb, "args": args, "options": opts})
    ids = r["ids"]
    shown_ids = " ".join(map(str, ids[:20])) + (" …" if r["count"] > 20 else "")
    show(f"{verb}: {r['count']} flow(s) {shown_ids}".rstrip())


for verb, declared in FLOWS.items():
    _add(traffic_app, verb, declared, partial(_traffic, verb))


@command(traffic_app, "stop")
def traffic_stop(
    ctx: typer.Context,
    flow_id: int | None = typer.Argument(None, metavar="[ID]", help="The flow (default: all)."),
    name: str | None = SubNameOpt,
) -> None:
    """Stop one flow, or all of them (running or retrying); how many it stopped.

    Example: fabriclab traffic stop 2
    """
    _traffic("stop", ctx, name, [] if flow_id is None else [str(flow_id)], {})


@command(traffic_app, "list")
def traffic_list(
    ctx: typer.Context,
    state: str | None = view.StateOpt,
    src: str | None = view.FromOpt,
    dst: str | None = view.ToOpt,
    flow_id: int | None = view.IdOpt,
    every: bool = view.AllOpt,
    name: str | None = SubNameOpt,
    json_out: bool = JsonOpt,
) -> None:
    """A summary of the flows (by state, bytes, rate) and the first 20 of them.

    Example: fabriclab traffic list --state retrying
    """
    options = {"state": state, "from": src, "to": dst, "id": flow_id}
    options = {k: v for k, v in options.items() if v is not None}
    if not every:
        options["limit"] = view.LIST_SHOWN
    r = _live(ctx, name, {"op": "traffic", "verb": "list", "args": [], "options": options})
    if json_out:
        print_json(r)
        return
    view.show_listing(r)


# --- scenario, clock ---------------------------------------------------------------------


@command(scenario_app, "run")
def scenario_run(
    ctx: typer.Context,
    file: Path = typer.Argument(..., help="The scenario (YAML timeline)."),
    wait: bool = typer.Option(
        True, "--wait/--no-wait", help="Under wall time, wait until the last step has run."
    ),
    name: str | None = SubNameOpt,
) -> None:
    """Check a scenario file whole, then run it on the fabric.

    Example: fabriclab scenario run leaf-flap.yaml --no-wait
    """
    from ..sim.live import scenario

    text = scenario.read_file(file)
    r = _live(ctx, name, {"op": "scenario", "text": text, "source": str(file)})
    say(f"scenario {r['name']!r}: {r['steps']} steps from t={r['start']:g} s to t={r['end']:g} s")
    if r["virtual"]:
        say("the clock is virtual: 'fabriclab clock advance SECONDS' moves it")
        return
    if wait:
        while any(s["name"] == r["name"] for s in _live(ctx, name, {"op": "scenarios"})):
            time.sleep(0.2)
        say(f"scenario {r['name']!r} done")


@command(scenario_app, "list")
def scenario_list(
    ctx: typer.Context, name: str | None = SubNameOpt, json_out: bool = JsonOpt
) -> None:
    """The scenarios still running: when each began and how many of its steps have run.

    Example: fabriclab scenario list
    """
    running = _live(ctx, name, {"op": "scenarios"})
    if json_out:
        print_json(running)
        return
    rows = [(s["name"], f"{s['start']:g}", f"{s['done']}/{len(s['steps'])}") for s in running]
    table("scenarios running", ("name", "since (s)", "steps run"), rows)


@command(clock_app, "advance")
def clock_advance(
    ctx: typer.Context,
    seconds: str = typer.Argument(
        ..., metavar="SECONDS", help="How far to move a virtual clock (30, 2.5, 500ms, 2m, 1h)."
    ),
    name: str | None = SubNameOpt,
) -> None:
    """Move the fabric's virtual clock (up --virtual-clock) forward.

    Example: fabriclab clock advance 30
    """
    r = _live(ctx, name, {"op": "advance", "seconds": seconds})
    show(f"clock at {r['now']:g} s")


@command(clock_app, "show")
def clock_show(ctx: typer.Context, name: str | None = SubNameOpt, json_out: bool = JsonOpt) -> None:
    """The fabric's clock: its time and whether it is virtual.

    Example: fabriclab clock show
    """
    r = _live(ctx, name, {"op": "clock"})
    if json_out:
        print_json(r)
        return
    show(f"clock at {r['now']:g} s ({'virtual' if r['virtual'] else 'wall time'})")
