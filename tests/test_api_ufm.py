"""The UFM-compatible REST API on a live fabric in this process: each resource's fields
and types, isolation through ``app/unhealthy_ports`` reaching the fabric, a reset job
run to Completed, events and their filters, external events, alarms, tokens under
``/ufmRestV3``, and the clear 4xx answers (malformed JSON, unknown ids, huge bodies,
credentials)."""

from __future__ import annotations

import base64
import re

import pytest
from api_fabric import api_fabric
from fastapi.testclient import TestClient

from fabriclab.api.auth import Auth

LEAF_PORT = "LAB-IBLEAF-01[5]"  # cabled to sched-worker2/mlx5_0[1]
PREFIXES = ("/ufmRest", "/ufmRestV2", "/ufmRestV3")


@pytest.fixture(scope="module")
def fab(tmp_path_factory):
    with api_fabric(tmp_path_factory.mktemp("ufm")) as f:
        yield f


@pytest.fixture(scope="module")
def client(fab):
    return TestClient(fab.app())


def port_name(fab, target: str) -> str:
    """UFM's name of the port fabriclab calls ``target``."""
    layout = fab.source.layout()
    node, num = re.match(r"^(.+)\[(\d+)\]$", target).groups()
    i = layout.nodes["name"].index(node)
    return f"{layout.nodes['guid'][i]}_{num}"


def by_name(records: list[dict]) -> dict[str, dict]:
    return {r["name"]: r for r in records}


def test_version_on_both_prefixes(client):
    for p in PREFIXES:
        r = client.get(f"{p}/app/ufm_version")
        assert r.status_code == 200
        assert re.fullmatch(r"\d+\.\d+\.\d+-\d+", r.json()["ufm_release_version"])


def test_ports_fields_and_values(fab, client):
    ports = client.get("/ufmRest/resources/ports").json()
    layout = fab.source.layout()
    # every numbered port, once
    assert len(ports) == int((layout.port_num > 0).sum())
    assert len({p["name"] for p in ports}) == len(ports)
    p = by_name(ports)[port_name(fab, LEAF_PORT)]
    types = {
        "name": str,
        "guid": str,
        "systemID": str,
        "system_name": str,
        "number": int,
        "external_number": int,
        "dname": str,
        "description": str,
        "physical_state": str,
        "logical_state": str,
        "active_speed": str,
        "active_width": str,
        "enabled_speed": list,
        "supported_width": list,
        "lid": int,
        "mtu": int,
        "severity": str,
        "tier": int,
        "path": str,
        "node_description": str,
        "peer": str,
        "peer_guid": str,
        "peer_lid": int,
        "peer_node_guid": str,
        "peer_node_name": str,
        "peer_node_description": str,
        "peer_port_dname": str,
        "module": str,
        "mirror": str,
        "capabilities": list,
        "high_ber_severity": str,
    }
    for k, t in types.items():
        assert isinstance(p[k], t), (k, p[k])
    assert p["physical_state"] == "Link Up" and p["logical_state"] == "Active"
    assert p["active_width"] == "4x" and p["active_speed"] == "NDR"
    assert p["severity"] == "Info" and p["tier"] == 1
    assert p["description"] == "Switch IB Port" and p["system_name"] == "LAB-IBLEAF-01"
    assert p["number"] == 5 and p["dname"] == "1/3/1"  # Quantum-2: cage 3, split 1
    assert p["node_description"] == "LAB-IBLEAF-01:1/3/1"
    assert p["peer"] == port_name(fab, "sched-worker2/mlx5_0[1]")
    assert p["peer_node_name"] == "sched-worker2" and p["peer_port_dname"] == "HCA-1/1"
    peer = by_name(ports)[p["peer"]]
    assert peer["description"] == "Computer IB Port" and peer["peer"] == p["name"]
    assert peer["lid"] == p["peer_lid"] > 0


def test_single_port_is_a_list_and_unknown_is_404(fab, client):
    name = port_name(fab, LEAF_PORT)
    r = client.get(f"/ufmRest/resources/ports/{name}")
    assert r.status_code == 200 and [q["name"] for q in r.json()] == [name]
    r = client.get("/ufmRest/resources/ports/0123456789abcdef_3")
    assert r.status_code == 404 and "no port" in r.json()["error"]


