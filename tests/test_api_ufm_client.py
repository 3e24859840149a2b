"""A UFM client's view: the requests the public UFM clients send, and the fields they
read, read the way their code reads them (re-stated here, nothing of theirs imported),
against the UFM-compatible API on a live ``lab`` fabric in this process.

The clients (github.com/Mellanox/ufm_sdk_3.0 at 3e96418e99b12096d7c5709e0a3a7e7049d2a55f,
github.com/rafalop/ufmctl at ac04ac09e4488c59a3fd290f7ba061407921dedf), each cited where
its access path is re-stated."""

from __future__ import annotations

import base64

import pytest
from api_fabric import api_fabric
from fastapi.testclient import TestClient

from fabriclab.api.auth import Auth

USER, PASSWORD = "admin", "123456"


@pytest.fixture(scope="module")
def fab(tmp_path_factory):
    with api_fabric(tmp_path_factory.mktemp("ufmclient")) as f:
        yield f


class SdkClient:
    """ufm_sdk_3.0 ``utils/ufm_rest_client.py`` UfmRestClient: ``<host>/<api_prefix>/
    <url>``, HTTP Basic under ``ufmRest``, or with a token ``Authorization: Basic
    <token>`` under ``ufmRestV3``."""

    def __init__(self, http: TestClient, token: str | None = None):
        self.http = http
        if token:
            self.prefix, self.headers = "ufmRestV3", {"Authorization": f"Basic {token}"}
        else:
            basic = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
            self.prefix, self.headers = "ufmRest", {"Authorization": f"Basic {basic}"}

    def send_request(self, url: str, method: str = "GET", payload=None):
        return self.http.request(
            method, f"/{self.prefix}/{url}", headers=self.headers, json=payload
        )

    def get_systems(self):  # UFM_API_SYSTEMS = 'resources/systems'
        return self.send_request("resources/systems").json()

    def get_links(self):
        # UFM_API_LINKS = 'resources/links?page_number=1&rpp=1000000000', then .get("data")
        return self.send_request("resources/links?page_number=1&rpp=1000000000").json().get("data")

    def get_ports(self):  # UFM_API_PORTS = 'resources/ports'
        return self.send_request("resources/ports").json()

    def generate_token(self):  # UFM_API_TOKEN = 'app/tokens', POST, .get("access_token")
        return self.send_request("app/tokens", "POST").json().get("access_token")


@pytest.fixture(scope="module")
def sdk(fab):
    return SdkClient(TestClient(fab.app(Auth(users={USER: PASSWORD}))))


def test_rest_client_token_then_v3(sdk):
    token = sdk.generate_token()
    assert isinstance(token, str) and token
    v3 = SdkClient(sdk.http, token)
    assert v3.get_systems() == sdk.get_systems()
    assert v3.get_links() == sdk.get_links()


def test_topology_export_reads_systems_and_links(sdk):
    """scripts/ufm_topology/ufm_topology.py: ``get_systems()`` / ``get_links()``; a node
    is written from ``node.get("guid")``, ``node.get("system_name")`` and its attributes
    ``system_name``, ``severity``, ``guid``, ``ip``, ``type`` (strings); an edge from
    ``link.get("name")``, ``link.get("source_guid")``, ``link.get("destination_guid")``,
    which must be nodes' ``guid``."""
    nodes = sdk.get_systems()
    links = sdk.get_links()
    assert nodes and links
    for node in nodes:
        for attr in ("system_name", "severity", "guid", "ip", "type"):
            assert isinstance(node.get(attr), str) and node.get(attr), attr
    guids = {node.get("guid") for node in nodes}
    for link in links:
        assert isinstance(link.get("name"), str)
        assert link.get("source_guid") in guids and link.get("destination_guid") in guids


def test_load_ports_and_links_scripts(sdk, fab):
    """scripts/ufm_ports/load_ports.py: ``resources/ports?active={active}&show_disabled=
    {show_disabled}[&system=]`` with Python's ``True``/``False``; scripts/ufm_links/
    load_links.py: ``resources/links?cable_info={..}&monitoring_counters_info={..}
    [&system=]``; both keep ``response.json()`` when the status is 200."""
    r = sdk.send_request("resources/ports?active=True&show_disabled=False")
    assert r.status_code == 200 and r.json()
    assert all(p["logical_state"] == "Active" for p in r.json())
    leaf = next(s for s in sdk.get_systems() if s["system_name"] == "LAB-IBLEAF-01")
    r = sdk.send_request(f"resources/ports?active=True&show_disabled=False&system={leaf['guid']}")
    assert r.status_code == 200 and {p["systemID"] for p in r.json()} == {leaf["guid"]}
    r = sdk.send_request("resources/links?cable_info=True&monitoring_counters_info=False")
    assert r.status_code == 200 and len(r.json()) == len(sdk.get_links())
    r = sdk.send_request(
        f"resources/links?cable_info=True&monitoring_counters_info=False&system={leaf['guid']}"
    )
    assert r.status_code == 200 and r.json()


