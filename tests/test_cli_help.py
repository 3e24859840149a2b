"""``fabriclab --help`` and every command's and subcommand's help, as the installed
``fabriclab`` prints them: at 80 columns every line fits, each has an example, and no
paragraph is broken where the source happened to break a line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from itertools import pairwise
from pathlib import Path

import pytest
import typer
from rich.cells import cell_len
from rich.text import Text

from fabriclab.cli.app import app

EXE = Path(sys.executable).parent / "fabriclab"
WIDTH = 80
WIDE = 1000  # nothing is wrapped this wide: every line break is the help text's own


def _paths(command, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = [path]
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        out += _paths(sub, (*path, name))
    return out


def _commands(command, path: tuple[str, ...] = ()):
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, (*path, name))


CLI = typer.main.get_command(app)
PATHS = _paths(CLI)


def help_text(path: tuple[str, ...], columns: int) -> str:
    r = subprocess.run(
        [str(EXE), *path, "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": str(columns), "TERMINAL_WIDTH": str(columns)},
        timeout=60,
    )
    assert r.returncode == 0, f"fabriclab {' '.join(path)} --help: exit {r.returncode}: {r.stderr}"
    return r.stdout


def description(text: str) -> list[list[str]]:
    """The paragraphs above the first panel (after the usage line), each a list of its
    lines without the indent."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("Usage:")) + 1
    end = next((i for i, line in enumerate(lines) if line.startswith("╭")), len(lines))
    paragraphs: list[list[str]] = [[]]
    for line in lines[start:end]:
        if line.strip():
            paragraphs[-1].append(line.strip())
        elif paragraphs[-1]:
            paragraphs.append([])
    return [p for p in paragraphs if p]


def hard_breaks(text: str, columns: int) -> list[str]:
    """Where a paragraph of help goes on to a new line although its next word fits on
    the line before: the break is the source's, not the wrapper's.  Above the panels the
    text is ``columns - 2`` wide; in a panel (rendered so wide that nothing wraps) a line
    whose text starts past the first columns (the required mark, a name: a row starts by
    its sixth column) is in the help column: it continues the row above it."""
    found = []
    for p in description(text):
        for before, after in pairwise(p):
            if cell_len(before) + 1 + cell_len(after.split()[0]) <= columns - 2:
                found.append(f"{before!r} / {after!r}")
    if columns >= WIDE:
        for above, line in pairwise(text.splitlines()):
            inner = line[1:].rstrip(" │")
            if line.startswith("│") and len(inner) - len(inner.lstrip()) > 8:
                found.append(f"{above[1:].strip()!r} / {inner.strip()!r}")
    return found


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "fabriclab")
def test_help_fits_80_columns_with_an_example(path):
    text = help_text(path, WIDTH)
    wide = [line for line in text.splitlines() if cell_len(line) > WIDTH]
    assert not wide, f"lines over {WIDTH} columns: {wide}"
    examples = [" ".join(p) for p in description(text) if p[0].startswith("Example:")]
    assert len(examples) == 1, f"want one 'Example:' paragraph, got {examples}"
    command = " ".join(("Example: fabriclab", *path))
    assert (examples[0] + " ").startswith(command + " "), f"not an example of it: {examples[0]}"


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "fabriclab")
def test_help_paragraphs_are_not_broken_by_source_lines(path):
    assert hard_breaks(help_text(path, WIDTH), WIDTH) == []
    assert hard_breaks(help_text(path, WIDE), WIDE) == []


def test_help_is_shown_as_written():
    """Rich markup would swallow a ``[word]`` in a help text (``SWITCH[port]``)."""
    for path, command in _commands(CLI):
        texts = [command.help or ""] + [getattr(p, "help", None) or "" for p in command.params]
        for t in texts:
            assert Text.from_markup(t).plain == re.sub(r"\\(\[)", r"\1", t), (path, t)
    shown = help_text(("fault", "down"), WIDTH)
    assert "SWITCH[port] or HOST/HCA[port]" in shown


def test_the_check_finds_a_line_broken_in_the_source():
    """What a docstring's own line break looked like (the command list of ``fabriclab
    --help`` once, and a paragraph above the panels), and a paragraph wrapped right."""
    listed = (
        " Usage: fabriclab [OPTIONS] COMMAND [ARGS]...\n\n Emulated networks.\n\n"
        "╭─ Commands ─╮\n"
        "│ topology  Scheduler topology (Slurm, Kubernetes labels, Kueue, KWOK) from a spec, a real │\n"
        "│           cluster's ibnetdiscover and nvidia-smi output.                                 │\n"
        "╰────────────╯\n"
    )
    assert len(hard_breaks(listed, WIDE)) == 1
    broken = " Usage: fabriclab up [OPTIONS]\n\n Serve a fabric to the real tools: OpenSM and\n infiniband-diags run unmodified against it.\n"
    assert len(hard_breaks(broken, WIDTH)) == 1
    wrapped = (
        " Usage: fabriclab up [OPTIONS]\n\n Serve a fabric to the real tools: OpenSM and infiniband-diags run unmodified\n"
        " against it.\n"
    )
    assert hard_breaks(wrapped, WIDTH) == []


def test_the_root_options_are_listed():
    """``fabriclab --help`` shows the options before the command: --version, and typer's
    --install-completion and --show-completion."""
    text = help_text((), WIDTH)
    for option in ("--version", "--install-completion", "--show-completion", "--help"):
        assert re.search(rf"^│ {option}\s", text, re.M), text
