"""tests/fixtures/MANIFEST.tsv names every fixture file, with its source and licence."""

from __future__ import annotations

import csv
import re

from conftest import FIXTURES, HERE

ROOT = HERE.parent


def _rows() -> list[dict[str, str]]:
    with (FIXTURES / "MANIFEST.tsv").open(newline="") as fh:
        lines = [line for line in fh if not line.startswith("#")]
    return list(csv.DictReader(lines, delimiter="\t", quoting=csv.QUOTE_NONE))


def test_every_fixture_file_is_in_the_manifest_and_no_more():
    files = {
        str(p.relative_to(FIXTURES))
        for p in FIXTURES.rglob("*")
        if p.is_file() and p.name != "MANIFEST.tsv"
    }
    listed = [row["file"] for row in _rows()]
    assert len(listed) == len(set(listed))
    assert set(listed) == files


def test_each_row_names_source_commit_and_licence():
    for row in _rows():
        if row["copy"] == "recorded":  # made here, from real tools run against fabriclab
            assert row["source_repo"] == "." and (ROOT / row["source_path"]).is_file(), row
        else:
            assert row["source_repo"].count("/") == 1 and row["source_path"], row["file"]
        assert re.fullmatch(r"[0-9a-f]{40}", row["commit"]), row["file"]
        copies = ("verbatim", "extracted", "transcribed", "recorded")
        assert row["licence"] and row["copy"] in copies, row["file"]
        if row["licence"] == "none":  # kept as facts, and only what the tests read
            assert "no licence" in row["note"], row["file"]
