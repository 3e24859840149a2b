"""fabriclab's own API (/api/v1) in-process: each route does what its admin request
does, and every wrong request is a clear 4xx with a one-line JSON error, never a 500."""

from __future__ import annotations

import pytest
from api_fabric import api_fabric
from fastapi.testclient import TestClient

from fabriclab.api.auth import Auth
from fabriclab.api.bodylimit import MAX_BODY_BYTES

LINK = "LAB-IBLEAF-01[5]"


@pytest.fixture(scope="module")
def fab(tmp_path_factory):
    with api_fabric(tmp_path_factory.mktemp("state")) as f:
        yield f


@pytest.fixture
def client(fab):
    with TestClient(fab.app()) as c:
        yield c
    fab.reset()


def one_line_error(r, status: int) -> str:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and "\n" not in body["error"] and body["error"], body
    return body["error"]


def test_a_fault_injected_listed_and_cleared_is_the_fabrics(fab, client):
    r = client.post("/api/v1/faults", json={"kind": "down", "target": LINK})
    assert r.status_code == 201, r.text
    fault = r.json()
    assert fault["kind"] == "down" and fault["target"] == LINK
    assert [f["id"] for f in fab.live.faults()] == [fault["id"]]
    assert [f["id"] for f in client.get("/api/v1/faults").json()] == [fault["id"]]
    ev = client.get("/api/v1/events").json()
    assert ev[-1]["name"] == "Link went down" and LINK in ev[-1]["object_name"]
    since = ev[-1]["id"]
    assert client.delete(f"/api/v1/faults/{fault['id']}").json() == {"cleared": [fault["id"]]}
    assert fab.live.faults() == []
    assert [e["name"] for e in client.get(f"/api/v1/events?since={since}").json()] == ["Link is up"]


def test_up_brings_a_link_back(fab, client):
    client.post("/api/v1/faults", json={"kind": "down", "target": LINK})
    r = client.post("/api/v1/faults/up", json={"target": LINK})
    assert r.status_code == 200 and len(r.json()["cleared"]) == 1
    assert fab.live.faults() == []


def test_wrong_requests_are_one_line_4xx(client):
    assert "NOPE" in one_line_error(
        client.post("/api/v1/faults", json={"kind": "down", "target": "NOPE"}), 400
    )
    one_line_error(client.post("/api/v1/faults", json={"kind": "melt", "target": LINK}), 422)
    one_line_error(client.post("/api/v1/faults", json={"target": LINK}), 422)
    extra = {"kind": "down", "target": LINK, "color": "red"}
    assert "color" in one_line_error(client.post("/api/v1/faults", json=extra), 422)
    assert "no such fault" in one_line_error(client.delete("/api/v1/faults/4242"), 404)
    one_line_error(client.delete("/api/v1/faults/99999999999999999999999"), 404)
    bad = client.post(
        "/api/v1/faults", content=b'{"kind": "down",', headers={"content-type": "application/json"}
    )
    assert "not valid JSON" in one_line_error(bad, 400)
    opts = {"kind": "flap", "target": LINK, "options": {"colour": 1}}
    assert "colour" in one_line_error(client.post("/api/v1/faults", json=opts), 422)


def test_a_body_over_the_bound_is_413_before_it_is_read(client):
    big = b"x" * (MAX_BODY_BYTES + 1)
    r = client.post("/api/v1/scenarios", content=big, headers={"content-type": "application/json"})
    one_line_error(r, 413)


def test_traffic_and_the_virtual_clock(fab, client):
    r = client.post(
        "/api/v1/traffic",
        json={"verb": "ring", "args": ["sched-worker[1-2]"], "options": {"rate": "1GB/s"}},
    )
    assert r.status_code == 200, r.text
    n = r.json()["count"]
    assert n >= 2
    listing = client.get("/api/v1/traffic?state=running&limit=1").json()
    assert len(listing["flows"]) == 1 and listing["more"] == n - 1, listing
    before = client.get("/api/v1/clock").json()["now"]
    assert client.post("/api/v1/clock/advance", json={"seconds": "2s"}).json() == {
        "now": before + 2
    }
    assert client.post("/api/v1/traffic", json={"verb": "stop"}).json()["count"] == n


def test_spec_and_stats(fab, client):
    spec = client.get("/api/v1/spec").json()
    assert spec["cluster"] == "lab" and spec["trays"] == ["sched-worker1", "sched-worker2"]
    assert spec["switches"] == 2 and spec["cas"] == 8 and spec["links"] == 12
    assert "mads" in client.get("/api/v1/stats").json()


def test_credentials_when_configured(fab):
    with TestClient(fab.app(Auth({"ops": "s3cret"}))) as c:
        r = c.get("/api/v1/spec")
        assert "Basic" in r.headers.get("www-authenticate", "")
        one_line_error(r, 401)
        one_line_error(c.get("/api/v1/spec", auth=("ops", "wrong")), 401)
        one_line_error(c.get("/api/v1/spec", headers={"Authorization": "Basic !!!"}), 401)
        assert c.get("/api/v1/spec", auth=("ops", "s3cret")).status_code == 200
        assert c.get("/healthz").text == "OK"
