"""The admin socket's requests to the live fabric: one ``{"op": ...}`` request, checked
whole by its model (:mod:`.admin_model`), answered by the :class:`.api.LiveFabric` call
it names (the socket itself is :mod:`..run.admin`)."""

from __future__ import annotations

import statistics
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

from ...errors import InputError, Problem
from ...model.fabric import Port
from ...model.lookup import lookup
from ..host import hostview, views
from . import admin_model as m
from . import durations, watch
from .api import LiveFabric
from .collectives import live as collectives
from .events import Kind
from .faults.options import flap_options

OPS = tuple(m.OPS)


RECENT = 256  # requests of each operation whose times ``stats`` sums up


class _Cost:
    """What the requests of one operation cost the server's loop (seconds)."""

    __slots__ = ("count", "recent", "seconds")

    def __init__(self) -> None:
        self.count = 0
        self.seconds = 0.0
        self.recent: deque[float] = deque(maxlen=RECENT)

    def to_json(self, op: str) -> dict:
        r = self.recent
        return {
            "op": op,
            "count": self.count,
            "seconds": self.seconds,
            "median": statistics.median(r) if r else 0.0,
            "max": max(r, default=0.0),
        }


# what each live fabric's requests cost, by operation
_COSTS: weakref.WeakKeyDictionary[LiveFabric, dict[str, _Cost]] = weakref.WeakKeyDictionary()


def answer(live: LiveFabric, req: Any):
    """The result of request ``req`` (a JSON value) on ``live`` (JSON-able).  User
    errors, a request that does not fit its model first, are FabriclabErrors.  The time
    each operation takes is counted (``stats``' ``requests``)."""
    t0 = time.perf_counter()
    r = m.parse(req)
    try:
        return _ANSWERS[r.op](live, r)
    finally:
        cost = _COSTS.setdefault(live, {}).setdefault(r.op, _Cost())
        dt = time.perf_counter() - t0
        cost.count += 1
        cost.seconds += dt
        cost.recent.append(dt)


def _stats(live: LiveFabric, _r: m.Stats) -> dict:
    """What the server counted: MADs, answers, forwards, ...; the tools attached; and
    what each operation's requests cost the loop (seconds)."""
    costs = _COSTS.get(live, {})
    return {
        **live.server.stats.to_json(),
        "clients": len(live.server.transport.clients),
        "requests": [c.to_json(op) for op, c in sorted(costs.items())],
    }


def _fault(live: LiveFabric, r: m.Fault):
    return live.fault(r.kind, r.target, **r.options.given())


def _faults(live: LiveFabric, _r: m.Faults):
    live.catch_up()
    return live.faults()


def _scenario(live: LiveFabric, r: m.Scenario):
    return live.scenario(r.text, r.source)


def _advance(live: LiveFabric, r: m.Advance):
    return {"now": live.advance(durations.seconds(r.seconds, "SECONDS"))}


def _topology_inputs(live: LiveFabric, r: m.TopologyInputs) -> dict:
    """What ``fabriclab topology`` reads of the fabric now: the ibnetdiscover of
    ``from`` (a tray; default: the first one with its link up) and every tray's
    nvidia-smi answers, pdsh-prefixed; and what it knows of its cluster (its trays, its
    NVLink domains' names)."""
    live.catch_up()
    cluster = live.resolver.cluster
    return {
        "ibnetdiscover": views.ibnetdiscover_now(cluster, live.sim, r.from_ or None),
        "nvidia_smi": views.nvidia_smi_pdsh(cluster),
        "cluster": views.cluster_facts(cluster),
    }


def _tray(live: LiveFabric, r: m.Tray):
    live.catch_up()
    return hostview.tray_view(live.resolver.cluster, live.sim, r.host)