def test_ports_filters(fab, client):
    leaf = port_name(fab, LEAF_PORT).split("_")[0]
    mine = client.get(f"/ufmRest/resources/ports?system={leaf}").json()
    assert mine and {p["systemID"] for p in mine} == {leaf}
    assert len(mine) == 65  # 64 ports and the SHARP AN port
    by_sysname = client.get("/ufmRest/resources/ports?system=LAB-IBLEAF-01").json()
    assert [p["name"] for p in by_sysname] == [p["name"] for p in mine]
    active = client.get("/ufmRest/resources/ports?active=true").json()
    assert active and all(p["logical_state"] == "Active" for p in active)
    idle = client.get("/ufmRest/resources/ports?active=false").json()
    assert all(p["logical_state"] != "Active" for p in idle)
    assert len(active) + len(idle) == len(client.get("/ufmRest/resources/ports").json())
    assert client.get("/ufmRest/resources/ports?system=nosuch").json() == []
    assert client.get("/ufmRest/resources/ports?active=maybe").status_code == 422


def test_systems(fab, client):
    systems = client.get("/ufmRest/resources/systems").json()
    layout = fab.source.layout()
    assert len(systems) == len(set(layout.nodes["system_guid"]))
    leaf = next(s for s in systems if s["system_name"] == "LAB-IBLEAF-01")
    for k, t in {
        "guid": str,
        "system_guid": str,
        "name": str,
        "system_name": str,
        "type": str,
        "role": str,
        "technology": str,
        "model": str,
        "description": str,
        "vendor": str,
        "fw_version": str,
        "state": str,
        "severity": str,
        "ip": str,
        "total_alarms": int,
        "tier": int,
    }.items():
        assert isinstance(leaf[k], t), k
    assert leaf["type"] == "switch" and leaf["role"] == "tor" and leaf["model"] == "MQM9701"
    assert leaf["name"] == leaf["guid"] and leaf["technology"] == "NDR"
    assert "ports" not in leaf
    switches = client.get("/ufmRest/resources/systems?type=switch").json()
    assert {s["system_name"] for s in switches} == {"LAB-IBLEAF-01", "LAB-IBSPINE-01"}
    assert {s["role"] for s in client.get("/ufmRest/resources/systems?type=host").json()} == {
        "endpoint"
    }
    assert [s["role"] for s in client.get("/ufmRest/resources/systems?role=core").json()] == [
        "core"
    ]
    with_ports = client.get("/ufmRest/resources/systems?type=switch&ports=true").json()
    leafp = next(s for s in with_ports if s["guid"] == leaf["guid"])
    assert port_name(fab, LEAF_PORT) in leafp["ports"] and len(leafp["ports"]) == 65
    brief = client.get("/ufmRest/resources/systems?brief=true").json()
    assert set(brief[0]) == {"guid", "name", "system_name", "type", "role", "ip", "severity"}
    one = client.get(f"/ufmRest/resources/systems/{leaf['guid']}")
    assert one.status_code == 200 and one.json()["system_name"] == "LAB-IBLEAF-01"
    assert client.get("/ufmRest/resources/systems/00000000000000ff").status_code == 404


LINK_KEYS = {
    "source_guid",
    "source_port",
    "destination_guid",
    "destination_port",
    "source_port_dname",
    "source_port_name",
    "destination_port_dname",
    "destination_port_name",
    "width",
    "severity",
    "source_port_node_description",
    "destination_port_node_description",
    "name",
    "capabilities",
}


