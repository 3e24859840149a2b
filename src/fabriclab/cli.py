"""The ``fabriclab`` command: a thin layer over spec → model → formats.

Every error a user can cause is printed as ``error: <where>: <what>`` lines on stderr
with exit status 2; tracebacks are only shown with FABRICLAB_DEBUG=1.
"""

from __future__ import annotations

import os
import sys
from enum import Enum
from pathlib import Path
from typing import Optional

import typer
import yaml
from rich.console import Console
from rich.table import Table

from .errors import FabriclabError, InputError, Problem, SpecError
from .formats import ibnetdiscover, ibsim_net
from .model.build import build
from .model.cluster import Cluster, find_port
from .spec.from_fabric import spec_from_fabric
from .spec.load import load_spec, locate, preset_names

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Emulated GPU-cluster networks: NVLink domains and an InfiniBand fabric, in the "
    "real tools' formats.",
)
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

TraysOpt = typer.Option(None, "--trays", min=1, help="Scale the spec to this many trays.")


def _cluster(spec: str, trays: int | None = None) -> Cluster:
    s = load_spec(spec, trays=trays)
    try:
        return build(s)
    except SpecError as e:
        raise locate(s, e) from None


def _write(text: str, output: Optional[Path]) -> None:
    if output is None or str(output) == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    try:
        output.write_text(text)
    except OSError as e:
        raise InputError([Problem(str(output), f"cannot write: {e.strerror}")]) from None


def _now() -> float | None:
    """SOURCE_DATE_EPOCH pins the header timestamp, for reproducible output."""
    v = os.environ.get("SOURCE_DATE_EPOCH")
    if v is None:
        return None
    try:
        return float(v)
    except ValueError:
        raise InputError([Problem("SOURCE_DATE_EPOCH", f"not a number: {v!r}")]) from None


@app.command()
def presets() -> None:
    """List the built-in specs."""
    table = Table(title="fabriclab presets")
    for col in ("preset", "description", "trays", "GPUs", "HCAs", "switches", "tiers"):
        table.add_column(col, justify="left" if col in ("preset", "description") else "right")
    for name in preset_names():
        spec = load_spec(name)
        c = build(spec)
        table.add_row(name, spec.description, str(len(c.trays)), str(sum(len(t.gpus) for t in c.trays)),
                      str(sum(len(t.hcas) for t in c.trays)), str(len(c.fabric.switches())),
                      str(len(c.tiers())))
    out.print(table)


@app.command()
def validate(spec: str = typer.Argument(..., help="A spec YAML file or a preset name."),
             trays: Optional[int] = TraysOpt) -> None:
    """Check a spec; exit 0 when valid, 2 with one error line per problem."""
    c = _cluster(spec, trays)
    f = c.fabric
    out.print(f"ok: {c.name}: {len(c.trays)} trays, {len(f.switches())} switches, "
              f"{len(f.cas())} CAs, {f.link_count()} links")


@app.command()
def inspect(spec: str = typer.Argument(..., help="A spec YAML file or a preset name."),
            trays: Optional[int] = TraysOpt) -> None:
    """Summarize a cluster: trays, GPUs, HCAs, switch tiers, links, NVLink domains."""
    c = _cluster(spec, trays)
    f = c.fabric
    gpus = sum(len(t.gpus) for t in c.trays)
    hcas = sum(len(t.hcas) for t in c.trays)
    summary = Table(title=f"{c.name}: {c.description}" if c.description else c.name, show_header=False)
    summary.add_column("what")
    summary.add_column("count", justify="right")
    summary.add_row("trays", str(len(c.trays)))
    summary.add_row("GPUs", str(gpus))
    summary.add_row("HCAs (tray)", str(hcas))
    other = len(f.cas()) - hcas
    if other:
        summary.add_row("other CAs", str(other))
    summary.add_row("switches", str(len(f.switches())))
    summary.add_row("links", str(f.link_count()))
    summary.add_row("NVLink domains", str(len(c.domains)))
    out.print(summary)

    tiers = Table(title="switch tiers")
    for col in ("tier", "role", "switches", "links down", "links up", "oversubscription"):
        tiers.add_column(col, justify="right" if col not in ("role",) else "left")
    for t in c.tiers():
        ratio = f"{t.oversubscription:g}:1" if t.oversubscription else "-"
        tiers.add_row(str(t.tier), t.role, str(t.switches), str(t.down), str(t.up), ratio)
    out.print(tiers)

    rates_seen: dict[str, int] = {}
    for a, _ in f.links():
        k = f"{a.width.token}{a.speed.token}"
        rates_seen[k] = rates_seen.get(k, 0) + 1
    if rates_seen:
        lr = Table(title="link rates")
        lr.add_column("rate")
        lr.add_column("links", justify="right")
        for k, v in sorted(rates_seen.items()):
            lr.add_row(k, str(v))
        out.print(lr)

    if c.domains:
        dom = Table(title="NVLink domains")
        for col in ("domain", "cluster UUID", "trays", "GPUs", "clique", "partitions"):
            dom.add_column(col, justify="right" if col in ("trays", "GPUs", "clique") else "left")
        shown = c.domains if len(c.domains) <= 20 else c.domains[:20]
        for d in shown:
            parts = ", ".join(f"{pid} ({len(g)} GPUs)" for pid, g in d.partitions.items()) or "-"
            dom.add_row(d.name, d.cluster_uuid, str(len(d.trays)), str(d.gpu_count),
                        str(d.clique) if d.default_partition else "0", parts)
        if len(c.domains) > 20:
            dom.add_row(f"… {len(c.domains) - 20} more", "", "", "", "", "")
        out.print(dom)


