"""The commands that run a fabric and attach tools to it: up, down, status, exec, shims,
attach."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from ..errors import InputError, Problem
from ..sim.wire.admission import DEFAULT_MAX_CLIENTS
from .common import (
    JsonOpt,
    NameOpt,
    SpecArg,
    TraysOpt,
    UpNameOpt,
    after_dashes,
    command,
    fabric_name,
    group,
    load_cluster,
    print_json,
    say,
    table,
    warn,
    write,
)

if TYPE_CHECKING:
    from ..model.cluster import Cluster

commands = group("Running a fabric.", panel="Running a fabric")

# The fabric server's modules (numpy, scipy) are imported by the commands that use them:
# the others start without loading them.

ViaOpt = typer.Option(
    "auto",
    "--via",
    help="How the tool attaches: hostlib (fabriclab's host library: a tray's HCAs), "
    "umad2sim (Debian's libumad2sim: any port, remote fabrics), auto (hostlib on a tray "
    "of a local fabric, else umad2sim).",
)


@command(commands)
def up(
    spec: str = SpecArg,
    name: str = UpNameOpt,
    detach: bool = typer.Option(
        False, "--detach", "-d", help="Run in the background; 'fabriclab down' stops it."
    ),
    listen: str | None = typer.Option(
        None,
        "--listen",
        help="Remote mode: serve UDP on [HOST:]PORT (tools set IBSIM_SERVER_NAME/PORT; "
        "libumad2sim only); a non-loopback HOST needs --allow.",
    ),
    host_listen: str | None = typer.Option(
        None,
        "--host-listen",
        metavar="[HOST:]PORT",
        help="Also serve the host library over TCP on [HOST:]PORT (HOST default 127.0.0.1; "
        "PORT 0: a free one), with a token kept 0600 in the state directory; trays in "
        "other network namespaces or machines reach it (see 'fabriclab attach').",
    ),
    api: str | None = typer.Option(
        None,
        "--api",
        metavar="[HOST:]PORT",
        help="Also serve the fabric over HTTP (as 'fabriclab api'): /metrics, /ufmRest, "
        "/api/v1 and the web view; HOST default 127.0.0.1, PORT 0: a free one ('fabriclab "
        "status' shows it).",
    ),
    api_credentials: str | None = typer.Option(
        None,
        "--api-credentials",
        metavar="USER:PASSWORD|@FILE",
        help="Who may use the API (needed for an address beyond this machine).",
    ),
    allow: list[str] | None = typer.Option(
        None,
        "--allow",
        metavar="NETWORK[,…]",
        help="Remote mode and --host-listen: the networks that may attach (CIDR, "
        "repeatable); others are ignored (UDP) or refused (TCP).  Default: loopback.",
    ),
    allow_user: list[str] | None = typer.Option(
        None,
        "--allow-user",
        metavar="USER",
        help="Users (names or uids, repeatable) whose tools may attach besides your own.",
    ),
    max_clients: int = typer.Option(
        DEFAULT_MAX_CLIENTS,
        "--max-clients",
        min=1,
        help="At most this many tools attached at once.",
    ),
    sm: bool = typer.Option(False, "--sm", help="Also run the real OpenSM on the fabric."),
    sm_at: str | None = typer.Option(
        None,
        "--sm-at",
        help="Where OpenSM runs (a tray, HOST:HCA, CA or switch); default: the first tray.",
    ),
    sm_via: str = typer.Option(
        "auto", "--sm-via", help="How OpenSM attaches (as 'exec --via'; auto: hostlib on a tray)."
    ),
    sm_config: str | None = typer.Option(
        None,
        "--sm-config",
        metavar="FILE",
        help="OpenSM's config (an opensm.conf, as -F); fabriclab's own few settings are "
        "added after it and win.",
    ),
    partitions: str | None = typer.Option(
        None,
        "--partitions",
        metavar="FILE",
        help="OpenSM's partitions.conf (-P): partitions and their members.",
    ),
    routing_engine: str | None = typer.Option(
        None,
        "--routing-engine",
        metavar="NAME[,NAME…]",
        help="OpenSM's routing engine(s) (-R): ftree, updn, minhop, …",
    ),
    sm_arg: list[str] | None = typer.Option(
        None,
        "--sm-arg",
        metavar="ARG",
        help="An argument passed to OpenSM as it is, last (repeatable; --sm-arg=-p for one "
        "that starts with a dash).",
    ),
    verbose: int = typer.Option(
        0, "--verbose", "-v", count=True, help="Log clients (-v), and every routing decision (-vv)."
    ),
    trays: int | None = TraysOpt,
    cold: bool = typer.Option(
        False, "--cold", help="Power on with no LIDs (0) until an SM assigns them."
    ),
    routed: bool = typer.Option(
        False,
        "--routed",
        help="Come up as if a subnet manager had run: LIDs of the LID plan, ports ACTIVE, "
        "forwarding tables from OpenSM-like min-hop routing, SMInfo answered (at --sm-at, "
        "default the first tray) until a real SM attaches.",
    ),
    networks: bool = typer.Option(
        False,
        "--networks",
        help="Build the spec's other networks (front end, storage, out-of-band management) "
        "in Linux: a network namespace per endpoint and switch, veths, bridges (root).",
    ),
    swap: list[str] | None = typer.Option(
        None, "--swap", metavar="PORT,PORT", help="Serve these two cables' far ends swapped."
    ),
    virtual_clock: bool = typer.Option(
        False,
        "--virtual-clock",
        help="Time moves only by 'fabriclab clock advance' (every counter exact).",
    ),
    resume: bool = typer.Option(
        False,
        "--resume",
        help="Bring back the faults, scenarios, flows, counters and clock the fabric had "
        "(its journal).",
    ),
) -> None:
    """Serve a fabric to the real tools: OpenSM and infiniband-diags run unmodified
    against it.

    A tool on a tray attaches through fabriclab's host library and sees the tray's own
    HCAs (mlx5_0 ...); a tool on a switch or a single port, or on a fabric served over UDP
    (--listen), through Debian's libumad2sim.  See 'fabriclab exec'.

    Example: fabriclab up lab --detach --sm --partitions examples/two-tenants.conf
    """
    from ..sim.run import launcher
    from ..sim.run.opensm import SmOptions

    if api is not None:
        _check_api(api, api_credentials)

    def load_warned(spec: str, trays: int | None) -> Cluster:
        """The cluster, its name patterns' warnings said (the size outgrows a field)."""
        cluster = load_cluster(spec, trays)
        warn(cluster.warnings)
        return cluster

    launcher.up(
        launcher.UpRequest(
            spec=spec,
            name=name,
            trays=trays,
            listen=listen,
            allow=",".join(allow) if allow else None,
            host_listen=host_listen,
            api=api,
            allow_user=allow_user or [],
            max_clients=max_clients,
            sm=sm,
            sm_at=sm_at,
            sm_via=sm_via,
            sm_options=SmOptions(sm_config, partitions, routing_engine, tuple(sm_arg or ())),
            verbose=verbose,
            detach=detach,
            cold=cold,
            routed=routed,
            networks=networks,
            swaps=swap or [],
            virtual_clock=virtual_clock,
            resume=resume,
        ),
        load=load_warned,
        say=say,
    )


