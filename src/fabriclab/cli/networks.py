"""The commands of the other networks (front end, storage, out-of-band management):
networks."""

from __future__ import annotations

import typer

from .common import (
    JsonOpt,
    NameOpt,
    TraysOpt,
    command,
    fabric_name,
    group,
    load_cluster,
    print_json,
    table,
)

PANEL = "The other networks"
commands = group("The front-end, storage and management networks.", panel=PANEL)


@command(commands)
def networks(
    spec: str | None = typer.Argument(
        None, help="A spec YAML file or a preset name (none: the running fabric, --name)."
    ),
    trays: int | None = TraysOpt,
    name: str | None = NameOpt,
    json_out: bool = JsonOpt,
) -> None:
    """List the networks beside the compute fabric (front end, storage, out-of-band
    management, ...): each one's kind and subnet, and every endpoint (tray, BMC, service
    node, switch) with its interfaces, their addresses and the switch port each is
    cabled to.

    Example: fabriclab networks lab
    """
    if spec is None:
        from ..sim.run.records import Instance

        inst = Instance.load(fabric_name(name))
        spec, trays = inst.spec, inst.trays
    cluster = load_cluster(spec, trays)
    nets = cluster.networks
    doc = nets.to_json() if nets is not None else {"networks": [], "endpoints": []}
    if json_out:
        print_json(doc)
        return
    rows = [
        (n["name"], n["kind"], n["subnet"], n["gateway"] or "", str(n["vlan"] or ""))
        for n in doc["networks"]
    ]
    table("networks", ("network", "kind", "subnet", "gateway", "VLAN"), rows)
    eps = [
        (e["name"], e["kind"], i["name"], i["network"], i["address"] or "", i["peer"])
        for e in doc["endpoints"]
        for i in e["interfaces"]
    ]
    table("endpoints", ("endpoint", "kind", "interface", "network", "address", "peer"), eps)