def _locate(live: LiveFabric, r: m.Locate) -> dict:
    """``locate NAME`` on the running fabric: the LIDs its SM has given now (a switch's
    ports show its port 0's), and each cable's far end as the fabric is served."""
    sim = live.sim

    def lids(p: Port) -> tuple[int, int]:
        node = sim.node_of(p.node)
        sp = node.ports[0 if node.is_switch else p.num]
        return (sp.lid, sp.lmc) if sp is not None else (0, 0)

    def peer(p: Port) -> Port | None:
        far = sim.port_of(p).peer
        return far.fabric_port if far is not None else None

    return lookup(live.resolver.cluster, r.name, lids=lids, peer=peer, source="fabric")


# what each live fabric's watcher read last (kept: a reading costs what changed)
_WATCHERS: weakref.WeakKeyDictionary[LiveFabric, watch.Watcher] = weakref.WeakKeyDictionary()


def _watch(live: LiveFabric, r: m.Watch) -> dict:
    """The fabric's layout or its state now, written to a file beside the journal (the
    watcher reads it there: :mod:`.watch`); where, and what it holds."""
    if live.journal_path is None:
        raise InputError([Problem("watch", "this fabric keeps no state directory")])
    folder = live.journal_path.parent
    live.catch_up()
    clock = {"now": live.clock.now(), "virtual": live.clock.virtual}
    if r.part == "layout":
        path = watch.layout_path(folder, live.name)
        doc = watch.layout(live.resolver.cluster, live.sim, live.name)
        watch.write_json(path, doc)
        return {"path": str(path), "rows": len(doc["ports"]["node"]), **clock}
    path = watch.state_path(folder, live.name)
    w = _WATCHERS.get(live)
    if w is None:
        w = _WATCHERS[live] = watch.Watcher(live.sim)
    arr = w.state(live.traffic, tuple(live.book.faults))
    watch.write_array(path, arr)
    return {"path": str(path), "rows": len(arr), "columns": list(watch.COLUMNS), **clock}


def _event(live: LiveFabric, r: m.Event) -> dict:
    """An event from outside the fabric (UFM's external events) into its event log."""
    kind = Kind(r.event_type, r.name, r.severity, r.category, "Site")
    return live.event(kind, r.object_name or live.name or "fabric", r.description)


def _net(live: LiveFabric, r: m.Net) -> dict:
    """A fault on the other networks (up --networks: the launcher gives the live fabric
    their faults, :class:`..lan.faults.NetFaults`)."""
    faults = live.net_faults
    if faults is None:
        raise InputError(
            [Problem("net", "this fabric's other networks are not built (up --networks)")]
        )
    if r.action == "list":
        return faults.state()
    if not r.target:
        raise InputError([Problem("target", "name a link, an Ethernet switch or a network")])
    if r.action in ("down", "up"):
        out = faults.set_down(r.target, r.action == "down")
    elif r.action == "flap":
        opts = flap_options({"period": r.period, "count": r.count}, not live.clock.virtual)
        out = faults.flap(r.target, opts["period"], opts["count"])
    elif r.action == "rate":
        out = faults.set_rate(r.target, r.rate)
    else:
        out = faults.set_netem(r.target, r.delay_ms, r.loss_pct)
    live.save()  # journaled, and the loop's next wake-up worked out anew (a flap's)
    return out


_ANSWERS: dict[str, Callable[[LiveFabric, Any], Any]] = {
    "fault": _fault,
    "faults": _faults,
    "clear": lambda live, r: live.clear(r.id),
    "scenario": _scenario,
    "scenarios": lambda live, _r: live.scenarios_running(),
    "advance": _advance,
    "clock": lambda live, _r: {"now": live.clock.now(), "virtual": live.clock.virtual},
    "nvidia-smi": lambda live, r: {
        "text": views.nvidia_smi_on(live.resolver.cluster, r.tray, r.args)
    },
    "topology-inputs": _topology_inputs,
    "stats": _stats,
    "tray": _tray,
    "locate": _locate,
    "traffic": lambda live, r: live.traffic_request(r.verb, r.args, r.options.given()),
    "watch": _watch,
    "event": _event,
    "collective": collectives.answer,
    "net": _net,
}
assert set(_ANSWERS) == set(m.OPS), "every operation the model takes is answered"
