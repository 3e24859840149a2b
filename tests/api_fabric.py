"""A fabric for the API's in-process tests: a live fabric (served without a socket)
whose admin requests the API's Source sends straight to the server's answering code,
with the state directory (event log, watch files) in a folder of the test's own."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from helpers import served

from fabriclab.api.app import make_app
from fabriclab.api.auth import Auth
from fabriclab.api.source import Source
from fabriclab.model.build import build
from fabriclab.model.cluster import Cluster
from fabriclab.sim.fabric import minhop
from fabriclab.sim.live import admin_requests
from fabriclab.sim.live.api import LiveFabric
from fabriclab.sim.live.clock import VirtualClock
from fabriclab.sim.live.events import events_path
from fabriclab.sim.live.traffic.engine import TrafficEngine
from fabriclab.spec.load import load_spec


@dataclass
class ApiFabric:
    """The live fabric, its cluster, and the API's Source on it."""

    cluster: Cluster
    live: LiveFabric
    source: Source

    def app(self, auth: Auth | None = None):
        """The API's app on this fabric."""
        return make_app(self.source, auth)

    def reset(self) -> None:
        """Clear every fault and bring the links back to Active (as an SM would: a link
        that comes back trains to INIT)."""
        self.live.clear()
        minhop.activate(self.live.sim)


@contextmanager
def api_fabric(
    state: Path, spec: str = "lab", trays: int | None = None, routed: bool = True
) -> Iterator[ApiFabric]:
    """Fabric ``spec`` live in this process on a virtual clock, with a traffic engine;
    ``routed``: every cabled port Active and the forwarding tables filled (as after an
    SM's sweep, :mod:`fabriclab.sim.fabric.minhop`)."""
    cluster = build(load_spec(spec, trays=trays))
    name = "apitest"
    with served(cluster, serve=False) as srv:
        clock = VirtualClock()
        if routed:
            minhop.fill(srv.sim)
        live = LiveFabric(
            srv, cluster, clock, state=state, name=name, traffic=TrafficEngine(srv.sim, clock)
        )

        def send(req: dict):
            # as the socket would carry it: JSON both ways
            return json.loads(json.dumps(admin_requests.answer(live, json.loads(json.dumps(req)))))

        try:
            yield ApiFabric(cluster, live, Source(name, send, events_path(state, name)))
        finally:
            live.close()
