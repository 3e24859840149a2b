"""The UFM-compatible routes, one router mounted under each UFM prefix
(the paths as NVIDIA's UFM Enterprise REST API guide and the public clients use them:
ufm_sdk_3.0 ``utils/ufm_rest_client.py``, its ``scripts/`` and plugins,
``rafalop/ufmctl``), every answer and error stated in the OpenAPI document, every
request body bounded (:mod:`..bodylimit`)."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request, Response

from ..bodylimit import MAX_BODY_BYTES
from ..errors import ApiError
from ..source import Source
from . import actions, events, models
from .records import Records

UFM_VERSION = "6.14.5-2"  # the release the subset follows (NVIDIA "Version REST API")
JSON = "application/json"
STATE_MAX_AGE = 1.0  # seconds a state read serves later requests
Flag = Annotated[bool | None, Query()]
Name = Annotated[str | None, Query(max_length=256)]


def _errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    why = {
        400: "the request cannot be carried out (the fabric's answer)",
        401: "credentials wanted (configured with --credentials)",
        404: "no such object",
        413: f"request body over {MAX_BODY_BYTES} bytes",
        422: "malformed JSON, or a field or parameter of the wrong form",
        503: "the fabric is not up",
    }
    return {c: {"model": models.Error, "description": why[c]} for c in (401, 503, *codes)}


def _json(content: str, model: type, many: bool = True) -> dict[int | str, dict[str, Any]]:
    return {200: {"model": list[model] if many else model, "description": content}}  # type: ignore[valid-type]


class Ufm:
    """What the routes share: the fabric, its records (made once per layout) and the
    jobs."""

    def __init__(self, source: Source):
        self.source = source
        self.jobs = actions.Jobs()

    def records(self) -> Records:
        return self.source.derived(Records)

    def now(self):
        """The records, the state (at most a second old) and the faults in force."""
        rec = self.records()
        return rec, self.source.state(max_age=STATE_MAX_AGE), self.source.request("faults")

    def changed(self) -> None:
        """After a change made here, read the state afresh: a client that isolates a
        port and lists the ports sees it down."""
        self.source.state(max_age=0.0)


def _raw(text: str | bytes, status: int = 200) -> Response:
    body = text.encode() if isinstance(text, str) else text
    return Response(body, status_code=status, media_type=JSON)


def _prefix(request: Request) -> str:
    return "/" + request.url.path.lstrip("/").split("/", 1)[0]


def router(ufm: Ufm) -> APIRouter:
    """The routes, to be mounted under each prefix."""
    r = APIRouter(tags=["UFM"])

    @r.get("/app/ufm_version", response_model=models.Version, responses=_errors())
    def ufm_version() -> dict:
        """The UFM release whose REST API this follows."""
        return {"ufm_release_version": UFM_VERSION}

    @r.post("/app/tokens", response_model=models.Token, responses=_errors())
    def tokens(request: Request) -> dict:
        """A new access token for the user who asks (send it to ``/ufmRestV3`` as
        ``Authorization: Basic <token>``)."""
        return request.app.state.auth.issue(request.state.user)

    @r.get("/resources/systems", responses={**_json("the systems", models.System), **_errors()})
    def systems(
        type: Name = None,
        role: Name = None,
        model: Name = None,
        ip: Name = None,
        ports: Flag = None,
        brief: Flag = None,
    ) -> Response:
        """Every system (a switch, or a host's HCA by its system GUID); filters ``type``
        (switch, host), ``role`` (core, tor, endpoint), ``model``, ``ip``; ``ports=true``
        adds each system's port names; ``brief=true`` keeps guid, name, system_name,
        type, role, ip and severity."""
        rec, state, faults = ufm.now()
        keep = [
            g
            for g, h in rec.system_heads.items()
            if (type is None or h["type"] == type.lower())
            and (role is None or h["role"] == role.lower())
            and (model is None or h["model"].lower() == model.lower())
            and (ip is None or h["ip"] == ip)
        ]
        alarms = events.alarm_counts(ufm.source, rec)
        out = rec.systems_list(state, faults, alarms, keep, bool(ports), bool(brief))
        return _raw(json.dumps(out, separators=(",", ":")))

    @r.get(
        "/resources/systems/{guid}",
        responses={**_json("the system", models.System, many=False), **_errors(404)},
    )
    def system(guid: str) -> Response:
        """One system by its GUID (UFM's system ``name``), with its port names."""
        rec, state, faults = ufm.now()
        g = guid.lower().removeprefix("0x")
        if g not in rec.system_heads:
            raise ApiError(404, f"no system {guid!r}")
        alarms = events.alarm_counts(ufm.source, rec)
        return _raw(json.dumps(rec.systems_list(state, faults, alarms, [g])[0]))

    @r.get("/resources/ports", responses={**_json("the ports", models.Port), **_errors()})
    def ports(
        system: Name = None,
        active: Flag = None,
        high_ber_only: Flag = None,
        show_disabled: Flag = None,
        cable_info: Flag = None,
    ) -> Response:
        """Every numbered port (filters: ``system`` a system GUID or name, ``active``,
        ``high_ber_only``, ``show_disabled=false``; ``cable_info`` is taken and adds
        nothing: fabriclab has no cables' EEPROMs)."""
        rec, state, faults = ufm.now()
        rows = rec.port_rows(
            state, faults, system, active, bool(high_ber_only), show_disabled is not False
        )
        return _raw(rec.ports_json(rows, state, faults))

    @r.get(
        "/resources/ports/{name}",
        responses={**_json("a list of the one port", models.Port), **_errors(404)},
    )
    def port(name: str) -> Response:
        """One port by its UFM name ``<node guid>_<port>``, in a list (as UFM answers)."""
        rec, state, faults = ufm.now()
        return _raw(rec.ports_json([actions.port_row(rec, name)], state, faults))

    @r.get(
        "/resources/links",
        responses={
            200: {
                "description": "the links (with page_number or rpp: one page, under data)",
                "content": {
                    JSON: {
                        "schema": {
                            "anyOf": [
                                {"type": "array", "items": {"$ref": "#/components/schemas/Link"}},
                                {"$ref": "#/components/schemas/LinkPage"},
                            ]
                        }
                    }
                },
            },
            **_errors(),
        },
    )
    def links(
        system: Name = None,
        page_number: Annotated[int | None, Query(ge=1, le=1 << 31)] = None,
        rpp: Annotated[int | None, Query(ge=1, le=1 << 31)] = None,
        cable_info: Flag = None,
        monitoring_counters_info: Flag = None,
    ) -> Response:
        """Every link once, UFM's 14-key record (filter ``system``); ``page_number`` and
        ``rpp`` (rows per page) answer one page as ``{"data": [...], "page_number",
        "rpp", "total"}``, as ufm_sdk_3.0's ``get_links`` asks and reads it."""
        rec, state, faults = ufm.now()
        idx = rec.link_indexes(system)
        if page_number is None and rpp is None:
            return _raw(rec.links_json(idx, state, faults))
        page, per = page_number or 1, rpp or 100
        chunk = idx[(page - 1) * per : page * per]
        body = rec.links_json(chunk, state, faults)
        return _raw(f'{{"data":{body},"page_number":{page},"rpp":{per},"total":{len(idx)}}}')

    @r.get(
        "/app/events", responses={**_json("the events, oldest first", models.Event), **_errors()}
    )
    def events_list(
        object_name: Name = None,
        severity: Name = None,
        category: Name = None,
        type: Name = None,
        event_type: Name = None,
        name: Name = None,
    ) -> list[dict]:
        """The fabric's events the filters keep (each: the field equals it, case ignored;
        ``object_name`` also matches a part of one)."""
        f = {"object_name": object_name, "severity": severity, "category": category}
        f |= {"type": type, "event_type": event_type, "name": name}
        return events.events(ufm.source, f)

    @r.get(
        "/app/events/{event_id:int}",
        responses={**_json("the event", models.Event, many=False), **_errors(404)},
    )
    def event(event_id: Annotated[int, Path(ge=1, le=1 << 62)]) -> dict:
        """One event by id."""
        return events.event(ufm.source, event_id)

    @r.post(
        "/app/events/external_event",
        responses={
            **_json("the event logged (or held)", models.Logged, many=False),
            **_errors(400, 413, 422),
        },
    )
    def external_event(body: models.ExternalEvent) -> dict:
        """Log an external event (552 notice: Info, 553 alert: Warning, 554 error:
        Critical) in the fabric's event log: the event, or ``{"held": true, ...}`` when
        a burst of like events is being coalesced into one."""
        return events.external_event(ufm.source, body)

    @r.get(
        "/app/alarms", responses={**_json("an alarm per fault in force", models.Alarm), **_errors()}
    )
    def alarms(device_id: Name = None) -> list[dict]:
        """The alarms: one per fault in force (``device_id``: on that system GUID)."""
        rec, state, _ = ufm.now()
        return events.alarms(ufm.source, rec, state.now, device_id)

    @r.get(
        "/app/unhealthy_ports",
        responses={**_json("the unhealthy ports", models.Unhealthy), **_errors()},
    )
    def unhealthy_ports() -> list[dict]:
        """Every port a ``down`` fault holds (isolated here, or by a fabriclab fault)."""
        rec, state, _ = ufm.now()
        return actions.unhealthy(ufm.source, rec, state.now)

    @r.get(
        "/app/unhealthy_ports/{name}",
        responses={**_json("the port", models.Unhealthy, many=False), **_errors(404)},
    )
    def unhealthy_port(name: str) -> dict:
        """One unhealthy port by its UFM name."""
        rec, state, _ = ufm.now()
        row = actions.port_row(rec, name)
        for u in actions.unhealthy(ufm.source, rec, state.now):
            if rec.layout.row_by_name[u["UnhealthyPort"]] == row:
                return u
        raise ApiError(404, f"port {name} is not unhealthy")

    @r.put(
        "/app/unhealthy_ports",
        responses={
            **_json("what was done", models.HealthChange, many=False),
            **_errors(400, 404, 413, 422),
        },
    )
    def set_unhealthy(body: models.UnhealthyPorts) -> dict:
        """Mark ports UNHEALTHY (``"action": "isolate"``: the port's link goes down) or
        HEALTHY (brought up again)."""
        done = actions.set_health(
            ufm.source, ufm.records(), body.ports, body.ports_policy, body.action
        )
        ufm.changed()
        return done

    @r.post(
        "/actions",
        status_code=202,
        responses={
            202: {"description": "started: the job in the Location header"},
            **_errors(400, 404, 413, 422),
        },
        response_class=Response,
    )
    def action(body: models.Action, request: Request) -> Response:
        """Start an action: ``reset`` (``params.port_id``: the port's link down and up
        again); answered 202 with ``Location: <prefix>/jobs/<id>``."""
        if body.action != "reset":
            raise ApiError(
                400, f'unsupported action {body.action!r}: fabriclab carries out "reset"'
            )
        if not body.params.port_id:
            raise ApiError(400, "action reset wants params.port_id (<node guid>_<port>)")
        jid = ufm.jobs.reset(ufm.source, ufm.records(), body.params.port_id, request.state.user)
        ufm.changed()
        return Response(status_code=202, headers={"Location": f"{_prefix(request)}/jobs/{jid}"})

    @r.get("/jobs", responses={**_json("the jobs", models.Job), **_errors(404)})
    def jobs(parent_id: Name = None) -> list[dict]:
        """The jobs (``parent_id``: that job's sub-jobs; ``null``: the top-level ones)."""
        return ufm.jobs.list(ufm.source, parent_id)

    @r.get("/jobs/{job_id}", responses={**_json("the job", models.Job, many=False), **_errors(404)})
    def job(job_id: Annotated[str, Path(max_length=64)]) -> dict:
        """One job: ``Status`` Running, then Completed."""
        return ufm.jobs.get(ufm.source, job_id)

    return r
