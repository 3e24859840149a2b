"""The admin socket's requests to the live fabric: one ``{"op": ...}`` request, its
fields checked, answered by the :class:`.api.LiveFabric` call it names (the socket itself
is :mod:`..run.admin`)."""

from __future__ import annotations

import dataclasses

from ...errors import InputError, Problem
from ...model.fabric import Port
from ...model.lookup import lookup
from ..host import hostview
from . import durations
from .api import LiveFabric


def answer(live: LiveFabric, req: dict):
    """The result of request ``req`` on ``live`` (JSON-able).  User errors are
    FabriclabErrors."""
    op = req.get("op")
    if op == "fault":
        opts = req.get("options") or {}
        if not isinstance(opts, dict):
            raise InputError([Problem("options", "want a mapping")])
        return live.fault(str(req.get("kind")), str(req.get("target")), **opts)
    if op == "faults":
        live.catch_up()
        return live.faults()
    if op == "clear":
        fid = req.get("id")
        if fid is not None and not isinstance(fid, int):
            raise InputError([Problem("ID", f"{fid!r} is not a fault id")])
        return live.clear(fid)
    if op == "scenario":
        return live.scenario(str(req.get("text", "")), str(req.get("source", "scenario")))
    if op == "scenarios":
        return live.scenarios_running()
    if op == "advance":
        return {"now": live.advance(durations.seconds(req.get("seconds"), "SECONDS"))}
    if op == "clock":
        return {"now": live.clock.now(), "virtual": live.clock.virtual}
    if op == "nvidia-smi":
        return {"text": live.nvidia_smi(str(req.get("tray")), list(req.get("args") or []))}
    if op == "topology-inputs":
        where = req.get("from")
        return live.topology_inputs(str(where) if where else None)
    if op == "stats":  # what the server counted: MADs, answers, forwards, ...
        return dataclasses.asdict(live.server.stats)
    if op == "tray":
        live.catch_up()
        return hostview.tray_view(live.resolver.cluster, live.sim, req.get("host"))
    if op == "locate":
        return _locate(live, req.get("name"))
    if op == "traffic":
        return live.traffic_request(
            str(req.get("verb")), list(req.get("args") or []), dict(req.get("options") or {})
        )
    raise InputError([Problem("request", f"unknown operation {op!r}")])


def _locate(live: LiveFabric, name) -> dict:
    """``locate NAME`` on the running fabric: the LIDs its SM has given now (a switch's
    ports show its port 0's), and each cable's far end as the fabric is served."""
    if not isinstance(name, str):
        raise InputError([Problem("NAME", f"{name!r} is not a name")])
    sim = live.sim

    def lids(p: Port) -> tuple[int, int]:
        node = sim.node_of(p.node)
        sp = node.ports[0 if node.is_switch else p.num]
        return (sp.lid, sp.lmc) if sp is not None else (0, 0)

    def peer(p: Port) -> Port | None:
        far = sim.port_of(p).peer
        return far.fabric_port if far is not None else None

    return lookup(live.resolver.cluster, name, lids=lids, peer=peer, source="fabric")
