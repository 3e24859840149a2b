"""UFM's events and alarms from the fabric: ``app/events`` is the fabric's event log
(already in UFM's fields, docs/protocol.md "The event log") filtered as UFM filters it;
``app/events/external_event`` writes an event through the admin op ``event``;
``app/alarms`` are the faults in force, one alarm each, with UFM's alarm keys (NVIDIA
"Alarms REST API": id, name, type, event_type, event_count, severity, timestamp,
related_object_name, related_object_path, reason, summary, duration, counter)."""

from __future__ import annotations

import time
from typing import Any

from ..errors import ApiError
from ..source import Source
from .records import Records

# UFM's external events (ufm_sdk_3.0 plugins/pdr_deterministic_plugin/
# ufm_sim_web_service/constants.py: EXTERNAL_EVENT_NOTICE 552, _ALERT 553, _ERROR 554);
# the severity each gets follows those names (UFM's own table was not available).
EXTERNAL_EVENTS = {552: "Info", 553: "Warning", 554: "Critical"}
EVENT_FILTERS = ("object_name", "severity", "category", "type", "event_type", "name")

# an alarm for each fault kind: (event_type, name, severity), the event the fault logs
# (fabriclab.sim.live.events; 130 and 916 are UFM's own numbers, docs/live.md)
ALARM_OF = {
    "down": (9001, "Link went down", "Critical"),
    "flap": (9017, "Link flapping", "Warning"),
    "degrade": (130, "Non-optimal link width", "Minor"),
    "errors": (916, "High BER reported", "Warning"),
    "drop": (9011, "MAD drop rate set", "Warning"),
    "nvlink": (9014, "NVLink fault", "Critical"),
}
NODE_DOWN = {"switch": (9003, "Switch is down"), "ca": (9005, "Computer is down")}
ALARM_TYPE = 55  # UFM's alarm "type" as its Alarms REST API example shows it


def events(source: Source, filters: dict[str, str | None]) -> list[dict[str, Any]]:
    """The fabric's events the filters keep (each filter: the field equals it, case
    ignored; ``object_name`` also matches a part of a fabriclab object name, so that a
    port or a switch finds the links it is on), oldest first."""
    want = {k: v.lower() for k, v in filters.items() if v is not None}
    out = []
    for e in source.events():
        ok = True
        for k, v in want.items():
            have = str(e.get(k, "")).lower()
            if have != v and not (k == "object_name" and v in have):
                ok = False
                break
        if ok:
            out.append(e)
    return out


def event(source: Source, event_id: int) -> dict[str, Any]:
    """One event by id; 404 when there is none."""
    for e in source.events(since=event_id - 1):
        if int(e.get("id", 0)) == event_id:
            return e
        break
    raise ApiError(404, f"no event {event_id}")


def external_event(source: Source, body: Any) -> dict[str, Any]:
    """Log UFM's external event ``body`` (ExternalEvent) through the admin op ``event``."""
    severity = EXTERNAL_EVENTS[body.event_id]
    desc = body.description
    extra = [x for x in (body.external_event_type, body.external_event_source) if x]
    if extra:
        desc = f"{desc} ({', '.join(extra)})" if desc else ", ".join(extra)
    fields: dict[str, Any] = {
        "event_type": body.event_id,
        "name": body.external_event_name or "External Event",
        "severity": severity,
        "category": "External",
        "description": desc,
    }
    if body.object_name:
        fields["object_name"] = body.object_name
    return source.request("event", **fields)


def alarms(
    source: Source, records: Records, now: float, device_id: str | None = None
) -> list[dict]:
    """An alarm for each fault in force (``device_id``: only those on that system
    GUID), its id the fault's."""
    faults = source.request("faults")
    wall = time.time()
    want = device_id.lower().removeprefix("0x") if device_id else None
    evs = source.events() if faults else []
    out = []
    for f in faults:
        target = str(f.get("target", ""))
        nodes = records.target_nodes(target)
        systems = sorted({records.system_of_node(i) for i in nodes})
        if want is not None and want not in systems:
            continue
        kind = str(f.get("kind", ""))
        etype, name, severity = ALARM_OF.get(kind, (0, kind, "Warning"))
        if kind == "down" and "[" not in target and nodes:
            etype, name = NODE_DOWN[records.layout.nodes["kind"][nodes[0]]]
        since = float(f.get("since", now))
        count = sum(1 for e in evs if target and target in str(e.get("object_name", "")))
        out.append(
            {
                "id": f["id"],
                "name": name,
                "type": ALARM_TYPE,
                "event_type": etype,
                "event_count": max(count, 1),
                "severity": severity,
                "timestamp": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(wall - (now - since))),
                "related_object_name": target,
                "related_object_path": f"default / {target}",
                "related_systems": systems,
                "reason": f"fault {f['id']}: {kind} {target}",
                "summary": f"{name}: {target}",
                "duration": round(max(now - since, 0.0), 3),
                "counter": "N/A",
            }
        )
    return out


def alarm_counts(source: Source, records: Records) -> dict[str, int]:
    """Alarms (faults in force) per system GUID, without reading the event log."""
    out: dict[str, int] = {}
    for f in source.request("faults"):
        for g in {
            records.system_of_node(i) for i in records.target_nodes(str(f.get("target", "")))
        }:
            out[g] = out.get(g, 0) + 1
    return out