def _check_api(listen: str, credentials: str | None) -> None:
    """``up --api``'s address and credentials, checked before anything starts; the
    credentials travel to the API's process in its environment, never on a command
    line."""
    import os

    from ..api.auth import Auth, check_listen, load_credentials
    from ..api.serve import CREDENTIALS_ENV
    from ..inputs import parse_host_port

    host, _ = parse_host_port(listen, "--api")
    if credentials is not None:
        os.environ[CREDENTIALS_ENV] = credentials
    given = credentials or os.environ.get(CREDENTIALS_ENV)
    check_listen(host, Auth(load_credentials(given)), "--api")


@command(commands)
def down(name: str | None = NameOpt) -> None:
    """Stop a fabric that is up (and its OpenSM).

    Example: fabriclab down --name lab
    """
    from ..sim.run import records

    name = fabric_name(name)
    try:
        inst = records.stop(name)
    except records.NotRunning:
        removed = records.clean_networks(name)  # a server killed outright left them
        if not removed:
            raise
        say(f"fabric {name!r} was not running; removed the {removed} network namespaces it left")
        return
    say(f"fabric {name!r} down (pid {inst.pid})")


@command(commands)
def status(json_out: bool = JsonOpt) -> None:
    """List the fabrics that are up: name, pid, spec, how tools reach it, OpenSM's state.

    Example: fabriclab status
    """
    from ..sim.run.status import status as status_rows
    from ..statedir import state_dir

    rows = status_rows()
    if json_out:
        keys = ("name", "pid", "spec", "reach", "opensm", "api")
        print_json(
            [
                {**dict(zip(keys, row, strict=True)), "pid": int(row[1]), "api": _or_none(row[5])}
                for row in rows
            ]
        )
        return
    columns = ("name", "pid", "spec", "reach", "OpenSM", "API")
    table(f"fabrics up ({state_dir()})", columns, rows)


