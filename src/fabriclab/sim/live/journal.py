"""The live fabric's journal: what ``up --resume`` needs to bring a fabric back as it was
(faults and their progress, scenarios, traffic flows, every port's counters, the clock).

It is a JSON document in the state directory (``<name>.journal``): its first line the
whole state, written beside it then renamed (every couple of seconds, and when the lines
added grow as long as it), so that a ``kill -9`` at any moment leaves either the
previous file or the new one; each change in between adds a line, the state then with
only the counters that changed since the line before (a :class:`Ledger` keeps the
counters' JSON, so a save costs what changed, not the fabric).  A line cut short by a
``kill -9`` lacks its newline and is left out when the journal is read.  What only MADs
or running flows moved (counters, what each flow has left) is written at the next
periodic save, or the next line a traffic request or a clock advance adds.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from pydantic import ValidationError

from ...errors import InputError, Problem
from ...statedir import open_state_file, replace_state_file
from ..fabric.counters import Counters
from ..fabric.state import MAD_WORDS, SimFabric
from . import journal_model

VERSION = 1
ADDED_MIN = 1 << 16  # bytes of lines the journal may gather before it is written whole


def journal_path(state: Path, name: str) -> Path:
    """Where fabric ``name``'s journal is kept."""
    return state / f"{name}.journal"


def _text(doc: dict, counters: str | None) -> bytes:
    text = json.dumps({"version": VERSION, **doc}, separators=(",", ":"))
    if counters is not None:  # spliced in: the whole is still one JSON object
        text = f'{text[:-1]},"counters":{counters}}}'
    return (text + "\n").encode()


def save(path: Path, doc: dict, counters: str | None = None) -> int:
    """Replace the journal with ``doc`` (atomically); ``counters``: its counters
    document already in JSON (:meth:`Ledger.whole`).  The bytes written."""
    data = _text(doc, counters)
    replace_state_file(path, lambda f: f.write(data))
    return len(data)


