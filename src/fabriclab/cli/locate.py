"""The locate command: a switch, tray, HCA, GUID or LID turned into the LIDs and GUIDs
the real tools want, from a spec's LID plan or a running fabric's SM."""

from __future__ import annotations

import typer

from ..errors import InputError, Problem
from .common import (
    JsonOpt,
    TraysOpt,
    command,
    fabric_name,
    group,
    load_cluster,
    print_json,
    table,
)

commands = group("Names into LIDs and GUIDs.", panel="Running a fabric")


@command(commands)
def locate(
    name: str = typer.Argument(
        ...,
        metavar="NAME",
        help="A tray, HOST/HCA, a switch or CA (name, description, node id or GUID), "
        "NODE[PORT], or a LID.",
    ),
    spec: str | None = typer.Argument(
        None, metavar="[SPEC]", help="A spec or preset: the LIDs of its LID plan."
    ),
    fabric: str | None = typer.Option(
        None,
        "--name",
        "-n",
        metavar="FABRIC",
        help="A running fabric: the LIDs its SM has given now (default, without SPEC: 'sim' "
        "if it is up, else the only fabric up).",
    ),
    trays: int | None = TraysOpt,
    json_out: bool = JsonOpt,
) -> None:
    """Turn a name into what the real tools want: node type, description, node GUID, and
    each port's number, GUID, LID and LMC (every HCA of a tray).

    From a spec (the LIDs of its LID plan) or a running fabric (those its SM has given;
    0 on a cold fabric until it has), e.g. for smpquery -L LID or perfquery LID PORT.

    Example: fabriclab locate LAB-IBLEAF-01 --name lab
    """
    if spec is not None and fabric is not None:
        raise InputError([Problem("--name", "give a SPEC or --name FABRIC, not both")])
    if spec is not None:
        from ..model.lookup import lookup

        found = lookup(load_cluster(spec, trays), name)
    else:
        if trays is not None:
            raise InputError([Problem("--trays", "scales a SPEC, not a running fabric")])
        from ..sim.run import admin

        found = admin.request(fabric_name(fabric), {"op": "locate", "name": name})
    if json_out:
        print_json(found)
        return
    whose = "the spec's LID plan" if found["source"] == "spec" else "LIDs as the SM gave them"
    for node in found["nodes"]:
        title = (
            f'{node["type"]} {node["name"] or node["id"]}: "{node["description"]}", '
            f"node GUID {node['guid']} ({whose})"
        )
        columns = ("port", "GUID", "LID", "LMC", "cabled to")
        rows = [
            (str(p["port"]), p["guid"], str(p["lid"]), str(p["lmc"]), p["peer"] or "-")
            for p in node["ports"]
        ]
        table(title, columns, rows, right=("port", "LID", "LMC"))