def test_links(fab, client):
    links = client.get("/ufmRest/resources/links").json()
    assert len(links) == len(fab.source.layout().links)
    for ln in links:
        assert set(ln) == LINK_KEYS
        assert ln["name"] == f"{ln['source_port_name']}:{ln['destination_port_name']}"
        assert ln["source_port_name"] == f"{ln['source_guid']}_{ln['source_port']}"
        assert ln["width"] == "4x" and ln["severity"] == "Info"
    leaf = port_name(fab, LEAF_PORT).split("_")[0]
    mine = client.get(f"/ufmRest/resources/links?system={leaf}").json()
    assert mine and all(leaf in (x["source_guid"], x["destination_guid"]) for x in mine)
    page = client.get("/ufmRest/resources/links?page_number=2&rpp=3").json()
    assert page["data"] == links[3:6] and page["total"] == len(links)
    everything = client.get("/ufmRest/resources/links?page_number=1&rpp=1000000000").json()
    assert everything["data"] == links


def test_isolation_takes_the_port_down_and_back(fab, client):
    name = port_name(fab, "LAB-IBLEAF-01[7]")
    body = {"ports": [name], "ports_policy": "UNHEALTHY", "action": "isolate"}
    r = client.put("/ufmRest/app/unhealthy_ports", json=body)
    assert r.status_code == 200, r.text
    # down on the fabric itself
    layout = fab.source.layout()
    row = layout.row_by_name[name]
    state = fab.source.state()
    assert state.value(row, "state") == 1 and state.value(row, "held") >= 1
    assert [f["kind"] for f in fab.live.faults()] == ["down"]
    # and in the resources
    fab.source.state()
    p = client.get(f"/ufmRest/resources/ports/{name}").json()[0]
    assert p["logical_state"] == "Down" and p["physical_state"] != "Link Up"
    assert p["severity"] == "Critical"
    unhealthy = client.get("/ufmRest/app/unhealthy_ports").json()
    assert [u["UnhealthyPort"] for u in unhealthy] == [name]
    u = unhealthy[0]
    assert u["PeerNode"] == "sched-worker2" and u["PeerPortDname"] == "HCA-3/1"  # mlx5_2
    assert (
        client.get(f"/ufmRest/app/unhealthy_ports/{name}").json()["UnhealthyGUID"]
        == name.split("_")[0]
    )
    # the listing comes from the fabric's faults: a new API process sees it too
    assert [
        x["UnhealthyPort"] for x in TestClient(fab.app()).get("/ufmRest/app/unhealthy_ports").json()
    ] == [name]
    # isolating it again, or its peer, adds nothing
    client.put("/ufmRest/app/unhealthy_ports", json={**body, "ports": [name, u["PeerPort"], name]})
    assert len(fab.live.faults()) == 1
    alarms = client.get("/ufmRest/app/alarms").json()
    assert [(a["event_type"], a["severity"]) for a in alarms] == [(9001, "Critical")]
    r = client.put(
        "/ufmRest/app/unhealthy_ports", json={"ports": [name], "ports_policy": "HEALTHY"}
    )
    assert r.status_code == 200 and len(r.json()["cleared"]) == 1
    assert fab.live.faults() == []
    state = fab.source.state()
    # up again: Link Up, Initialize until a subnet manager sweeps it Active
    assert state.value(row, "phys") == 5 and state.value(row, "state") in (2, 4)
    assert client.get("/ufmRest/app/unhealthy_ports").json() == []
    assert client.get("/ufmRest/app/alarms").json() == []


def test_isolation_refusals(fab, client):
    r = client.put(
        "/ufmRest/app/unhealthy_ports", json={"ports": ["nosuch_1"], "ports_policy": "UNHEALTHY"}
    )
    assert r.status_code == 404
    name = port_name(fab, LEAF_PORT)
    r = client.put(
        "/ufmRest/app/unhealthy_ports", json={"ports": [name], "ports_policy": "UNHEALTHY"}
    )
    assert r.status_code == 400 and "isolate" in r.json()["error"]
    r = client.put("/ufmRest/app/unhealthy_ports", json={"ports": [name], "ports_policy": "SICK"})
    assert r.status_code == 422 and "ports_policy" in r.json()["error"]
    assert fab.live.faults() == []


