"""The live fabric's state as the journal keeps it: the document :func:`snapshot` makes
of the faults, bit-error state, scenarios, traffic and counters, and :func:`restore`,
which brings it back on ``up --resume`` without counting, trapping or logging again what
had already happened.

The journal's file and the counters' encoding are :mod:`.journal`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import journal
from .faults.ber import EndState
from .scenario import Scenario
from .traffic import commands as traffic_commands

if TYPE_CHECKING:
    from .api import LiveFabric


def snapshot(live: LiveFabric, counters: bool = True) -> dict:
    """Everything ``--resume`` needs of ``live`` (``counters`` False: all but the
    counters)."""
    book = live.book
    doc = {
        "meta": live.meta,
        "clock": live.clock.now(),
        "virtual": live.clock.virtual,
        "next_fault": book.next_id,
        "faults": [f.to_json() for f in book.faults.values()],
        "ber": {
            str(fid): {k: e.to_json() for k, e in ends.items()} for fid, ends in book.ends.items()
        },
        "scenarios": [s.to_json() for s in live.scenarios],
        "traffic": traffic_commands.flows_doc(live.traffic) if live.traffic is not None else [],
    }
    if counters:
        doc["counters"] = journal.counters_doc(live.sim)
    return doc


def restore(live: LiveFabric, doc: dict) -> None:
    """Bring ``doc`` back on ``live``: counters, faults as they were, scenarios where
    they were, the flows still running."""
    journal.restore_counters(live.sim, doc.get("counters", {}))
    book = live.book
    for fd in doc.get("faults", []):
        t = live.resolve(fd["target"], fd["kind"])
        book.next_id = fd["id"]
        f = book.add(fd["kind"], t, fd["options"], quiet=True)
        f.since = fd["since"]
        f.progress = dict(fd.get("progress", {}))
        if f.kind == "flap" and f.progress.get("down"):
            book.ports.hold(t.ports[0], quiet=True)
        if f.kind == "errors":
            saved = doc.get("ber", {}).get(str(f.id), {})
            book.ends[f.id] = {int(k): EndState(**v) for k, v in saved.items()}
    book.next_id = max(book.next_id, int(doc.get("next_fault", 1)))
    live.scenarios = [Scenario.from_json(s) for s in doc.get("scenarios", [])]
    if live.traffic is not None:
        traffic_commands.restore_flows(live.traffic, live.sim, doc.get("traffic") or [])
