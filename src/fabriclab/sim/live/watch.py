"""The live fabric as tables for those who watch it from above (``fabriclab api``: the
Prometheus metrics, the UFM-compatible REST API and the web view): what never changes
while the fabric runs (its layout: nodes, ports, cabling, where each sits in the cluster)
and what does (each port's LID, states, trained width and speed, and counters).

Both are written to files in the state directory and read by the watcher's process, so
that a scrape of a 200,000-port fabric costs the server's loop the walk over its ports
(about a second per million counters, measured in ``bench/api.py``) and nothing else:
no JSON of millions of numbers goes through the admin socket.

- The layout (:func:`layout`): one JSON document of columns, ``nodes`` and ``ports``, a
  port's row the same in both parts; made once.
- The state (:func:`state`): one ``uint64`` array, a row per port of the layout and the
  columns :data:`STATE_COLUMNS` then :data:`COUNTERS` (the PortCountersExtended view,
  64 bits, since its last reset), saved as a NumPy ``.npy`` file.
"""

from __future__ import annotations

import json
from array import array
from pathlib import Path
from typing import Any

import numpy as np

from ...ib.rates import SPEEDS
from ...model.cluster import Cluster
from ...statedir import replace_state_file
from ..fabric.counters import NAMES
from ..fabric.state import MAD_WORDS, SimFabric, SimPort

# Each port's state columns, before the counters: its LID (a switch's external ports show
# the switch's port-0 LID, as UFM and the exporters do), PortInfo's LinkState and
# PhysLinkState, how many faults hold it down, then the lanes and speed a degraded link
# retrained at (0: as cabled, the layout's; a speed is 1 + its index in ``speeds``).
STATE_COLUMNS = ("lid", "state", "phys", "held", "lanes", "speed")
COUNTERS = NAMES
COLUMNS = STATE_COLUMNS + COUNTERS
_SPEED_INDEX = {s: i for i, s in enumerate(SPEEDS)}
_COUNTER_INDEX = {name: i for i, name in enumerate(COUNTERS)}
_MAX64 = (1 << 64) - 1
LAYOUT_VERSION = 1


def _ports(sim: SimFabric) -> list[SimPort]:
    """Every port of the fabric in the layout's order (node by node, port 0 first)."""
    return [p for n in sim.nodes for p in n.ports if p is not None]


def layout(cluster: Cluster, sim: SimFabric, name: str) -> dict[str, Any]:
    """What never changes while the fabric runs, as columns (JSON-able)."""
    domain_of = {t.host: d.name for d in cluster.domains for t in d.trays}
    rows: dict[int, int] = {}
    for i, p in enumerate(_ports(sim)):
        rows[id(p)] = i
    nodes: dict[str, list] = {
        k: []
        for k in (
            "guid",
            "system_guid",
            "kind",
            "name",
            "desc",
            "host",
            "hca",
            "role",
            "tier",
            "domain",
            "model",
            "vendor_id",
            "device_id",
            "revision",
            "nports",
            "first_row",
        )
    }
    ports: dict[str, list] = {k: [] for k in ("node", "num", "guid", "peer", "width", "speed")}
    for n in sim.nodes:
        m = n.fabric_node
        hw = m.hardware
        nodes["guid"].append(f"{m.guid:016x}")
        nodes["system_guid"].append(f"{m.sysimgguid:016x}")
        nodes["kind"].append("switch" if n.is_switch else "ca")
        nodes["name"].append(m.name or m.desc)
        nodes["desc"].append(m.desc)
        nodes["host"].append(m.host or "")
        nodes["hca"].append(m.hca or "")
        nodes["role"].append(m.role or ("hca" if not n.is_switch else ""))
        nodes["tier"].append(m.tier)
        nodes["domain"].append(domain_of.get(m.host or "", ""))
        nodes["model"].append(getattr(hw, "key", "") if hw is not None else "")
        nodes["vendor_id"].append(m.vendid)
        nodes["device_id"].append(m.devid)
        nodes["revision"].append(m.revision)
        nodes["nports"].append(m.nports)
        nodes["first_row"].append(len(ports["node"]))
        for q in n.ports:
            if q is None:
                continue
            fp = q.fabric_port
            ports["node"].append(n.index)
            ports["num"].append(q.num)
            ports["guid"].append(f"{q.guid:016x}")
            ports["peer"].append(rows[id(q.peer)] if q.peer is not None else -1)
            ports["width"].append(str(fp.width) if fp.width else "")
            ports["speed"].append(str(fp.speed) if fp.speed else "")
    return {
        "version": LAYOUT_VERSION,
        "fabric": name,
        "cluster": cluster.name,
        "description": cluster.description,
        "speeds": list(SPEEDS),
        "state_columns": list(STATE_COLUMNS),
        "counters": list(COUNTERS),
        "domains": [d.name for d in cluster.domains],
        "trays": [t.host for t in cluster.trays],
        "nodes": nodes,
        "ports": ports,
    }


