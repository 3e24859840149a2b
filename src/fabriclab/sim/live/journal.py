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

from ...errors import InputError, Problem
from ...statedir import open_state_file
from ..fabric.counters import Counters
from ..fabric.state import SimFabric

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
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = open_state_file(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    tmp.replace(path)


def load(path: Path) -> dict:
    """The journal's document; InputError when there is none or it cannot be read."""
    try:
        with os.fdopen(open_state_file(path, os.O_RDONLY)) as f:
            doc = json.loads(f.read())
    except FileNotFoundError:
        raise InputError(
            [Problem("--resume", f"no journal to resume from ({path} does not exist)")]
        ) from None
    except (OSError, ValueError) as e:
        raise InputError([Problem(str(path), f"unreadable journal: {e}")]) from None
    if not isinstance(doc, dict) or doc.get("version") != VERSION:
        raise InputError([Problem(str(path), f"not a version {VERSION} journal")])
    return doc


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
        c.base, c.base_ext, c.details_base = dict(base), dict(base_ext), dict(det_base)
        p.counters = c
        p.mad_in = p.mad_out = 0