def test_reset_job_runs_to_completed(fab, client):
    name = port_name(fab, "LAB-IBLEAF-01[6]")
    body = {
        "params": {"port_id": name},
        "action": "reset",
        "object_ids": [name.split("_")[0]],
        "object_type": "System",
        "description": "",
        "identifier": "id",
    }
    for prefix in PREFIXES:
        r = client.post(f"{prefix}/actions", json=body)
        assert r.status_code == 202, r.text
        loc = r.headers["Location"]
        assert re.fullmatch(rf"{prefix}/jobs/\d+", loc)
        job = client.get(loc).json()
        assert job["Status"] == "Running" and job["Operation"] == "Reset Port"
        row = fab.source.layout().row_by_name[name]
        assert fab.source.state().value(row, "state") == 1  # the link is down meanwhile
        jid = loc.rsplit("/", 1)[1]
        assert client.get(f"{prefix}/jobs?parent_id={jid}").json()[0]["Status"] == "Running"
        fab.live.advance(5)
        assert client.get(loc).json()["Status"] == "Completed"
        assert client.get(f"{prefix}/jobs?parent_id={jid}").json()[0]["Status"] == "Completed"
        assert fab.source.state().value(row, "phys") == 5  # up again
    names = [
        e["name"] for e in client.get(f"/ufmRest/app/events?object_name={LEAF_PORT[:-3]}[6]").json()
    ]
    assert "Link went down" in names and "Link is up" in names
    assert client.get("/ufmRest/jobs/999999").status_code == 404
    r = client.post("/ufmRest/actions", json={**body, "action": "reboot"})
    assert r.status_code == 400 and "unsupported action" in r.json()["error"]
    r = client.post("/ufmRest/actions", json={"action": "reset", "params": {}})
    assert r.status_code == 400 and "port_id" in r.json()["error"]
    r = client.post("/ufmRest/actions", json={"action": "reset", "params": {"port_id": "nosuch_1"}})
    assert r.status_code == 404


def test_events_filters_and_external_events(fab, client):
    fab.live.fault("down", "LAB-IBLEAF-01[9]")
    fab.live.clear()
    all_events = client.get("/ufmRest/app/events").json()
    assert all_events and [e["id"] for e in all_events] == sorted(e["id"] for e in all_events)
    for e in all_events:
        assert isinstance(e["id"], int) and isinstance(e["event_type"], str)
    crit = client.get("/ufmRest/app/events?severity=critical").json()
    assert crit and all(e["severity"] == "Critical" for e in crit)
    topo = client.get("/ufmRest/app/events?category=Fabric Topology").json()
    assert topo and all(e["category"] == "Fabric Topology" for e in topo)
    link9 = client.get("/ufmRest/app/events?object_name=LAB-IBLEAF-01[9]").json()
    assert [e["name"] for e in link9] == ["Link went down", "Link is up"]
    assert (
        client.get("/ufmRest/app/events?type=Link&event_type=9002").json()[-1]["name"]
        == "Link is up"
    )
    one = client.get(f"/ufmRest/app/events/{link9[0]['id']}")
    assert one.status_code == 200 and one.json() == link9[0]
    assert client.get("/ufmRest/app/events/99999999").status_code == 404
    assert client.get("/ufmRest/app/events/zero").status_code == 404
    for eid, sev in ((552, "Info"), (553, "Warning"), (554, "Critical")):
        body = {
            "event_id": eid,
            "description": f"maintenance {eid}",
            "external_event_name": "Isolating Port",
            "external_event_type": "PDR Plugin Event",
            "external_event_source": "PDR Plugin",
        }
        r = client.post("/ufmRest/app/events/external_event", json=body)
        assert r.status_code == 200, r.text
        got = r.json()
        assert got["event_type"] == str(eid) and got["severity"] == sev
        assert got["name"] == "Isolating Port" and got["description"].startswith(
            f"maintenance {eid}"
        )
        assert client.get(f"/ufmRest/app/events/{got['id']}").json()["id"] == got["id"]
    r = client.post("/ufmRest/app/events/external_event", json={"event_id": 9001})
    assert r.status_code == 422 and "event_id" in r.json()["error"]


