"""The live fabric's journal: what ``up --resume`` needs to bring a fabric back as it was
(faults and their progress, scenarios, traffic flows, every port's counters, the clock).

It is one JSON document in the state directory (``<name>.journal``), replaced whole
(written beside it, then renamed) each time something changes, so a ``kill -9`` at any
moment leaves either the previous state or the new one, never a torn file.  A counter
that only MADs moved is written at the next periodic save (every couple of seconds).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import ValidationError

from ...errors import InputError, Problem
from ...statedir import open_state_file, replace_state_file
from ..fabric.counters import Counters
from ..fabric.state import SimFabric
from . import journal_model

VERSION = 1


def journal_path(state: Path, name: str) -> Path:
    """Where fabric ``name``'s journal is kept."""
    return state / f"{name}.journal"


def save(path: Path, doc: dict, counters: str | None = None) -> None:
    """Replace the journal with ``doc`` (atomically); ``counters``: its counters
    document already in JSON (:func:`counters_json`)."""
    text = json.dumps({"version": VERSION, **doc}, separators=(",", ":"))
    if counters is not None:  # spliced in: the whole is still one JSON object
        text = f'{text[:-1]},"counters":{counters}}}'
    data = text.encode()
    replace_state_file(path, lambda f: f.write(data))


def load(path: Path) -> dict:
    """The journal's document, checked whole (:mod:`.journal_model`); an InputError
    when there is none, it cannot be read or a field is wrong: one line,
    ``journal PATH: FIELD: what``."""
    try:
        with os.fdopen(open_state_file(path, os.O_RDONLY), "rb") as f:
            text = f.read()
    except FileNotFoundError:
        raise InputError(
            [Problem("--resume", f"no journal to resume from ({path} does not exist)")]
        ) from None
    except OSError as e:
        raise InputError([Problem(str(path), f"unreadable journal: {e}")]) from None
    try:  # parsed and checked at once; nesting is bounded by the parser
        doc = journal_model.JournalDoc.model_validate_json(text)
    except ValidationError as e:
        first = e.errors(include_url=False, include_input=False)[0]
        if first["type"] == "json_invalid":
            raise InputError([Problem(str(path), f"unreadable journal: {first['msg']}")]) from None
        if first["loc"][:1] == ("version",) or first["loc"] == ():
            raise InputError([Problem(str(path), f"not a version {VERSION} journal")]) from None
        raise InputError([Problem(f"journal {path}", journal_model.problem(e))]) from None
    return doc.model_dump()


def _taken(sim: SimFabric):
    """Every port's counters that moved, as (key, entry, entry's JSON), each port's
    taken anew only if they moved since the last time (a fabric's worth of counters
    costs tens of milliseconds to encode, and the journal is saved after every fault)."""
    for n in sim.nodes:
        for p in n.ports:
            if p is None:
                continue
            c = p.flush()
            if c.moved:  # else what the last save took still holds
                c.moved = False
                raw = {k: v for k, v in c.raw.items() if v}
                det = {k: v for k, v in c.details.items() if v}
                if raw or det or c.base or c.base_ext:
                    key = f"{n.index}:{p.num}"
                    entry = [raw, dict(c.base), dict(c.base_ext), det, dict(c.details_base)]
                    c.saved = (key, entry, json.dumps({key: entry}, separators=(",", ":"))[1:-1])
                else:
                    c.saved = None
            if c.saved is not None:
                yield c.saved


def counters_doc(sim: SimFabric) -> dict[str, list]:
    """Every port's counters that moved: ``"node:port"`` -> [running totals, PortCounters
    reset points, extended reset points, details, details' reset points]."""
    return {key: entry for key, entry, _ in _taken(sim)}


def counters_json(sim: SimFabric) -> str:
    """:func:`counters_doc`'s document in JSON."""
    return "{" + ",".join(text for _, _, text in _taken(sim)) + "}"


def restore_counters(sim: SimFabric, doc: dict) -> None:
    """Put saved counters back (ports the fabric no longer has are skipped)."""
    for key, (raw, base, base_ext, det, det_base) in doc.items():
        ni, _, pn = key.partition(":")
        try:
            node = sim.nodes[int(ni)]
        except (ValueError, IndexError):
            continue
        p = node.port(int(pn))
        if p is None:
            continue
        c = Counters()
        c.raw.update({k: int(v) for k, v in raw.items() if k in c.raw})
        c.details.update({k: int(v) for k, v in det.items() if k in c.details})
        c.base = {k: int(v) for k, v in base.items() if k in c.raw}
        c.base_ext = {k: int(v) for k, v in base_ext.items() if k in c.raw}
        c.details_base = {k: int(v) for k, v in det_base.items() if k in c.details}
        p.counters = c
        p.mad_in = p.mad_out = 0