def append(path: Path, doc: dict, counters: str) -> int:
    """Add a line to the journal: ``doc`` as it is now (without ``traffic``: the flows
    as the line before had them), with the counters that changed since the line before
    (:meth:`Ledger.since`); one write, so that a ``kill -9``
    leaves the line whole or short of its newline (then :func:`load` leaves it out).
    The bytes written."""
    data = _text(doc, counters)
    fd = open_state_file(path, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    return len(data)


def load(path: Path) -> dict:
    """The journal's document, checked whole (:mod:`.journal_model`): its first line,
    then each line added since (the state then, with the counters that changed), the
    last line left out when it is short of its newline (a write cut by a ``kill -9``).
    An InputError when there is none, it cannot be read or a field is wrong: one line,
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
    lines = text.split(b"\n")
    if len(lines) > 1 and lines[-1]:  # a line added and cut short: the state before it
        lines[-1] = b""
    first, *rest = [line for line in lines if line] or [b""]
    doc, _ = _checked(path, first, "")
    counters = doc["counters"]
    for i, line in enumerate(rest, 2):
        flows = doc["traffic"]
        doc, given = _checked(path, line, f"line {i}: ")
        counters.update(doc["counters"])
        doc["counters"] = counters
        if "traffic" not in given:  # the flows as the line before had them
            doc["traffic"] = flows
    return doc


def _checked(path: Path, text: bytes, where: str) -> tuple[dict, set[str]]:
    try:  # parsed and checked at once; nesting is bounded by the parser
        doc = journal_model.JournalDoc.model_validate_json(text)
    except ValidationError as e:
        first = e.errors(include_url=False, include_input=False)[0]
        if first["type"] == "json_invalid":
            raise InputError(
                [Problem(str(path), f"unreadable journal: {where}{first['msg']}")]
            ) from None
        if first["loc"][:1] == ("version",) or first["loc"] == ():
            raise InputError(
                [Problem(str(path), f"{where}not a version {VERSION} journal")]
            ) from None
        raise InputError([Problem(f"journal {path}", where + journal_model.problem(e))]) from None
    return doc.model_dump(), doc.model_fields_set


def _entry(n_index: int, p, c: Counters) -> tuple[str, list, str] | None:
    """Port ``p``'s counters as the journal keeps them: (key, entry, the entry's JSON as
    a member of an object), or None when they hold nothing."""
    raw = {k: v for k, v in c.raw.items() if v}
    det = {k: v for k, v in c.details.items() if v}
    if not (raw or det or c.base or c.base_ext):
        return None
    key = f"{n_index}:{p.num}"
    entry = [raw, dict(c.base), dict(c.base_ext), det, dict(c.details_base)]
    return key, entry, json.dumps({key: entry}, separators=(",", ":"))[1:-1]


def _ports(sim: SimFabric):
    for n in sim.nodes:
        for p in n.ports:
            if p is not None:
                yield n.index, p


def counters_doc(sim: SimFabric) -> dict[str, list]:
    """Every port's counters that moved from zero: ``"node:port"`` -> [running totals,
    PortCounters reset points, extended reset points, details, details' reset points]
    (a full walk, MADs and traffic counted in first; the journal's saves keep a
    :class:`Ledger` instead)."""
    out = {}
    for ni, p in _ports(sim):
        e = _entry(ni, p, p.flush())
        if e is not None:
            out[e[0]] = e[1]
    return out


class Ledger:
    """The counters' part of the journal, kept between saves so that a save costs the
    ports whose counters moved since the last one, not the fabric.

    Each port's Counters join :attr:`dirty` when they move (:meth:`Counters.touch`,
    once the ledger has taken them); a save encodes only those again.  MADs crossing a
    port are tallied on the port, and traffic in the traffic engine, not in its
    Counters, until it is read: :meth:`take` with ``mads`` counts both in (a walk of
    every port, for the periodic saves), with ``flows`` the traffic."""

    def __init__(self, sim: SimFabric, traffic=None):
        self.sim = sim
        self.traffic = traffic
        self.dirty: set[Counters] = set()
        self.owner: dict[Counters, tuple[int, object]] = {}
        self.pieces: dict[str, str] = {}  # key -> its entry's JSON, for each port held
        self.changed: set[str] = set()  # keys whose piece changed since the last write
        self.cold = True
        self.unmoved = False  # every port's counters as at power-on, none taken yet

    def forget(self) -> None:
        """Counters were replaced (a journal brought back): take every port anew."""
        self.cold = True
        self.unmoved = False

    def at_power_on(self) -> None:
        """Every port's counters are as at power-on (a fresh fabric, no MAD served yet):
        the first take holds nothing and need not walk the ports (a second of a 32,768-HCA
        fabric's start); the next takes them all."""
        self.unmoved = True

    def take(self, mads: bool = False, flows: bool = False) -> None:
        """Bring the pieces up to the counters now: those that moved (and, with
        ``mads``, those MADs moved; with ``flows``, those traffic moved)."""
        if (flows or mads) and self.traffic is not None and self.traffic.counted():
            self.traffic.settle_all()  # traffic counted into the ports' Counters (marks them)
        if self.cold:
            if self.unmoved:  # nothing to hold; still cold: the next take walks them
                self.unmoved = False
                self.pieces.clear()
                self.changed.clear()
                return
            self._take_all()
            return
        if mads:
            for _, p in _ports(self.sim):
                if p.mad_out or p.mad_in:  # what flush does for MADs
                    p.counters.count_packets(p.mad_out, p.mad_in, MAD_WORDS)
                    p.mad_out = p.mad_in = 0
        dirty, owner = self.dirty, self.owner
        while dirty:
            c = dirty.pop()
            c.moved = False
            held = owner.get(c)
            if held is None:  # Counters the ledger never took: take every port anew
                self._take_all()
                return
            self._put(held[0], held[1], c)

    def _take_all(self) -> None:
        self.dirty.clear()
        self.owner.clear()
        self.pieces.clear()
        self.changed.clear()
        for ni, p in _ports(self.sim):
            c = p.flush()
            c.moved = False
            c.dirty = self.dirty
            self.owner[c] = (ni, p)
            self._put(ni, p, c)
        self.dirty.clear()  # (flush may have moved some)
        self.cold = False

    def _put(self, ni: int, p, c: Counters) -> None:
        e = _entry(ni, p, c)
        key = f"{ni}:{p.num}"
        if e is None:
            if self.pieces.pop(key, None) is not None:
                self.pieces[key] = f'"{key}":[{{}},{{}},{{}},{{}},{{}}]'  # back to nothing
                self.changed.add(key)
            return
        if self.pieces.get(key) != e[2]:
            self.pieces[key] = e[2]
            self.changed.add(key)

    def whole(self) -> str:
        """Every port's counters, as JSON; the changes since are written anew."""
        self.changed.clear()
        return "{" + ",".join(self.pieces.values()) + "}"

    def since(self) -> str:
        """The counters that changed since the last :meth:`whole` or :meth:`since`."""
        pieces = self.pieces
        text = "{" + ",".join(pieces[k] for k in self.changed) + "}"
        self.changed.clear()
        return text


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


class Writer:
    """One live fabric's journal at ``path`` (None: none is kept), its counters' part
    kept by ``ledger``: each save a line with what changed, or the whole of it (the
    first save, every couple of seconds, and when the lines outgrow the first)."""

    def __init__(self, path: Path | None, ledger: Ledger):
        self.path = path
        self.ledger = ledger
        self.base = 0  # bytes of the journal's first line, once this run wrote it
        self.added = 0  # bytes of the lines added since
        self.flows_saved = False  # whether the journal has the flows as they were asked for
        self.saved = 0.0  # when the whole was last written (time.monotonic)
        self.cost = 0.0  # what that took (seconds)

    def save(self, snapshot: Callable[[bool], dict], whole: bool = False) -> None:
        """Write the state ``snapshot(flows)`` gives (the flows with it, or not): a line,
        or (``whole``) the whole, with the counters MADs moved."""
        if self.path is None:
            return
        t0 = time.monotonic()
        whole = whole or not self.base or self.added > max(self.base, ADDED_MIN)
        # the flows (every one's progress: O(flows)) when they were asked for, brought
        # back or moved by the virtual clock, and in the whole
        flows = whole or not self.flows_saved
        doc = snapshot(flows)
        self.flows_saved = True
        self.ledger.take(mads=whole, flows=flows)  # (the counters the flows moved with them)
        if whole:
            self.base = save(self.path, doc, self.ledger.whole())
            self.added = 0
            self.saved = time.monotonic()
            self.cost = self.saved - t0
        else:
            self.added += append(self.path, doc, self.ledger.since())

    def due(self, every: float) -> bool:
        """Whether the whole is due again, ``every`` seconds (a big fabric's counters take
        a while to write: never more than a tenth of the time)."""
        every = max(every, 10 * self.cost)
        return self.path is not None and time.monotonic() - self.saved >= every