@command(commands, "exec", context_settings={"allow_interspersed_args": False})
def exec_(
    node: str = typer.Argument(
        ..., help="Where the tool runs: HOST, HOST:HCA[:PORT], a CA or switch."
    ),
    command: list[str] = typer.Argument(..., help="The tool and its arguments (after --)."),
    name: str | None = NameOpt,
    via: str = ViaOpt,
    mount: bool = typer.Option(
        False,
        "--mount",
        help="Run it in a private mount namespace with the tray's live tree at "
        "/sys/class/infiniband (root; for programs that read sysfs without libc).",
    ),
) -> None:
    """Run a real tool as if on NODE of the running fabric.

    On a tray the tool sees the tray's HCAs (mlx5_0 ...) through fabriclab's host
    library; on a switch or a single port it runs through Debian's libumad2sim (see
    --via).  nvidia-smi is answered by the fabric for the tray's GPUs.

    Example: fabriclab exec sched-worker1 -- ibstat
    """
    from ..sim.run import tools

    command = after_dashes(command)
    name = fabric_name(name)
    if not command:
        raise InputError([Problem("exec", "no command given (fabriclab exec NODE -- CMD ...)")])
    if command[0] == "nvidia-smi":  # the tray's GPUs: answered by the running fabric
        write(tools.nvidia_smi(name, node, command[1:]), None)
        return
    if mount:
        raise typer.Exit(tools.exec_mounted(name, node, command, load=load_cluster))
    tools.exec_tool(name, node, command, load=load_cluster, say=say, via=via)


@command(commands)
def shims(
    node: str = typer.Argument(..., help="The tray (or HOST:HCA, CA) the tools run as."),
    directory: Path = typer.Argument(..., help="Where to write the wrappers (a bin dir for PATH)."),
    name: str | None = NameOpt,
    via: str = ViaOpt,
) -> None:
    """Write a bin directory of wrappers (ibnetdiscover, ibstat, perfquery, ..., nvidia-smi,
    sudo) so software that shells out on a tray finds them on PATH.

    Each wrapper runs the real tool found on this machine, attached to the running fabric
    as 'fabriclab exec' would.

    Example: fabriclab shims sched-worker1 ./bin
    """
    from ..sim.run import tools

    written = tools.shims(fabric_name(name), node, directory, load=load_cluster, via=via)
    say(f"wrote {len(written)} wrappers to {directory}: {' '.join(written)}")


@command(commands)
def attach(
    tray: str = typer.Argument(..., help="The tray the tools run as (a host name)."),
    directory: Path = typer.Argument(
        ..., help="Where to write env, token, lib/ and bin/ (made if missing)."
    ),
    name: str | None = NameOpt,
    at: str | None = typer.Option(
        None,
        "--at",
        metavar="PATH",
        help="Where the tray sees DIR (a bind mount's target), for env's default; default: DIR.",
    ),
    json_out: bool = JsonOpt,
) -> None:
    """Write a directory that makes any machine, container or network namespace TRAY of
    the running fabric: DIR/env to source, DIR/token, DIR/lib (the host library) and
    DIR/bin (the tray's tools), with nothing of fabriclab installed there.

    Over TCP when the fabric listens (up --host-listen), else through its socket file.

    Example: fabriclab attach sched-worker1 ./tray && sh -c '. ./tray/env && ibstat'
    """
    from ..sim.run.attach import attach as write_attach

    done = write_attach(fabric_name(name), tray, directory, load=load_cluster, at=at)
    if json_out:
        print_json(done)
        return
    say(
        f"wrote {done['dir']} for tray {tray} of fabric {done['fabric']!r} "
        f"({done['way']} {done['address']}): . {done['env']}"
    )


def _or_none(value: str) -> str | None:
    return None if value == "-" else value
