"""The commands that need no running fabric: presets, validate, inspect, render, import,
check (which also checks a running fabric's other networks, by LLDP)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer
import yaml

from ..errors import InputError, Problem
from ..formats import ibnetdiscover, ibsim_net, nvidia_smi, rdma_core
from ..model.miswire import compare
from ..model.summary import Summary, summarize
from ..model.to_spec import spec_from_fabric
from ..spec.load import preset_names
from .common import (
    JsonOpt,
    NameOpt,
    OutputOpt,
    SpecArg,
    TraysOpt,
    command,
    fabric_name,
    group,
    load_cluster,
    now,
    print_json,
    say,
    show,
    table,
    warn,
    write,
)

commands = group("Specs and dumps, no fabric running.", panel="Specs and dumps")

DOMAINS_SHOWN = 20  # inspect lists this many NVLink domains, then how many more


@command(commands)
def presets(json_out: bool = JsonOpt) -> None:
    """List the built-in specs.

    Example: fabriclab presets
    """
    listed = [_preset(name, summarize(load_cluster(name))) for name in preset_names()]
    if json_out:
        print_json(listed)
        return
    columns = ("preset", "description", "trays", "GPUs", "HCAs", "switches", "tiers")
    rows = [[str(p[k]) for k in ("name", *PRESET_KEYS)] for p in listed]
    table("fabriclab presets", columns, rows, right=columns[2:])


PRESET_KEYS = ("description", "trays", "gpus", "hcas", "switches", "tiers")


def _preset(name: str, s: Summary) -> dict:
    """A preset as ``presets --json`` lists it: its name and numbers (tiers: how many)."""
    numbers = {k: v for k, v in s.to_json().items() if k in PRESET_KEYS}
    return {"name": name, **numbers, "tiers": len(s.tiers)}


@command(commands)
def validate(spec: str = SpecArg, trays: int | None = TraysOpt, json_out: bool = JsonOpt) -> None:
    """Check a spec; exit 0 when valid (a warning for each name pattern the size
    outgrows), 2 with one error line per problem.

    Example: fabriclab validate my-cluster.yaml --trays 288
    """
    cluster = load_cluster(spec, trays)
    warn(cluster.warnings)
    s = summarize(cluster)
    if json_out:
        print_json({k: v for k, v in s.to_json().items() if k in VALIDATE_KEYS})
        return
    show(f"ok: {s.name}: {s.trays} trays, {s.switches} switches, {s.cas} CAs, {s.links} links")


VALIDATE_KEYS = ("name", "trays", "switches", "cas", "links")


@command(commands)
def inspect(spec: str = SpecArg, trays: int | None = TraysOpt, json_out: bool = JsonOpt) -> None:
    """Summarize a cluster: trays, GPUs, HCAs, switch tiers, links, NVLink domains.

    Example: fabriclab inspect gb200-su --trays 288
    """
    cluster = load_cluster(spec, trays)
    warn(cluster.warnings)
    s = summarize(cluster)
    if json_out:
        print_json(s.to_json())
        return
    counts = [("trays", s.trays), ("GPUs", s.gpus), ("HCAs (tray)", s.hcas)]
    counts += [("other CAs", s.other_cas)] if s.other_cas else []
    counts += [("switches", s.switches), ("links", s.links), ("NVLink domains", len(s.domains))]
    title = f"{s.name}: {s.description}" if s.description else s.name
    table(title, ("what", "count"), [(k, str(v)) for k, v in counts], ("count",), header=False)

    columns = ("tier", "role", "switches", "links down", "links up", "oversubscription")
    tiers = [
        (str(t.tier), t.role, str(t.switches), str(t.down), str(t.up), _ratio(t.oversubscription))
        for t in s.tiers
    ]
    table("switch tiers", columns, tiers, right=set(columns) - {"role"})
    if s.link_rates:
        rates = [(rate, str(n)) for rate, n in s.link_rates.items()]
        table("link rates", ("rate", "links"), rates, right=("links",))
    if s.domains:
        rows = [
            (
                d.name,
                d.cluster_uuid,
                str(d.trays),
                str(d.gpus),
                str(d.clique),
                ", ".join(f"{pid} ({n} GPUs)" for pid, n in d.partitions.items()) or "-",
            )
            for d in s.domains[:DOMAINS_SHOWN]
        ]
        if len(s.domains) > DOMAINS_SHOWN:
            rows.append((f"… {len(s.domains) - DOMAINS_SHOWN} more", "", "", "", "", ""))
        columns = ("domain", "cluster UUID", "trays", "GPUs", "clique", "partitions")
        table("NVLink domains", columns, rows, right=("trays", "GPUs", "clique"))


def _ratio(oversubscription: float | None) -> str:
    return f"{oversubscription:g}:1" if oversubscription else "-"


class RenderFormat(str, Enum):
    ibnetdiscover = "ibnetdiscover"
    ibnetdiscover_ports = "ibnetdiscover-ports"
    ibsim_net = "ibsim-net"
    nvidia_smi = "nvidia-smi"


class RdmaCore(str, Enum):
    """The rdma-core releases whose output the renderers can follow (formats.rdma_core)."""

    v44 = "44"
    v56 = "56"


assert tuple(int(r.value) for r in RdmaCore) == rdma_core.RELEASES


@command(commands)
def render(
    spec: str = SpecArg,
    format: RenderFormat = typer.Argument(..., help="Which tool's output to produce."),
    from_: str | None = typer.Option(
        None,
        "--from",
        help="Run as if on this tray (HOST, HOST:HCA[:PORT]) or CA; default: the first tray.",
    ),
    output: Path | None = OutputOpt,
    max_hops: bool = typer.Option(
        False, "-m", "--max-hops", help="ibnetdiscover -m: report hops and MADs."
    ),
    trays: int | None = TraysOpt,
    rdma_core_release: RdmaCore | None = typer.Option(
        None,
        "--rdma-core",
        help="ibnetdiscover: print as this rdma-core release does (44: Debian 12, 56: Debian "
        "13; they differ on XDR links); default: the installed one's.",
    ),
    tool_args: list[str] | None = typer.Argument(
        None,
        help="After --: the tool's own arguments (nvidia-smi: --query-gpu=FIELDS "
        "--format=csv[,noheader], or -q).",
    ),
) -> None:
    """Print what a real tool would print for this fabric.

    ibnetdiscover (its default output; ibnetdiscover-ports is its -p), the ibsim net
    file, or nvidia-smi on a tray.

    Example: fabriclab render lab ibnetdiscover --from sched-worker2
    """
    c = load_cluster(spec, trays)
    if format == RenderFormat.ibsim_net:
        write(ibsim_net.render(c.fabric, title=c.name), output)
        return
    if format == RenderFormat.nvidia_smi:
        host = (from_ or c.trays[0].host).split(":")[0].split("/")[0] if c.trays else None
        tray = c.tray(host) if host else None
        if tray is None:
            raise InputError([Problem("--from", f"no tray {host!r} in this cluster")])
        write(nvidia_smi.render(tray, tool_args or []), output)
        return
    port, problem = c.locate(from_)
    if port is None:
        raise InputError([Problem("--from", problem or "no such node")])
    release = rdma_core.release(int(rdma_core_release.value) if rdma_core_release else None)
    if format == RenderFormat.ibnetdiscover:
        text = ibnetdiscover.render(
            c.fabric, port, now=now(), report_max_hops=max_hops, rdma_core=release
        )
    else:
        text = ibnetdiscover.render_ports(c.fabric, port, rdma_core=release)
    write(text, output)


@command(commands, "import")
def import_(
    file: Path = typer.Argument(
        ..., help="ibnetdiscover output (default or -p) from a real fabric."
    ),
    output: Path = typer.Option(
        ..., "-o", "--output", help="Where to write the spec YAML ('-' = stdout)."
    ),
    name: str | None = typer.Option(None, "--name", help="Spec name (default: the file's stem)."),
    gpus_per_hca: int = typer.Option(
        1, "--gpus-per-hca", min=0, max=64, help="GPUs to give a tray per HCA."
    ),
) -> None:
    """Turn a real ibnetdiscover dump into an explicit spec every command can use.

    What the dump shows that InfiniBand does not allow is left out or repaired, with a
    warning each; exit 1 when there were any.

    Example: fabriclab import cluster.ibnetdiscover -o cluster.yaml
    """
    dump = ibnetdiscover.parse_file(str(file))
    data = spec_from_fabric(
        dump.fabric,
        name or file.stem,
        gpus_per_hca=gpus_per_hca,
        description=f"imported from {file.name}",
        warnings=dump.warnings,
    )
    warn(dump.warnings, dump.warnings_dropped)
    # libyaml's emitter when PyYAML has it: the same text, ten times faster on a large fabric
    text = yaml.dump(
        data, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False, width=120
    )
    write(text, output)
    f = dump.fabric
    if str(output) != "-":
        say(
            f"wrote {output}: {len(data['trays'])} trays, {len(f.switches())} switches, "
            f"{len(f.cas())} CAs, {f.link_count()} links"
        )
    if dump.warnings:
        raise typer.Exit(1)


@command(commands)
def check(
    spec: str | None = typer.Argument(
        None, help="The spec: the intended cabling (none: the running fabric's, --name)."
    ),
    ib_file: Path | None = typer.Option(
        None, "--ibnetdiscover", help="ibnetdiscover output to check."
    ),
    lldp: bool = typer.Option(
        False,
        "--lldp",
        help="Check the running fabric's other networks (up --networks): the cabling "
        "their LLDP neighbours show.",
    ),
    wait: float = typer.Option(
        11.0,
        "--wait",
        metavar="SECONDS",
        help="With --lldp: how long to wait for every cabled interface to see a neighbour "
        "(LLDP announces every 5 s).",
    ),
    trays: int | None = TraysOpt,
    name: str | None = NameOpt,
    json_out: bool = JsonOpt,
) -> None:
    """Compare discovered cabling with the spec: one line per wrong or missing cable (both
    ends named); exit 1 when they differ.  The compute fabric's from an ibnetdiscover
    dump, the other networks' from the LLDP neighbours of a fabric up with --networks.

    Example: fabriclab check gb200-su --ibnetdiscover su.ibnetdiscover
    """
    if ib_file is None and not lldp:
        raise InputError([Problem("check", "give --ibnetdiscover FILE, --lldp, or both")])
    if not 0 <= wait <= 600:
        raise InputError([Problem("--wait", f"{wait:g}: between 0 and 600 seconds")])
    fabric = None
    if spec is None or lldp:
        from ..sim.run.records import Instance

        inst = Instance.load(fabric_name(name))
        fabric = inst.name
        if spec is None:
            spec, trays = inst.spec, inst.trays
    cluster = load_cluster(spec, trays)
    lines: list[str] = []
    if ib_file is not None:
        lines += compare(cluster.fabric, ibnetdiscover.parse_file(str(ib_file)).fabric)
    if lldp:
        from ..model import net_cabling
        from ..sim.lan import lldp as lan_lldp
        from ..sim.lan.names import existing

        nets = cluster.networks
        if nets is None or not nets.links:
            raise InputError([Problem("--lldp", f"{spec} declares no networks")])
        assert fabric is not None
        if not existing(fabric):
            raise InputError(
                [Problem("--lldp", f"fabric {fabric!r} runs without its networks (up --networks)")]
            )
        lines += net_cabling.compare(nets, lan_lldp.cabling(fabric, nets, wait))
    if json_out:
        print_json({"problems": lines})
    else:
        for line in lines:
            show(line)
    if lines:
        raise typer.Exit(1)