def test_alarms_from_faults(fab, client):
    fab.live.fault("degrade", LEAF_PORT, width="2x")
    fab.live.fault("errors", "LAB-IBLEAF-01[10]", ber=1e-12)
    try:
        fab.source.state()
        alarms = client.get("/ufmRest/app/alarms").json()
        assert sorted((a["event_type"], a["severity"]) for a in alarms) == [
            (130, "Minor"),
            (916, "Warning"),
        ]
        for a in alarms:
            for k, t in {"id": int, "name": str, "event_count": int, "timestamp": str}.items():
                assert isinstance(a[k], t)
            assert isinstance(a["duration"], float)
        leaf = port_name(fab, LEAF_PORT).split("_")[0]
        assert len(client.get(f"/ufmRest/app/alarms?device_id={leaf}").json()) == 2
        p = client.get(f"/ufmRest/resources/ports/{port_name(fab, LEAF_PORT)}").json()[0]
        assert p["active_width"] == "2x" and p["severity"] == "Minor"
        ber = client.get("/ufmRest/resources/ports?high_ber_only=true").json()
        assert sorted(q["number"] for q in ber if q["system_name"] == "LAB-IBLEAF-01") == [10]
        assert len(ber) == 2 and all(q["high_ber_severity"] == "Warning" for q in ber)
        systems = client.get("/ufmRest/resources/systems?type=switch").json()
        leafsys = next(s for s in systems if s["guid"] == leaf)
        assert leafsys["severity"] == "Minor" and leafsys["total_alarms"] == 2
        link = next(
            x
            for x in client.get("/ufmRest/resources/links").json()
            if port_name(fab, LEAF_PORT) in (x["source_port_name"], x["destination_port_name"])
        )
        assert link["width"] == "2x" and link["severity"] == "Minor"
    finally:
        fab.live.clear()


def test_errors_are_clear_4xx(fab, client):
    r = client.post(
        "/ufmRest/actions",
        content=b'{"action": "reset",',
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]
    r = client.put(
        "/ufmRest/app/unhealthy_ports",
        content=b"[" * 10,
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 400 and "\n" not in r.json()["error"]
    huge = b'{"event_id": 552, "description": "' + b"x" * (2 << 20) + b'"}'
    r = client.post(
        "/ufmRest/app/events/external_event",
        content=huge,
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 413 and "\n" not in r.json()["error"]

    def chunks():
        yield b'{"event_id": 552, "description": "'
        for _ in range(40):
            yield b"y" * 65536
        yield b'"}'

    r = client.post(
        "/ufmRest/app/events/external_event",
        content=chunks(),
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 413
    r = client.put(
        "/ufmRest/app/unhealthy_ports", json={"ports": ["x" * 100], "ports_policy": "HEALTHY"}
    )
    assert r.status_code == 422
    assert client.get("/ufmRest/no/such/route").status_code == 404


def test_credentials_and_tokens(fab):
    c = TestClient(fab.app(Auth(users={"admin": "s3cret"})))
    good = "Basic " + base64.b64encode(b"admin:s3cret").decode()
    bad = "Basic " + base64.b64encode(b"admin:wrong").decode()
    assert c.get("/ufmRest/app/ufm_version").status_code == 401
    r = c.get("/ufmRest/app/ufm_version", headers={"Authorization": bad})
    assert r.status_code == 401 and r.json()["error"]
    assert c.get("/ufmRest/app/ufm_version", headers={"Authorization": good}).status_code == 200
    # /ufmRestV3 takes a token only, sent as Basic (ufm_sdk_3.0 utils/ufm_rest_client.py)
    assert c.get("/ufmRestV3/app/ufm_version", headers={"Authorization": good}).status_code == 401
    tok = c.post("/ufmRest/app/tokens", headers={"Authorization": good}).json()
    assert tok["username"] == "admin" and tok["revoked"] is False
    assert isinstance(tok["expires_in"], int) and tok["access_token"]
    r = c.get(
        "/ufmRestV3/resources/systems?type=switch",
        headers={"Authorization": f"Basic {tok['access_token']}"},
    )
    assert r.status_code == 200 and len(r.json()) == 2
    r = c.get("/ufmRestV3/app/ufm_version", headers={"Authorization": "Basic nosuchtoken"})
    assert r.status_code == 401