def test_events_script(sdk, fab):
    """scripts/ufm_events/ufm_events.py: ``app/events`` (GET, the JSON kept);
    ``app/events/<id>`` DELETE is not carried out: a clear 405."""
    fab.live.fault("down", "LAB-IBLEAF-01[11]")
    fab.live.clear()
    events = sdk.send_request("app/events").json()
    assert isinstance(events, list) and events
    for e in events:
        assert isinstance(e["id"], int) and isinstance(e["severity"], str)
        assert isinstance(e["description"], str) and isinstance(e["timestamp"], str)
    r = sdk.send_request(f"app/events/{events[0]['id']}", "DELETE")
    assert r.status_code == 405 and r.json()["error"]


def test_pdr_plugin_view(fab):
    """plugins/pdr_deterministic_plugin/ufm_sim_web_service: the plugin calls the API
    with ``X-Remote-User: ufmsystem`` (ufm_communication_mgr.py; no credentials here) and
    reads, from ``GET /resources/ports?active=true`` (constants.py
    GET_ACTIVE_PORTS_REST), each port's ``name``, ``active_speed``, ``systemID``,
    ``peer``, ``description`` (``"Computer IB Port" in``), ``external_number``,
    ``active_width`` (``int(width.strip('x'))``) (isolation_mgr.py); a port's
    ``GET /resources/ports/ <name>`` (with the space it sends) ``[0]``'s
    ``active_speed`` and ``active_width`` (pdr_algorithm.py get_port_metadata); it
    isolates with ``PUT /app/unhealthy_ports`` and resets with ``POST /actions``, and
    logs ``POST /app/events/external_event`` (ufm_communication_mgr.py)."""
    http = TestClient(fab.app())
    headers = {"X-Remote-User": "ufmsystem"}

    def get(uri):
        r = http.get("/ufmRest" + uri, headers=headers)
        return r.json() if r.status_code == 200 else None

    meta = get("/resources/ports?active=true")
    assert meta
    for port in meta:
        assert isinstance(port.get("name"), str) and isinstance(port.get("systemID"), str)
        assert isinstance(port.get("active_speed"), str) and isinstance(port.get("peer"), str)
        assert isinstance(port.get("description"), str)
        if "Computer IB Port" not in port.get("description"):
            assert isinstance(port.get("external_number"), int)
        assert int(port.get("active_width").strip("x")) == 4
    host_port = next(p for p in meta if "Computer IB Port" in p["description"])
    one = get(f"/resources/ports/ {host_port['name']}")
    assert one[0].get("active_speed") == "NDR" and int(one[0].get("active_width").strip("x")) == 4

    def send(uri, data, method="POST"):
        return http.request(method, "/ufmRest" + uri, json=data, headers=headers)

    switch_port = next(
        p for p in meta if p["description"] == "Switch IB Port" and p["peer"] != "N/A"
    )
    name = switch_port["name"]
    # isolate_port / deisolate_port
    r = send(
        "/app/unhealthy_ports",
        {"ports": [name], "ports_policy": "UNHEALTHY", "action": "isolate"},
        "PUT",
    )
    assert r.status_code == 200
    assert name not in {p["name"] for p in get("/resources/ports?active=true")}
    r = send("/app/unhealthy_ports", {"ports": [name], "ports_policy": "HEALTHY"}, "PUT")
    assert r.status_code == 200 and fab.live.faults() == []
    # reset_port: object_ids the port's systemID
    data = {
        "params": {"port_id": name},
        "action": "reset",
        "object_ids": [switch_port["systemID"]],
        "object_type": "System",
        "description": "",
        "identifier": "id",
    }
    r = send("/actions", data)
    assert r.status_code == 202
    fab.live.advance(5)
    # send_event(message, event_id=EXTERNAL_EVENT_ALERT, external_event_name="Isolating Port")
    data = {
        "event_id": 553,
        "description": f"Isolated port: {name}",
        "external_event_name": "Isolating Port",
        "external_event_type": "PDR Plugin Event",
        "external_event_source": "PDR Plugin",
    }
    assert send("/app/events/external_event", data).status_code == 200
    assert get("/app/events?severity=Warning")[-1]["description"].startswith(
        f"Isolated port: {name}"
    )


