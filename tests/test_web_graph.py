"""The web view's JSON, in process: the graph's positions by tier, every switch and tray
of gb200-su drawn, the summarised views' sizes and drill-down, link state and
utilisation from two readings, a port's counters, the live feed, and one-line errors."""

from __future__ import annotations

import itertools
import json

import pytest
import schemathesis
from api_fabric import api_fabric
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings

from fabriclab.api.web.graph import FULL_MAX_EDGES, Topo, graph
from fabriclab.api.web.meter import Meter


@pytest.fixture(scope="module")
def su(tmp_path_factory):
    with api_fabric(tmp_path_factory.mktemp("su"), spec="gb200-su") as f:
        yield f


def _graph(f, view="auto", focus=None):
    layout = f.source.layout()
    return graph(Topo(layout), Meter(layout).links(f.source.state()), view, focus)


def test_full_view_draws_every_switch_and_tray_by_tier(su):
    g = _graph(su)
    assert g["view"] == "full"
    lay = su.source.layout()
    switches = {n["label"] for n in g["nodes"] if n["kind"] == "switch"}
    trays = {n["label"] for n in g["nodes"] if n["kind"] == "tray"}
    want = {lay.nodes["name"][i] for i in range(lay.node_count) if lay.node_switch[i]}
    assert switches == want and len(switches) == 41
    assert trays == set(lay.trays) and len(trays) == 144
    # every cable an edge
    assert len(g["edges"]) == len(lay.links) == 1152
    # tiers as rows, the top tier on top: spines above leaves above trays
    y = {}
    for n in g["nodes"]:
        if "position" in n:
            y.setdefault(n.get("role", n["kind"]), set()).add(n["position"]["y"])
    assert all(len(v) == 1 for v in y.values()), y
    assert y["spine"].pop() < y["leaf"].pop() < y["tray"].pop()
    # trays in their rack (NVLink domain), racks side by side in order
    racks = {n["id"]: n["label"] for n in g["nodes"] if n["kind"] == "rack"}
    assert sorted(racks.values()) == lay.domains
    xs: dict[str, list[float]] = {}
    for n in g["nodes"]:
        if n["kind"] == "tray":
            xs.setdefault(racks[n["parent"]], []).append(n["position"]["x"])
    spans = [(min(v), max(v)) for _, v in sorted(xs.items())]
    assert all(a[1] < b[0] for a, b in itertools.pairwise(spans))
    # no two nodes on one spot
    spots = [(n["position"]["x"], n["position"]["y"]) for n in g["nodes"] if "position" in n]
    assert len(spots) == len(set(spots))


def test_summary_collapses_hosts_per_leaf_and_drills_down(su):
    g = _graph(su, "summary")
    kinds = [n["kind"] for n in g["nodes"]]
    assert kinds.count("switch") == 41 and kinds.count("hosts") == 32
    assert "tray" not in kinds
    assert sum(n["count"] for n in g["nodes"] if n["kind"] == "hosts") == 576
    # the two cables from a leaf to each spine are one edge
    assert len(g["edges"]) == 32 + 32 * 9
    assert {e["count"] for e in g["edges"]} == {18, 2}
    leaf = next(n for n in g["nodes"] if n["kind"] == "hosts")
    assert leaf["drill"]["view"] == "summary"
    opened = _graph(su, "summary", leaf["drill"]["focus"])
    trays = [n for n in opened["nodes"] if n["kind"] == "tray"]
    assert len(trays) == 18
    assert sum(1 for n in opened["nodes"] if n["kind"] == "hosts") == 31
    # each tray's link to that leaf is a single cable with its ends
    single = [e for e in opened["edges"] if e["count"] == 1]
    assert len(single) == 18 and all(e["ends"][0].startswith("SU1-IBLEAF") for e in single)


def test_pods_need_three_tiers(su):
    assert _graph(su, "pods")["view"] == "summary"


def test_large_fabric_is_summarised_into_pods(tmp_path):
    with api_fabric(tmp_path, spec="gb200-su", trays=1152) as f:
        lay = f.source.layout()
        assert int(lay.node_tier.max()) == 3 and len(lay.links) > FULL_MAX_EDGES
        # hosts collapsed per leaf still readable here: the summary; the pods on asking
        assert _graph(f)["view"] == "summary"
        g = _graph(f, "pods")
        assert g["view"] == "pods"
        assert len(g["edges"]) < 1000 and len(g["nodes"]) < 200
        pods = [n for n in g["nodes"] if n["kind"] == "pod"]
        # every switch below the top tier is in one pod, every HCA under one
        assert sum(n["count"] for n in pods) == int((lay.node_switch & (lay.node_tier < 3)).sum())
        # the top tier by plane: several groups, every top switch in one, alike in size
        planes = [n["count"] for n in g["nodes"] if n["kind"] == "group"]
        assert len(planes) > 1 and len(set(planes)) == 1
        assert sum(planes) == int((lay.node_tier == 3).sum())
        opened = _graph(f, "pods", pods[0]["drill"]["focus"])
        kinds = [n["kind"] for n in opened["nodes"]]
        assert kinds.count("pod") == len(pods) - 1
        assert kinds.count("switch") == pods[0]["count"] and "hosts" in kinds
        summary = _graph(f, "summary")
        leaves = int((lay.node_tier == 1).sum())
        assert len(summary["nodes"]) == int(lay.node_switch.sum()) + leaves


