"""Tables that lose nothing: piped, plain columns each as wide as its widest cell; on a
terminal, a box whose cells wrap onto more lines (never cut with '…'), however narrow."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from fabric_server import fabric_up
from helpers import fl
from rich.cells import cell_len
from tables import boxed_column, in_terminal, plain_rows

from fabriclab.model.build import build
from fabriclab.spec.load import load_spec, preset_names

NARROW = 40
PRESETS = {name: build(load_spec(name)).description for name in preset_names()}


def _squeezed(*texts: str) -> str:
    """``texts`` one after another without their spaces."""
    return "".join("".join(texts).split())


def test_piped_tables_are_plain_columns_with_every_cell_whole():
    r = fl("presets", env={**os.environ, "COLUMNS": str(NARROW)})
    assert r.returncode == 0, r.stderr
    rows = plain_rows(r.stdout, "fabriclab presets")
    assert {row["preset"]: row["description"] for row in rows} == PRESETS
    assert "…" not in r.stdout and not set("│┃━┏") & set(r.stdout)
    header = r.stdout.splitlines()[1]
    assert header.split() == ["preset", "description", "trays", "GPUs", "HCAs", "switches", "tiers"]


def test_a_narrow_terminal_wraps_cells_and_cuts_none():
    code, text = in_terminal(["presets"], NARROW)
    assert code == 0, text
    assert "…" not in text, text
    assert all(cell_len(line) <= NARROW for line in text.splitlines()), text
    assert boxed_column(text, 0) == _squeezed(*PRESETS)
    assert boxed_column(text, 1) == _squeezed(*PRESETS.values())


@pytest.mark.realtools
def test_fault_list_piped_and_on_a_terminal(real_tools, tmp_path):
    """The reproducer: a degraded leaf port under OpenSM, then 'fault list | cat'."""
    with fabric_up("lab", tmp_path, sm=True) as f:
        f.ok("fault", "--name", f.name, "degrade", "LAB-IBLEAF-01[6]", "--speed", "HDR")
        piped = subprocess.run(
            f"{sys.executable} -m fabriclab.cli fault --name {f.name} list | cat",
            shell=True,
            env={**f.env, "COLUMNS": str(NARROW)},
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout
        assert "LAB-IBLEAF-01[6]" in piped and "…" not in piped, piped
        [row] = plain_rows(piped, "faults")
        assert (row["id"], row["kind"], row["target"], row["options"]) == (
            "1",
            "degrade",
            "LAB-IBLEAF-01[6]",
            "speed=HDR",
        ), piped

        code, text = in_terminal(["fault", "--name", f.name, "list"], NARROW, env=f.env)
        assert code == 0, text
        assert "…" not in text and all(cell_len(ln) <= NARROW for ln in text.splitlines()), text
        assert boxed_column(text, 2) == "LAB-IBLEAF-01[6]", text
        assert boxed_column(text, 3) == "speed=HDR", text


def test_a_reader_that_stops_reading_is_no_failure():
    """'fabriclab inspect … | head' under pipefail: the pipe closed before the table is
    written ends the command with exit 0, as any other output does, and says nothing."""
    for args in (
        ["inspect", "gb200-su"],
        ["inspect", "lab", "--json"],
        ["render", "lab", "ibsim-net"],
    ):
        proc = subprocess.Popen(
            [sys.executable, "-m", "fabriclab.cli", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        proc.stdout.close()  # before it has started: whatever it writes finds no reader
        _, err = proc.communicate(timeout=120)
        assert (proc.returncode, err) == (0, b""), (args, err)