class RenderFormat(str, Enum):
    ibnetdiscover = "ibnetdiscover"
    ibnetdiscover_ports = "ibnetdiscover-ports"
    ibsim_net = "ibsim-net"


@app.command()
def render(
    spec: str = typer.Argument(..., help="A spec YAML file or a preset name."),
    format: RenderFormat = typer.Argument(..., help="Which tool's output to produce."),
    from_: Optional[str] = typer.Option(None, "--from", help="Run as if on this tray "
                                        "(HOST, HOST:HCA[:PORT]) or CA; default: the first tray."),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="Write here instead of stdout."),
    max_hops: bool = typer.Option(False, "-m", "--max-hops", help="ibnetdiscover -m: report hops and MADs."),
    trays: Optional[int] = TraysOpt,
) -> None:
    """Print what a real tool would print for this fabric."""
    c = _cluster(spec, trays)
    if format == RenderFormat.ibsim_net:
        _write(ibsim_net.render(c.fabric, title=c.name), output)
        return
    port, problem = find_port(c, from_)
    if port is None:
        raise InputError([Problem("--from", problem or "no such node")])
    if format == RenderFormat.ibnetdiscover:
        text = ibnetdiscover.render(c.fabric, port, now=_now(), report_max_hops=max_hops)
    else:
        text = ibnetdiscover.render_ports(c.fabric, port)
    _write(text, output)


@app.command("import")
def import_(
    file: Path = typer.Argument(..., help="ibnetdiscover output (default or -p) from a real fabric."),
    output: Path = typer.Option(..., "-o", "--output", help="Where to write the spec YAML ('-' = stdout)."),
    name: Optional[str] = typer.Option(None, "--name", help="Spec name (default: the file's stem)."),
    gpus_per_hca: int = typer.Option(1, "--gpus-per-hca", min=0, help="GPUs to give a tray per HCA."),
) -> None:
    """Turn a real ibnetdiscover dump into an explicit spec every command can use."""
    dump = ibnetdiscover.parse_file(str(file))
    for w in dump.warnings:
        err.print(f"warning: {w}")
    data = spec_from_fabric(dump.fabric, name or file.stem, gpus_per_hca=gpus_per_hca,
                            description=f"imported from {file.name}")
    text = yaml.safe_dump(data, sort_keys=False, width=120)
    _write(text, output)
    f = dump.fabric
    if str(output) != "-":
        err.print(f"wrote {output}: {len(data['trays'])} trays, {len(f.switches())} switches, "
                  f"{len(f.cas())} CAs, {f.link_count()} links")
    if dump.warnings:
        raise typer.Exit(1)


def main() -> None:
    """Entry point: run the app, turning user errors into ``error:`` lines."""
    try:
        rv = app(standalone_mode=False)
        if isinstance(rv, int) and rv:
            sys.exit(rv)
    except FabriclabError as e:
        for p in e.problems:
            err.print(f"error: {p}", markup=False)
        sys.exit(2)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except typer.Abort:
        err.print("aborted")
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    except Exception as e:
        # Usage errors come from typer's (vendored) click: they know how to show themselves.
        if hasattr(e, "show") and isinstance(getattr(e, "exit_code", None), int):
            e.show()
            sys.exit(e.exit_code)
        if os.environ.get("FABRICLAB_DEBUG"):  # pragma: no cover - a bug, not a user error
            raise
        err.print(f"error: internal: {type(e).__name__}: {e} (set FABRICLAB_DEBUG=1 for a traceback)",
                  markup=False)
        sys.exit(70)


if __name__ == "__main__":
    main()