class Watcher:
    """The state of ``sim``'s ports, kept between readings so that each reading costs
    what changed: a port's counters are taken again only when their version moved
    (:class:`..fabric.counters.Counters`), and the state columns only when something a
    PortInfo shows changed (the fabric's generation: every such change bumps it, or the
    SMA would answer a stale PortInfo) or the faults in force did (what holds a port)."""

    def __init__(self, sim: SimFabric):
        self.sim = sim
        self.ports = _ports(sim)
        n = len(self.ports)
        self.slots = np.array([(p.node.index, p.num) for p in self.ports], dtype=np.int64).reshape(
            n, 2
        )
        self.counts = np.zeros((n, len(COUNTERS)), dtype=np.uint64)
        # what each row was read from: its Counters and their version then (two flat
        # lists: a tuple a port would be garbage the collector walks)
        self.seen_from: list[object] = [None] * n
        self.seen_version: list[int] = [-1] * n
        self.head = np.zeros((n, len(STATE_COLUMNS)), dtype=np.uint64)
        self.head_key: tuple | None = None

    def state(self, traffic=None, faults: tuple = ()) -> np.ndarray:
        """Every port's state and counters now (:func:`state`); ``faults``: the ids of
        the faults in force (the state columns are read again when they change)."""
        counts, seen_from, seen_version = self.counts, self.seen_from, self.seen_version
        # the rows that changed and their values, gathered flat and put in at once (a
        # row at a time into NumPy costs four times as much on a first reading)
        rows, values = array("q"), array("Q")
        put_row, put_values = rows.append, values.extend
        for i, p in enumerate(self.ports):
            if p.mad_out or p.mad_in:  # MADs not yet counted (what flush does for them)
                p.counters.count_packets(p.mad_out, p.mad_in, MAD_WORDS)
                p.mad_out = p.mad_in = 0
            c = p.counters
            if seen_version[i] != c.version or seen_from[i] is not c:
                seen_from[i], seen_version[i] = c, c.version
                put_row(i)
                base = c.base_ext
                if base:
                    put_values([(v - base.get(k, 0)) & _MAX64 for k, v in c.raw.items()])
                else:
                    put_values(c.raw.values())
        if rows:
            changed = np.frombuffer(rows, dtype=np.int64)
            counts[changed] = np.frombuffer(values, dtype=np.uint64).reshape(len(rows), -1)
        key = (self.sim.generation.value, faults)
        if key != self.head_key:
            self.head = _heads(self.sim, len(self.ports))
            self.head_key = key
        out = np.empty((len(self.ports), len(COLUMNS)), dtype=np.uint64)
        out[:, : len(STATE_COLUMNS)] = self.head
        body = out[:, len(STATE_COLUMNS) :]
        body[:] = counts
        pending = traffic.unsettled() if traffic is not None else None
        if pending is not None:
            first, due, moves = pending
            at = first[self.slots[:, 0]] + self.slots[:, 1]
            for k, names in enumerate(moves):
                row = due[k, at].astype(np.uint64)  # one kind of count, every port
                for name in names:
                    body[:, _COUNTER_INDEX[name]] += row
        return out


def _heads(sim: SimFabric, rows: int) -> np.ndarray:
    """Every port's state columns (:data:`STATE_COLUMNS`)."""
    head = array("Q")
    put = head.extend
    for n in sim.nodes:
        sw = n.is_switch
        lid0 = n.ports[0].lid if sw and n.ports[0] is not None else 0
        for p in n.ports:
            if p is None:
                continue
            w, sp = p.width_trained, p.speed_trained
            put(
                (
                    lid0 if sw else p.lid,
                    p.state,
                    p.phys,
                    p.held,
                    w.lanes if w is not None else 0,
                    _SPEED_INDEX[sp.token] + 1 if sp is not None else 0,
                )
            )
    return np.frombuffer(head, dtype=np.uint64).reshape(rows, -1).copy()


def state(sim: SimFabric, traffic=None) -> np.ndarray:
    """Every port's state and counters now: a ``uint64`` array, a row per port of the
    layout, the columns :data:`COLUMNS`.  Nothing is changed: what ``traffic`` (the
    traffic engine, if any) counted but has not put into the ports' Counters yet is
    added here, not settled (settling port by port would cost the loop seconds).  One
    reading; a :class:`Watcher` keeps what it read, and reads again what changed."""
    return Watcher(sim).state(traffic)


def layout_path(folder: Path, name: str) -> Path:
    """Where fabric ``name`` writes its layout for a watcher."""
    return folder / f"{name}.watch-layout.json"


def state_path(folder: Path, name: str) -> Path:
    """Where fabric ``name`` writes its state for a watcher."""
    return folder / f"{name}.watch-state.npy"


def remove(folder: Path, name: str) -> None:
    """Remove what fabric ``name`` wrote for watchers (it stops)."""
    for path in (layout_path(folder, name), state_path(folder, name)):
        path.unlink(missing_ok=True)


def write_json(path: Path, doc: Any) -> None:
    """Replace ``path`` (in the state directory) with ``doc`` as JSON, atomically."""
    data = json.dumps(doc, separators=(",", ":")).encode()
    replace_state_file(path, lambda f: f.write(data))


def write_array(path: Path, arr: np.ndarray) -> None:
    """Replace ``path`` (in the state directory) with ``arr`` as a ``.npy`` file,
    atomically."""
    replace_state_file(path, lambda f: np.save(f, arr, allow_pickle=False))