def test_link_state_and_utilisation_from_two_readings(tmp_path):
    with api_fabric(tmp_path, spec="lab") as f:
        lay = f.source.layout()
        meter = Meter(lay)
        topo = Topo(lay)
        meter.links(f.source.state())
        f.live.traffic_request("ring", ["sched-worker[1-2]"], {"rate": "100Gb/s"})
        f.live.advance(2.0)
        links = meter.links(f.source.state())
        busy = links.util[links.util > 0]
        assert len(busy) and busy.max() == pytest.approx(0.25, rel=0.05)  # 100 of 400 Gb/s
        f.live.fault("down", "LAB-IBLEAF-01[5]")
        links = meter.links(f.source.state())
        g = graph(topo, links, "full")
        red = [e for e in g["edges"] if e["status"] == "down"]
        assert [e["ends"][0] for e in red] == ["LAB-IBLEAF-01[5]"]
        assert red[0]["fault"] == 1 and g["counts"]["down"] == 1
        # a link retrained narrower is degraded (amber), not down
        f.live.up("LAB-IBLEAF-01[5]")
        f.live.fault("degrade", "LAB-IBLEAF-01[6]", width="2x")
        g = graph(topo, meter.links(f.source.state()), "full")
        marked = {e["ends"][0]: e["status"] for e in g["edges"] if e["status"] != "up"}
        assert marked == {"LAB-IBLEAF-01[6]": "degraded"}


def test_routes_ports_stream_and_errors(su):
    client = TestClient(su.app())
    g = client.get("/api/v1/graph", params={"view": "full"}).json()
    edge = g["edges"][0]
    port = client.get(f"/api/v1/ports/{edge['ports'][1]}").json()
    assert port["logical_state"] == "Active" and port["physical_state"] == "Link Up"
    assert port["target"] == edge["ends"][0] and port["peer"]["name"] == edge["ports"][0]
    assert set(port["counters"]) >= {"PortXmitData", "SymbolErrorCounter"}
    r = client.post("/api/v1/faults", json={"kind": "down", "target": edge["ends"][0]})
    assert r.status_code == 201
    with client.stream("GET", "/api/v1/events/stream", params={"seconds": 1}) as s:
        body = b"".join(s.iter_bytes()).decode()
    events = [
        json.loads(line[6:])
        for block in body.split("\n\n")
        if "event: fabric" in block
        for line in block.splitlines()
        if line.startswith("data: ")
    ]
    assert any(
        e["name"] == "Link went down" and edge["ends"][0] in e["object_name"] for e in events
    )
    after = client.get("/api/v1/graph", params={"view": "full"}).json()
    assert next(e for e in after["edges"] if e["id"] == edge["id"])["status"] == "down"
    assert client.post("/api/v1/faults/up", json={"target": edge["ends"][0]}).status_code == 200
    for url, status in (
        ("/api/v1/ports/nothing_1", 404),
        ("/api/v1/graph?view=nope", 422),
        ("/api/v1/graph?view=summary&focus=NOPE", 404),
        ("/api/v1/graph?view=pods&focus=pod-x", 200),  # two tiers: the summary, no pods
        ("/api/v1/events/stream?seconds=0", 422),
    ):
        r = client.get(url)
        assert r.status_code == status, (url, r.text)
        if status >= 400:
            assert list(r.json()) == ["error"] and "\n" not in r.json()["error"]
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/api/v1/graph", "/api/v1/ports/{name}", "/api/v1/events/stream"} <= set(paths)
    assert client.get("/").headers["content-type"].startswith("text/html")


def test_web_routes_fuzzed(su):
    """No 500, no traceback, every answer as documented (Schemathesis, in process)."""
    schema = schemathesis.openapi.from_asgi("/openapi.json", su.app()).include(
        path_regex="^/api/v1/(graph|ports/)"
    )
    ops = [r.ok() for r in schema.get_all_operations()]
    assert len(ops) == 2
    for op in ops:

        @given(case=op.as_strategy())
        @settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
        def run(case):
            case.call_and_validate()

        run()
