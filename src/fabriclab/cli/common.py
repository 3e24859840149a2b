"""What the command groups share: the consoles, loading a cluster, printing lines, tables
and files, SOURCE_DATE_EPOCH, the options several groups take, and how a command is
declared (its help from its docstring)."""

from __future__ import annotations

import inspect
import itertools
import json
import os
import sys
from collections.abc import Callable, Collection, Iterable, Sequence
from pathlib import Path
from typing import NoReturn, TypeVar

import typer
from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..errors import InputError, Problem, SpecError, shown
from ..limits import MAX_TRAYS
from ..model.build import build
from ..model.cluster import Cluster
from ..spec.load import load_spec, locate


class ReaderGone(Exception):
    """Whoever reads stdout has stopped reading (``fabriclab … | head``): the command ends
    there, exit 0 (:func:`.app.main`).  Not an OSError, which click and rich would each
    turn into exit 1."""


def _reader_gone() -> NoReturn:
    """stdout made /dev/null (nothing is left to flush at exit), then :class:`ReaderGone`."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    raise ReaderGone


class _Stdout(Console):
    """The command's output (a broken pipe: :class:`ReaderGone`)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        _reader_gone()


out = _Stdout(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

F = TypeVar("F", bound=Callable)

# --- options more than one group takes ------------------------------------------------

SpecArg = typer.Argument(..., help="A spec YAML file or a preset name.")
TraysOpt = typer.Option(
    None, "--trays", min=1, max=MAX_TRAYS, help="Scale the spec to this many trays."
)
OutputOpt = typer.Option(None, "-o", "--output", help="Write here instead of stdout.")
# --name of a subcommand (``fault down --name N``), beside its group's
SubNameOpt = typer.Option(
    None,
    "--name",
    "-n",
    help="The fabric's name (default: 'sim' if it is up, else the only fabric up).",
)
NameOpt = typer.Option(
    None,
    "--name",
    "-n",
    help="The running fabric's name (default: 'sim' if it is up, else the only fabric up).",
)
UpNameOpt = typer.Option(
    "sim",
    "--name",
    "-n",
    help="The fabric's name; its sockets are named after it (libumad2sim's "
    "IBSIM_SOCKNAME; ibsim's default is 'sim').",
)


def fabric_name(name: str | None) -> str:
    """The running fabric a command means: ``--name`` when given, else 'sim' if it is up,
    else the only fabric up (an error lists those up when there are several)."""
    from ..sim.run.records import choose

    return choose(name)


# --- declaring commands ----------------------------------------------------------------


def prose(text: str) -> str:
    """Help text as the help formatter should get it: each paragraph (blank lines apart)
    on one line, whatever the source's line breaks, and no Rich markup (``[port]`` stays
    as written)."""
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(escape(" ".join(p.split("\n"))) for p in paragraphs)


def group(help: str, panel: str | None = None) -> typer.Typer:
    """A group of commands with ``help`` (see :func:`prose`), listed under ``panel`` in
    ``fabriclab --help``."""
    return typer.Typer(help=prose(help), rich_help_panel=panel, no_args_is_help=True)


def command(group: typer.Typer, name: str | None = None, **settings) -> Callable[[F], F]:
    """Make the decorated function ``group``'s command ``name``, its docstring the help
    (see :func:`prose`), listed under the group's panel."""

    def register(f: F) -> F:
        group.command(
            name, help=prose(f.__doc__ or ""), rich_help_panel=group.rich_help_panel, **settings
        )(f)
        return f

    return register


def after_dashes(args: list[str] | None) -> list[str]:
    """The arguments given after ``--`` (the ``--`` itself dropped)."""
    args = list(args or [])
    return args[1:] if args[:1] == ["--"] else args


# --- loading a cluster -------------------------------------------------------------------


def load_cluster(spec: str, trays: int | None = None) -> Cluster:
    """The cluster of a spec file or preset, scaled to ``trays``; a problem the build
    finds is located in the spec's text."""
    s = load_spec(spec, trays=trays)
    try:
        return build(s)
    except SpecError as e:
        raise locate(s, e) from None


def now() -> float | None:
    """SOURCE_DATE_EPOCH pins the header timestamp, for reproducible output."""
    v = os.environ.get("SOURCE_DATE_EPOCH")
    if v is None:
        return None
    # reproducible-builds.org: "an integer number of seconds since the epoch"; bounded to
    # the years ctime() can print (up to 9999) before it is used
    s = v.strip()
    if not (s.isascii() and s.isdigit() and len(s) <= 12 and int(s) <= 253402300799):
        raise InputError(
            [
                Problem(
                    "SOURCE_DATE_EPOCH",
                    f"not a number of seconds since 1970 (up to the year 9999): {v[:40]!r}",
                )
            ]
        )
    return float(s)


# --- printing ----------------------------------------------------------------------------


def show(line: str) -> None:
    """A line of the command's output (stdout)."""
    out.print(line, markup=False)


def show_lines(lines: list[str]) -> None:
    """Many lines of output at once, as plain text (no markup, no wrapping)."""
    _stdout("".join(line + "\n" for line in lines))


def show_stream(lines: Iterable[str], chunk: int = 1000) -> None:
    """Lines of output from an iterator, as plain text, ``chunk`` at a time (a listing
    of any length in bounded memory)."""
    it = iter(lines)
    for part in iter(lambda: list(itertools.islice(it, chunk)), []):
        show_lines(part)


def say(line: str) -> None:
    """A line for the user on stderr (progress, warnings)."""
    err.print(line, markup=False)


def warn(problems: list[Problem], dropped: int = 0) -> None:
    """Warnings on stderr: the first few, then how many more (see errors.shown)."""
    for line in shown(problems, "warning", dropped):
        say(line)


def table(
    title: str | None,
    columns: Sequence[str],
    rows: Iterable[Sequence[str]],
    right: Collection[str] = (),
    header: bool = True,
) -> None:
    """A table on stdout: ``columns`` (those in ``right`` right-aligned) and ``rows``,
    every character of every cell shown.  On a terminal, a box that wraps a cell too wide
    for its column onto more lines (folding a long name, never cutting it); otherwise
    (a pipe, a file) plain text, each column as wide as its widest cell."""
    cells = [[str(c) for c in row] for row in rows]
    if _terminal():
        _boxed(title, columns, cells, right, header)
    else:
        for line in plain_table(title, columns, cells, right, header):
            show(line)


def _terminal() -> bool:
    """Whether stdout is a terminal (what rich would guess from the environment aside)."""
    try:
        return out.file.isatty()
    except (AttributeError, ValueError, OSError):
        return False


def _boxed(
    title: str | None,
    columns: Sequence[str],
    rows: list[list[str]],
    right: Collection[str],
    header: bool,
) -> None:
    if title:
        show(title)
    # overflow "fold": a word wider than its column goes on over more lines, where the
    # default ("ellipsis") would cut it; cells are Text, so "[6]" is never read as markup
    t = Table(show_header=header)
    for col in columns:
        t.add_column(Text(col), justify="right" if col in right else "left", overflow="fold")
    for row in rows:
        t.add_row(*(Text(c) for c in row))
    out.print(t)


def plain_table(
    title: str | None,
    columns: Sequence[str],
    rows: list[list[str]],
    right: Collection[str] = (),
    header: bool = True,
) -> list[str]:
    """A table's lines as plain text: the title, the header, then the rows (a cell's own
    line breaks made spaces), each column as wide as its widest cell, two spaces apart,
    no trailing spaces."""
    n = len(columns)
    shown = [list(columns)] if header else []
    shown += [[" ".join(c.splitlines()) for c in row][:n] + [""] * (n - len(row)) for row in rows]
    widths = [max((cell_len(r[i]) for r in shown), default=0) for i in range(n)]
    lines = [title] if title else []
    for r in shown:
        cells = [
            c.rjust(w - cell_len(c) + len(c)) if col in right else c.ljust(w - cell_len(c) + len(c))
            for c, w, col in zip(r, widths, columns, strict=True)
        ]
        lines.append("  ".join(cells).rstrip())
    return lines


JsonOpt = typer.Option(
    False, "--json", help="Print the result as JSON (one document; see docs/commands.md)."
)


def print_json(doc: object) -> None:
    """``doc`` as one JSON document on stdout (a listing's ``--json``): the shape the
    library returns, keys in a stable order."""
    _stdout(json.dumps(doc, indent=2) + "\n")


def _stdout(text: str) -> None:
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        _reader_gone()


def write(text: str, output: Path | None) -> None:
    """``text`` to ``output``, or to stdout when it is None or ``-``."""
    if output is None or str(output) == "-":
        _stdout(text)
        return
    try:
        output.write_text(text)
    except OSError as e:
        raise InputError([Problem(str(output), f"cannot write: {e.strerror}")]) from None
