"""UFM's port isolation, actions and jobs on the fabric: ``app/unhealthy_ports`` (a port
marked UNHEALTHY with the action ``isolate`` goes down on the fabric, as UFM's isolation
takes it out of the subnet: the admin op ``fault`` kind ``down`` on its link; HEALTHY
clears that fault), ``actions`` (``reset``: the port's link down and up again, the
admin op ``fault`` kind ``flap`` with one flap) and ``jobs`` (what an action started,
Running until its fault has run its course, then Completed).

The unhealthy listing is derived from the fabric's faults (every ``down`` on a port),
so it survives a restart of the API; jobs live in the API's memory (the last
:data:`JOBS_MAX`)."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Any

from ..errors import ApiError
from ..source import Source
from .records import Records

JOBS_MAX = 1000
RESET_PERIOD = 1.0  # seconds a reset holds the link down (the flap's period)


def _wall(seconds: float) -> str:
    return time.strftime("%a %b %d %H:%M:%S %Y", time.gmtime(seconds))


def port_row(records: Records, name: str) -> int:
    """The row of UFM port ``name`` (``<guid>_<port>``); 404 for none."""
    row = records.layout.row_by_name.get(name.strip().lower().removeprefix("0x"))
    if row is None:
        raise ApiError(
            404, f"no port {name!r} (want <node guid>_<port number>, as resources/ports names it)"
        )
    return row


def unhealthy(source: Source, records: Records, now: float) -> list[dict]:
    """Every port a ``down`` fault holds, as UFM's "Unhealthy Ports REST API" lists one
    (PeerLID, PeerPortNumber, UnhealthyPortNumber, PeerGUID, PeerPort, UnhealthyNode,
    UnhealthyPort, State, PeerPortDname, Condition, PeerNode, StatusTime,
    UnhealthyPortDname, UnhealthyGUID)."""
    L = records.layout
    n, p = L.nodes, L.ports
    state = source.state(max_age=1.0)
    wall = time.time()
    out = []
    for f in source.request("faults"):
        if f.get("kind") != "down":
            continue
        row = records.row_by_target.get(str(f.get("target", "")))
        if row is None:
            continue
        node, peer = p["node"][row], p["peer"][row]
        pn = p["node"][peer] if peer >= 0 else -1
        out.append(
            {
                "UnhealthyPort": L.port_name(row),
                "UnhealthyGUID": n["guid"][node],
                "UnhealthyNode": records.system_name[node],
                "UnhealthyPortNumber": p["num"][row],
                "UnhealthyPortDname": records.dnames[row],
                "UnhealthyNodeType": "switch" if n["kind"][node] == "switch" else "host",
                "PeerPort": L.port_name(peer) if peer >= 0 else "N/A",
                "PeerGUID": n["guid"][pn] if pn >= 0 else "N/A",
                "PeerNode": records.system_name[pn] if pn >= 0 else "N/A",
                "PeerPortNumber": p["num"][peer] if peer >= 0 else 0,
                "PeerPortDname": records.dnames[peer] if peer >= 0 else "N/A",
                "PeerLID": str(state.value(peer, "lid")) if peer >= 0 else "0",
                "State": "Warning",
                "Condition": ["MANUAL"],
                "StatusTime": _wall(wall - (now - float(f.get("since", now)))),
                "fault_id": f["id"],
            }
        )
    return out


def set_health(
    source: Source, records: Records, ports: list[str], policy: str, action: str | None
) -> dict:
    """Mark ``ports`` UNHEALTHY (with ``action`` ``isolate``: down on the fabric) or
    HEALTHY (the ``down`` faults on their links cleared)."""
    rows = [port_row(records, p) for p in ports]  # every name checked before anything
    if policy == "UNHEALTHY":
        if action != "isolate":
            raise ApiError(
                400, 'fabriclab carries out only "action": "isolate" for UNHEALTHY ports'
            )
        held = {
            x
            for f in source.request("faults")
            if f.get("kind") == "down"
            for x in records.target_rows(str(f.get("target", "")))
        }
        done = []
        for r in rows:
            if r not in held:
                target = records.target_of(r)
                done.append(source.request("fault", kind="down", target=target)["id"])
                held.update(records.target_rows(target))  # a port named twice, or both ends
        return {"ports": ports, "ports_policy": policy, "faults": done}
    cleared: list[int] = []
    links = {x for r in rows for x in records.target_rows(records.target_of(r))}
    for f in source.request("faults"):
        if f.get("kind") == "down" and set(records.target_rows(str(f.get("target", "")))) & links:
            cleared += source.request("clear", id=f["id"])
    return {"ports": ports, "ports_policy": policy, "cleared": cleared}


class Jobs:
    """The jobs the API's actions started (the last JOBS_MAX)."""

    def __init__(self) -> None:
        self._jobs: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()
        self._next = 1

    def reset(self, source: Source, records: Records, port: str, user: str) -> str:
        """Reset port ``port``: its link down, then up (one flap); the job's id."""
        row = port_row(records, port)
        if int(records.layout.port_peer[row]) < 0:
            raise ApiError(400, f"port {port} has no link to reset")
        fault = source.request(
            "fault",
            kind="flap",
            target=records.target_of(row),
            options={"period": RESET_PERIOD, "count": 1},
        )
        now = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
        with self._lock:
            jid = str(self._next)
            self._next += 1
            self._jobs[jid] = {
                "ID": jid,
                "Operation": "Reset Port",
                "Description": f"Reset port {records.layout.port_name(row)}",
                "RelatedObjects": [records.layout.port_name(row)],
                "CreatedBy": user,
                "Created": now,
                "LastUpdated": now,
                "parent_id": "null",
                "_fault": fault["id"],
            }
            while len(self._jobs) > JOBS_MAX:
                self._jobs.popitem(last=False)
        return jid

    def _view(self, job: dict, faults: set[int], sub: bool = False) -> dict:
        running = job["_fault"] in faults
        rec = {k: v for k, v in job.items() if not k.startswith("_")}
        if sub:
            rec["ID"] = f"{job['ID']}.1"
            rec["parent_id"] = job["ID"]
        rec["Status"] = "Running" if running else "Completed"
        rec["Progress"] = 50 if running else 100
        rec["Summary"] = "" if running else "link went down and came up again"
        return rec

    def get(self, source: Source, jid: str) -> dict:
        """Job ``jid``; 404 for none."""
        with self._lock:
            job = self._jobs.get(jid)
        if job is None:
            raise ApiError(404, f"no job {jid!r}")
        return self._view(job, {f["id"] for f in source.request("faults")})

    def list(self, source: Source, parent_id: str | None = None) -> list[dict]:
        """Every job, or with ``parent_id`` the sub-jobs of that job (a reset has one,
        the port's: ufmctl ``pkg/ufm/actions.go`` polls ``jobs?parent_id=`` and reads
        ``[0].Status``); ``parent_id=null``: the top-level jobs."""
        faults = {f["id"] for f in source.request("faults")}
        with self._lock:
            jobs = list(self._jobs.values())
        if parent_id is None or parent_id == "null":
            return [self._view(j, faults) for j in jobs]
        job = next((j for j in jobs if j["ID"] == parent_id), None)
        if job is None:
            raise ApiError(404, f"no job {parent_id!r}")
        return [self._view(job, faults, sub=True)]
