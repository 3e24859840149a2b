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
    cabled to.  For a running fabric up with --networks, also the faults in force on them.

    Example: fabriclab networks lab
    """
    faults = None
    if spec is None:
        from ..sim.run.records import Instance

        inst = Instance.load(fabric_name(name))
        spec, trays = inst.spec, inst.trays
        faults = _faults(inst.name)
    cluster = load_cluster(spec, trays)
    nets = cluster.networks
    doc = nets.to_json() if nets is not None else {"networks": [], "endpoints": []}
    if faults is not None:
        doc["faults"] = faults
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
    if faults is not None:
        shown: list[tuple[str, str]] = [(t, "down") for t in faults["down"]]
        shown += [(t, f"rate {bits:,} b/s") for t, bits in faults["rates"].items()]
        shown += [
            (f["target"], f"flapping: {f['left']} left, {f['period']:g} s each")
            for f in faults["flaps"]
        ]
        table("faults", ("where", "fault"), shown)


def _faults(fabric: str) -> dict | None:
    """The faults in force on ``fabric``'s built networks (None: not built)."""
    from ..errors import InputError
    from ..sim.run import admin

    try:
        return admin.request(fabric, {"op": "net", "action": "list"})
    except InputError as e:
        if e.problems and e.problems[0].where == "net":  # up without --networks
            return None
        raise
