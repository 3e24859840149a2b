"""The whole API app (``/metrics``, ``/ufmRest``..., ``/api/v1``, the page) fuzzed from
its own OpenAPI document with Schemathesis, in process, on a live ``lab`` fabric: no
500, no traceback in a body, every status and body as documented; once with no
credentials configured and once with them (sent right, and left out: then 401 for
every route but ``/healthz``)."""

from __future__ import annotations

import atexit
import base64
import shutil
import tempfile
from contextlib import ExitStack
from pathlib import Path

import pytest
import schemathesis
from api_fabric import api_fabric
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance
from starlette.testclient import TestClient

from fabriclab.api.auth import Auth

USER, PASSWORD = "admin", "fuzz-pass"
BASIC = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
OPEN_PATHS = {"/healthz"}


def _fabric():
    # Built at import: schemathesis's lazy (fixture) schemas do not run on pytest 9.
    stack = ExitStack()
    tmp = Path(tempfile.mkdtemp(prefix="fabriclab-fuzz-"))
    stack.callback(shutil.rmtree, tmp, True)
    fab = stack.enter_context(api_fabric(tmp))
    atexit.register(stack.close)
    return fab


FAB = _fabric()
OPEN_APP = FAB.app()
LOCKED_APP = FAB.app(Auth(users={USER: PASSWORD}))
# the event stream stays open as long as it is asked to (up to an hour): its own tests
# (tests/test_web_graph.py) read it with a bound
STREAMS = "/api/v1/events/stream"
fuzz_open = schemathesis.openapi.from_asgi("/openapi.json", OPEN_APP).exclude(path=STREAMS)
TOKEN = TestClient(LOCKED_APP).post("/ufmRest/app/tokens", headers={"Authorization": BASIC}).json()
fuzz_locked = schemathesis.openapi.from_asgi(
    "/openapi.json", LOCKED_APP, headers={"Authorization": BASIC}
).exclude(path=STREAMS)


def _no_traceback(response) -> None:
    body = response.text
    assert "Traceback" not in body and 'File "' not in body, body[:500]
    if response.status_code >= 400:
        assert response.json()["error"] and "\n" not in response.json()["error"]


# "valid data is accepted" does not hold where a well-formed request names what is not
# there (a port, an event, a job: 404; a fault's target, a scenario's line: 400) or asks
# what fabriclab does not carry out (an action other than reset, UNHEALTHY without
# isolate, advancing a wall clock: 400); every other check does.
NOT_ALWAYS_ACCEPTED = (
    "/actions",
    "/app/unhealthy_ports",
    "/api/v1/faults",
    "/api/v1/faults/up",
    "/api/v1/traffic",
    "/api/v1/scenarios",
    "/api/v1/clock/advance",
)


def _excluded(case) -> list:
    return [positive_data_acceptance] if case.path.endswith(NOT_ALWAYS_ACCEPTED) else []


@fuzz_open.parametrize()
@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
def test_fuzz_without_credentials_configured(case):
    response = case.call_and_validate(excluded_checks=_excluded(case))
    assert response.status_code < 500
    _no_traceback(response)


@fuzz_locked.parametrize()
@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
def test_fuzz_with_credentials(case):
    # /ufmRestV3 takes a token (sent as Basic), everything else the user's password
    v3 = case.path.startswith("/ufmRestV3")
    auth = f"Basic {TOKEN['access_token']}" if v3 else BASIC
    response = case.call_and_validate(
        headers={"Authorization": auth}, excluded_checks=_excluded(case)
    )
    assert response.status_code < 500
    _no_traceback(response)


def test_every_route_wants_credentials_when_configured():
    c = TestClient(LOCKED_APP)
    doc = TestClient(OPEN_APP).get("/openapi.json").json()
    for path, ops in doc["paths"].items():
        url = path.replace("{", "").replace("}", "")  # any value: refused before it is read
        for method in ops:
            r = c.request(method.upper(), url)
            if path in OPEN_PATHS:
                assert r.status_code < 400
                continue
            assert r.status_code == 401, (method, path, r.status_code)
            assert r.json()["error"]
            for bad in (
                "Basic " + base64.b64encode(b"admin:nope").decode(),
                "Basic !!",
                "Bearer x",
            ):
                assert (
                    c.request(method.upper(), url, headers={"Authorization": bad}).status_code
                    == 401
                )


def test_the_document_states_the_ufm_routes():
    doc = TestClient(OPEN_APP).get("/openapi.json").json()
    for prefix in ("/ufmRest", "/ufmRestV2", "/ufmRestV3"):
        for path, method, statuses in (
            ("/app/ufm_version", "get", {"200"}),
            ("/app/tokens", "post", {"200"}),
            ("/resources/systems", "get", {"200", "401"}),
            ("/resources/systems/{guid}", "get", {"200", "404"}),
            ("/resources/ports", "get", {"200", "422"}),
            ("/resources/ports/{name}", "get", {"200", "404"}),
            ("/resources/links", "get", {"200"}),
            ("/app/events", "get", {"200"}),
            ("/app/events/{event_id}", "get", {"200", "404"}),
            ("/app/events/external_event", "post", {"200", "413", "422"}),
            ("/app/alarms", "get", {"200"}),
            ("/app/unhealthy_ports", "get", {"200"}),
            ("/app/unhealthy_ports", "put", {"200", "400", "404", "413", "422"}),
            ("/actions", "post", {"202", "400", "404", "413", "422"}),
            ("/jobs", "get", {"200"}),
            ("/jobs/{job_id}", "get", {"200", "404"}),
        ):
            op = doc["paths"][prefix + path][method]
            assert statuses <= set(op["responses"]), (prefix + path, method, set(op["responses"]))
    schemas = doc["components"]["schemas"]
    assert set(schemas["UnhealthyPorts"]["properties"]) == {"ports", "ports_policy", "action"}
    assert schemas["ExternalEvent"]["properties"]["event_id"]["enum"] == [552, 553, 554]


@pytest.mark.parametrize(
    "body",
    [b"[" * 100_000, b'{"a":' * 50 + b"1" + b"}" * 50, b"-" + b"9" * 4301, b"\xff\xfe", b""],
)
def test_hostile_bodies_get_4xx(body):
    c = TestClient(OPEN_APP)
    for method, path in (
        ("POST", "/ufmRest/actions"),
        ("PUT", "/ufmRest/app/unhealthy_ports"),
        ("POST", "/ufmRestV3/app/events/external_event"),
    ):
        r = c.request(method, path, content=body, headers={"content-type": "application/json"})
        assert 400 <= r.status_code < 500, (path, body[:20], r.status_code, r.text)
        _no_traceback(r)
