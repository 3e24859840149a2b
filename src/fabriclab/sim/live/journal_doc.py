"""The live fabric's state as the journal keeps it: the document :func:`snapshot` makes
of the faults, bit-error state, scenarios, traffic and counters, and :func:`restore`,
which brings it back on ``up --resume`` without counting, trapping or logging again what
had already happened.

The journal's file and the counters' encoding are :mod:`.journal`.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import ValidationError

from ...errors import FabriclabError, InputError, Problem
from ..fabric.state import SimFabric
from . import journal
from .clock import Clock
from .faults.ber import EndState
from .faults.book import FaultBook
from .faults.options import bad, check_options
from .faults.targets import Target
from .journal_model import FaultDoc, problem
from .scenario import Scenario, Step
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
    flows: bool = True,
) -> dict:
    """Everything ``--resume`` needs of a live fabric: what it must match (``meta``), its
    clock, faults (``book``), scenarios, with ``flows`` the flows (``traffic``) and, with
    ``counters``, the counters of ``sim``."""
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
    }
    if flows:
        doc["traffic"] = traffic_commands.flows_doc(traffic) if traffic is not None else []
    if counters:
        doc["counters"] = journal.counters_doc(sim)
    return doc


def restore(
    doc: dict,
    sim: SimFabric,
    book: FaultBook,
    resolve: Callable[[str, str], Target],
    traffic: TrafficEngine | None,
    check: Callable[[Step], None],
    source: str = "journal",
) -> list[Scenario]:
    """Bring ``doc`` (checked by :mod:`.journal_model`) back: the counters of ``sim``,
    the faults in ``book`` as they were (their targets found by ``resolve``), the flows
    still running on ``traffic``; the scenarios, where they were.  Every fault and every
    step still to run is first checked as a live request is (``check``: a scenario
    step's); what ``fault`` would refuse is refused here, one InputError naming
    ``source`` and the field, before anything is brought back."""

    def refuse(field: str, e: FabriclabError) -> InputError:
        p = e.problems[0]
        return InputError([Problem(source, f"{field}: {p.where}: {p.what}")])

    clock = doc["clock"]
    faults = []
    seen: set[int] = set()
    for i, fd in enumerate(doc["faults"]):
        field = f"faults.{i}"
        if fd["id"] in seen or fd["id"] >= doc["next_fault"]:
            raise InputError(
                [Problem(source, f"{field}.id: {fd['id']} again, or not below next_fault")]
            )
        seen.add(fd["id"])
        if fd["since"] > clock:
            raise InputError([Problem(source, f"{field}.since: after the clock ({clock:g})")])
        try:
            t = resolve(fd["target"], fd["kind"])
            opts = check_options(fd["kind"], t, fd["options"], wall=not book.live.clock.virtual)
            progress = _progress(fd, opts)
        except FabriclabError as e:
            raise refuse(field, e) from None
        except ValidationError as e:
            raise InputError([Problem(source, problem(e, (field, "progress")))]) from None
        faults.append((fd, t, opts, progress))
    errors = {str(fd["id"]) for fd, *_ in faults if fd["kind"] == "errors"}
    for fid in doc.get("ber", {}):
        if fid not in errors:
            raise InputError([Problem(source, f"ber.{fid}: no errors fault {fid}")])
    scenarios = []
    for i, sd in enumerate(doc.get("scenarios", [])):
        sc = Scenario.from_json(sd)
        if sc.done > len(sc.steps):
            raise InputError(
                [Problem(source, f"scenarios.{i}.done: {sc.done} of {len(sc.steps)} steps")]
            )
        for j in range(sc.done, len(sc.steps)):
            try:
                check(sc.steps[j])
            except FabriclabError as e:
                raise refuse(f"scenarios.{i}.steps.{j}", e) from None
        scenarios.append(sc)
    flows = doc.get("traffic") or []
    if flows and traffic is not None:
        try:
            pairs = traffic_commands.flow_ports(sim, flows)
        except FabriclabError as e:
            raise InputError([Problem(source, str(e.problems[0]))]) from None
        going = [i for i, d in enumerate(flows) if d["left"] != 0]  # 0: it had just ended
        pairs, flows = [pairs[i] for i in going], [flows[i] for i in going]
    journal.restore_counters(sim, doc.get("counters", {}))
    for i, (fd, t, opts, progress) in enumerate(faults):
        book.next_id = fd["id"]
        try:
            f = book.add(fd["kind"], t, opts, quiet=True)
        except FabriclabError as e:  # an nvlink fault's GPUs
            raise refuse(f"faults.{i}", e) from None
        f.since = fd["since"]
        f.progress = progress
        if f.kind == "flap" and f.progress.get("down"):
            book.ports.hold(t.ports[0], quiet=True)
        if f.kind == "errors":
            saved = doc.get("ber", {}).get(str(f.id), {})
            book.ends[f.id] = {int(k): EndState(**v) for k, v in saved.items()}
    book.next_id = max(book.next_id, doc["next_fault"])
    if flows and traffic is not None:
        traffic_commands.restore_flows(traffic, pairs, flows)
    return scenarios


def _progress(fd: dict, opts: dict) -> dict:
    """A fault's progress, checked for its kind and against its options."""
    progress = FaultDoc.model_validate(fd).checked_progress()
    if fd["kind"] == "flap":
        if progress["flaps"] > opts["count"]:
            raise bad("progress.flaps", f"{progress['flaps']} of {opts['count']} flaps")
        if progress["next"] < fd["since"]:
            raise bad("progress.next", "before the fault began")
    if fd["kind"] == "errors" and progress["recoveries"] >= opts["down_after"]:
        raise bad("progress.recoveries", f"not below down-after ({opts['down_after']})")
    return progress
