"""The live fabric's state as the journal keeps it: the document :func:`snapshot` makes
of the faults, bit-error state, scenarios, traffic and counters, and :func:`restore`,
which brings it back on ``up --resume`` without counting, trapping or logging again what
had already happened.

The journal's file and the counters' encoding are :mod:`.journal`.
"""

from __future__ import annotations

from collections.abc import Callable

from ..fabric.state import SimFabric
from . import journal
from .clock import Clock
from .faults.ber import EndState
from .faults.book import FaultBook
from .faults.targets import Target
from .scenario import Scenario
from .traffic import commands as traffic_commands
from .traffic.engine import TrafficEngine


def snapshot(
    meta: dict,
    clock: Clock,
    book: FaultBook,
    scenarios: list[Scenario],
    traffic: TrafficEngine | None,
    sim: SimFabric,
    counters: bool = True,
) -> dict:
    """Everything ``--resume`` needs of a live fabric: what it must match (``meta``), its
    clock, faults (``book``), scenarios, flows (``traffic``) and, with ``counters``, the
    counters of ``sim``."""
    doc = {
        "meta": meta,
        "clock": clock.now(),
        "virtual": clock.virtual,
        "next_fault": book.next_id,
        "faults": [f.to_json() for f in book.faults.values()],
        "ber": {
            str(fid): {k: e.to_json() for k, e in ends.items()} for fid, ends in book.ends.items()
        },
        "scenarios": [s.to_json() for s in scenarios],
        "traffic": traffic_commands.flows_doc(traffic) if traffic is not None else [],
    }
    if counters:
        doc["counters"] = journal.counters_doc(sim)
    return doc


def restore(
    doc: dict,
    sim: SimFabric,
    book: FaultBook,
    resolve: Callable[[str, str], Target],
    traffic: TrafficEngine | None,
) -> list[Scenario]:
    """Bring ``doc`` back: the counters of ``sim``, the faults in ``book`` as they were
    (their targets found by ``resolve``), the flows still running on ``traffic``; the
    scenarios, where they were."""
    journal.restore_counters(sim, doc.get("counters", {}))
    for fd in doc.get("faults", []):
        t = resolve(fd["target"], fd["kind"])
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
    if traffic is not None:
        traffic_commands.restore_flows(traffic, sim, doc.get("traffic") or [])
    return [Scenario.from_json(s) for s in doc.get("scenarios", [])]