def test_batch_isolate_and_ufmctl_jobs(fab):
    """scripts/batch_isolate_devices/batch_isolate_devices.py: ``POST /ufmRest/actions``
    must answer 202, the job id is ``response.headers['Location'].split('/')[-1]``,
    ``GET /ufmRest/jobs/<id>`` ``.json()['Status'] == 'Completed'``; it then waits on
    ``GET /ufmRest/app/unhealthy_ports``, each ``['PeerGUID']`` and ``['PeerPortDname']``.
    rafalop/ufmctl pkg/ufm/actions.go: ``POST /ufmRestV2/actions`` with its token as
    ``Basic`` (pkg/ufm/ufm.go AddAuth), the job id the last part of ``Location``, then
    ``jobs?parent_id=<id>`` until ``Array()[0].Get("Status") == "Completed"``."""
    http = TestClient(fab.app(Auth(users={USER: PASSWORD})))
    basic = {"Authorization": "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()}
    ports = http.get("/ufmRest/resources/ports?active=true", headers=basic).json()
    port = next(p for p in ports if p["description"] == "Switch IB Port" and p["peer"] != "N/A")
    # batch_isolate_devices.py: /ufmRest, HTTP Basic
    r = http.post(
        "/ufmRest/actions",
        json={"action": "reset", "params": {"port_id": port["name"]}},
        headers=basic,
    )
    assert r.status_code == 202
    job_id = r.headers["Location"].split("/")[-1]
    fab.live.advance(5)
    assert http.get(f"/ufmRest/jobs/{job_id}", headers=basic).json()["Status"] == "Completed"
    # ufmctl: /ufmRestV2 with its token sent as Basic (pkg/ufm/ufm.go AddAuth); the
    # get_cables_info payload shape, action reset
    token = http.post("/ufmRest/app/tokens", headers=basic).json()["access_token"]
    v2 = {"Authorization": f"Basic {token}"}
    payload = {
        "params": {"port_id": port["name"]},
        "action": "reset",
        "object_ids": [port["name"].split("_")[0]],
        "object_type": "System",
        "description": "",
        "identifier": "id",
    }
    r = http.post("/ufmRestV2/actions", json=payload, headers=v2)
    assert r.status_code == 202 and r.headers["Location"].startswith("/ufmRestV2/jobs/")
    job_id = r.headers["Location"].split("/")[-1]
    assert (
        http.get(f"/ufmRestV2/jobs?parent_id={job_id}", headers=v2).json()[0]["Status"]
        != "Completed"
    )
    fab.live.advance(5)
    assert (
        http.get(f"/ufmRestV2/jobs?parent_id={job_id}", headers=v2).json()[0]["Status"]
        == "Completed"
    )
    http = TestClient(fab.app())
    body = {"ports": [port["peer"]], "ports_policy": "UNHEALTHY", "action": "isolate"}
    assert http.put("/ufmRest/app/unhealthy_ports", json=body).status_code == 200
    try:
        unhealthy = http.get("/ufmRest/app/unhealthy_ports").json()
        switch_guid = port["name"].split("_")[0]
        assert [(u["PeerGUID"], u["PeerPortDname"]) for u in unhealthy] == [
            (switch_guid, port["dname"])
        ]
    finally:
        fab.live.clear()


@pytest.fixture
def served(fab):
    """The API on a real socket (uvicorn on 127.0.0.1, a port of its own), with
    credentials configured: what a UFM client on another process reaches."""
    import socket
    import threading

    import uvicorn
    from helpers import wait_for

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(fab.app(Auth(users={USER: PASSWORD})), log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, 30, "uvicorn started")
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


def test_over_a_real_socket(served, fab):
    """The SDK's requests over HTTP: Basic credentials, a token under ``/ufmRestV3``, the
    reset's ``Location`` and job, and a body streamed without a length past the bound
    (413, JSON) and wrong credentials (401, JSON)."""
    import httpx

    with httpx.Client(base_url=served, auth=(USER, PASSWORD), timeout=30) as http:
        assert http.get("/ufmRest/app/ufm_version").json()["ufm_release_version"]
        token = http.post("/ufmRest/app/tokens").json()["access_token"]
        v3 = {"Authorization": f"Basic {token}"}
        systems = httpx.get(f"{served}/ufmRestV3/resources/systems", headers=v3, timeout=30).json()
        assert {s["type"] for s in systems} == {"switch", "host"}
        links = http.get("/ufmRest/resources/links?page_number=1&rpp=1000000000").json()["data"]
        assert len(links) == len(fab.source.layout().links)
        port = next(
            p
            for p in http.get("/ufmRest/resources/ports?active=true").json()
            if p["dname"] == "1/6/2"
        )
        r = http.post(
            "/ufmRest/actions", json={"action": "reset", "params": {"port_id": port["name"]}}
        )
        assert r.status_code == 202 and r.content == b""
        job = r.headers["Location"]
        assert http.get(job).json()["Status"] == "Running"
        fab.live.advance(5)
        assert http.get(job).json()["Status"] == "Completed"

        def chunks():
            yield b'{"event_id": 552, "description": "'
            for _ in range(64):
                yield b"z" * 65536
            yield b'"}'

        r = http.post(
            "/ufmRest/app/events/external_event",
            content=chunks(),
            headers={"content-type": "application/json"},
        )
        assert r.status_code == 413 and "over the limit" in r.json()["error"]
    r = httpx.get(f"{served}/ufmRest/resources/ports", auth=(USER, "wrong"), timeout=30)
    assert (
        r.status_code == 401
        and r.json()["error"]
        and r.headers["www-authenticate"].startswith("Basic")
    )
