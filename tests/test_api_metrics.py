"""``/metrics`` in-process: every series named, labelled and typed as
treydock/infiniband_exporter (v0.10.0) writes them, the counters as the fabric counts
them (bytes = words x 4), a fault at once in the state series, traffic moving the
counters, and the whole output parsed by prometheus_client's own parser."""

from __future__ import annotations

import gzip
import socket
from collections import Counter

import numpy as np
import pytest
from api_fabric import api_fabric
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from simclient import dr_smp

from fabriclab.api import metrics, metrics_small, metrics_text
from fabriclab.api.app import make_app
from fabriclab.api.source import FabricUnavailable, Source
from fabriclab.errors import Problem
from fabriclab.ib import simwire
from fabriclab.ib.mad.consts import Attr
from fabriclab.model.build import build
from fabriclab.sim.live import admin_requests
from fabriclab.sim.live.api import LiveFabric
from fabriclab.sim.live.clock import VirtualClock
from fabriclab.sim.live.faults.options import KINDS
from fabriclab.sim.wire.client import Client
from fabriclab.sim.wire.server import FabricServer
from fabriclab.spec.load import load_spec

LEAF = "LAB-IBLEAF-01"
# collectors/switch.go and hca.go: the per-port counter series (after
# ``infiniband_{switch,hca}_``) and their labels; collectors/switch_test.go's expected
# output shows the ``0x`` GUIDs and the HELP texts.
EXPORTER_COUNTERS = {
    "port_transmit_data_bytes": "PortXmitData",
    "port_receive_data_bytes": "PortRcvData",
    "port_transmit_packets": "PortXmitPkts",
    "port_receive_packets": "PortRcvPkts",
    "port_unicast_transmit_packets": "PortUnicastXmitPkts",
    "port_unicast_receive_packets": "PortUnicastRcvPkts",
    "port_multicast_transmit_packets": "PortMulticastXmitPkts",
    "port_multicast_receive_packets": "PortMulticastRcvPkts",
    "port_symbol_error": "SymbolErrorCounter",
    "port_link_error_recovery": "LinkErrorRecoveryCounter",
    "port_link_downed": "LinkDownedCounter",
    "port_receive_errors": "PortRcvErrors",
    "port_receive_remote_physical_errors": "PortRcvRemotePhysicalErrors",
    "port_receive_switch_relay_errors": "PortRcvSwitchRelayErrors",
    "port_transmit_discards": "PortXmitDiscards",
    "port_transmit_constraint_errors": "PortXmitConstraintErrors",
    "port_receive_constraint_errors": "PortRcvConstraintErrors",
    "port_local_link_integrity_errors": "LocalLinkIntegrityErrors",
    "port_excessive_buffer_overrun_errors": "ExcessiveBufferOverrunErrors",
    "port_vl15_dropped": "VL15Dropped",
    "port_transmit_wait": "PortXmitWait",
    "port_qp1_dropped": "QP1Dropped",
}
EXPORTER_GAUGES = {
    "infiniband_switch_port_rate_bytes_per_second": {"guid", "port"},
    "infiniband_switch_port_raw_rate_bytes_per_second": {"guid", "port"},
    "infiniband_hca_rate_bytes_per_second": {"guid"},
    "infiniband_hca_raw_rate_bytes_per_second": {"guid"},
    "infiniband_switch_info": {"guid", "switch", "lid"},
    "infiniband_hca_info": {"guid", "hca", "lid"},
    "infiniband_switch_uplink_info": {
        "guid",
        "port",
        "switch",
        "uplink",
        "uplink_guid",
        "uplink_type",
        "uplink_port",
        "uplink_lid",
    },
    "infiniband_hca_uplink_info": {
        "guid",
        "port",
        "hca",
        "uplink",
        "uplink_guid",
        "uplink_type",
        "uplink_port",
        "uplink_lid",
    },
    "infiniband_exporter_collect_errors": {"collector"},
    "infiniband_exporter_collect_timeouts": {"collector"},
    "infiniband_exporter_collector_duration_seconds": {"collector"},
}


@pytest.fixture(scope="module")
def fab(tmp_path_factory):
    with api_fabric(tmp_path_factory.mktemp("metrics")) as f:
        yield f


def scrape(client: TestClient) -> dict:
    r = client.get("/metrics")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    return {f.name: f for f in text_string_to_metric_families(r.text)}


def samples(fams: dict, family: str) -> dict[tuple, float]:
    out = {}
    for s in fams[family].samples:
        key = (s.labels.get("guid"), s.labels.get("port"))
        assert key not in out or family.endswith("_info"), f"duplicate {family}{s.labels}"
        out[key] = s.value
    return out


def port_key(f, node_name: str, port: int) -> tuple[str, str]:
    lay = f.source.layout()
    i = lay.nodes["name"].index(node_name)
    row = next(r for r in lay.rows_of(i) if lay.ports["num"][r] == port)
    return "0x" + lay.ports["guid"][row], str(port)


def test_every_exporter_series_named_typed_and_labelled_as_the_exporter(fab):
    fams = scrape(TestClient(fab.app()))
    for who, title in (("switch", "switch"), ("hca", "HCA")):
        for suffix, counter in EXPORTER_COUNTERS.items():
            fam = fams[f"infiniband_{who}_{suffix}"]  # the parser strips _total
            assert fam.type == "counter"
            assert fam.documentation == f"Infiniband {title} port {counter}"
            assert fam.samples, fam.name
            for s in fam.samples:
                assert s.name == f"infiniband_{who}_{suffix}_total"
                assert set(s.labels) == {"guid", "port"}
                assert s.labels["guid"].startswith("0x") and len(s.labels["guid"]) == 18
    for name, labels in EXPORTER_GAUGES.items():
        fam = fams[name]
        assert fam.type == "gauge", name
        assert fam.samples, name
        for s in fam.samples:
            assert set(s.labels) == labels, (name, s.labels)
    assert fams["infiniband_switch_info"].documentation == "Infiniband switch information"


def test_whole_output_parses_without_duplicates(fab):
    r = TestClient(fab.app()).get("/metrics")
    seen = Counter()
    for fam in text_string_to_metric_families(r.text):
        for s in fam.samples:
            seen[(s.name, tuple(sorted(s.labels.items())))] += 1
    assert seen and max(seen.values()) == 1
    # every line is a comment or a sample: nothing the parser skipped
    body = [ln for ln in r.text.splitlines() if ln and not ln.startswith("#")]
    assert len(body) == sum(seen.values())


def test_only_connected_ports_as_the_exporter_sees_them(fab):
    lay = fab.source.layout()
    fams = scrape(TestClient(fab.app()))
    sw = samples(fams, "infiniband_switch_port_transmit_data_bytes")
    ca = samples(fams, "infiniband_hca_port_transmit_data_bytes")
    rows = range(lay.port_count)
    cabled = [r for r in rows if lay.ports["num"][r] > 0 and lay.ports["peer"][r] >= 0]
    want_sw = {
        ("0x" + lay.ports["guid"][r], str(lay.ports["num"][r]))
        for r in cabled
        if lay.node_switch[lay.ports["node"][r]]
    }
    assert set(sw) == want_sw and all(p != "0" for _, p in sw)
    assert len(ca) == len(cabled) - len(want_sw)
    # the state series cover every port (port 0 none), cabled or not
    st = samples(fams, "fabriclab_port_state_id")
    assert len(st) == sum(1 for r in rows if lay.ports["num"][r] > 0)


def test_data_in_bytes_and_counters_move_with_traffic(fab):
    client = TestClient(fab.app())
    src = port_key(fab, "sched-worker1/mlx5_0", 1)
    before = samples(scrape(client), "infiniband_hca_port_transmit_data_bytes")[src]
    fab.live.traffic_request(
        "send", ["sched-worker1/mlx5_0", "sched-worker2/mlx5_0"], {"bytes": "64Mi"}
    )
    fab.live.advance(1.0)
    fams = scrape(client)
    after = samples(fams, "infiniband_hca_port_transmit_data_bytes")[src]
    assert after - before >= 64 * 2**20  # payload and headers, in bytes
    state = fab.source.state()
    lay = fab.source.layout()
    row = lay.row_by_name[src[0][2:] + "_1"]
    assert after == state.value(row, "PortXmitData") * 4
    pkts = samples(fams, "infiniband_hca_port_transmit_packets")[src]
    assert pkts == state.value(row, "PortXmitPkts")
    leaf = samples(fams, "infiniband_switch_port_receive_data_bytes")
    assert leaf[port_key(fab, LEAF, 1)] == state.value(lay.ports["peer"][row], "PortRcvData") * 4


def test_rates_from_the_exporters_lane_table(fab):
    fams = scrape(TestClient(fab.app()))
    # lab: NDR 4x everywhere; laneRates["NDR"] = {100, 100} Gb/s a lane
    for name in (
        "infiniband_switch_port_rate_bytes_per_second",
        "infiniband_switch_port_raw_rate_bytes_per_second",
        "infiniband_hca_rate_bytes_per_second",
    ):
        assert {s.value for s in fams[name].samples} == {4 * 100e9 / 8}


def test_a_fault_shows_in_the_state_series_at_once(tmp_path):
    with api_fabric(tmp_path) as f:
        client = TestClient(f.app())
        key = port_key(f, LEAF, 5)
        fams = scrape(client)
        assert samples(fams, "fabriclab_port_state_id")[key] == 4  # Active
        assert samples(fams, "fabriclab_port_physical_state_id")[key] == 5  # LinkUp
        f.live.fault("down", f"{LEAF}[5]")
        fams = scrape(client)
        assert samples(fams, "fabriclab_port_state_id")[key] == 1  # Down
        assert samples(fams, "fabriclab_port_physical_state_id")[key] in (2, 3)
        peer = port_key(f, "sched-worker2/mlx5_0", 1)
        assert samples(fams, "fabriclab_port_state_id")[peer] == 1
        faults = {s.labels["kind"]: s.value for s in fams["fabriclab_faults_active"].samples}
        assert faults["down"] == 1 and faults["flap"] == 0
        # the exporter's series stay (as cabled), the link-downed counter moved
        assert samples(fams, "infiniband_switch_port_link_downed")[key] >= 1


def test_events_counted_by_severity_incrementally(tmp_path):
    with api_fabric(tmp_path) as f:
        client = TestClient(f.app())

        def events() -> dict[str, float]:
            fams = scrape(client)
            return {s.labels["severity"]: s.value for s in fams["fabriclab_events"].samples}

        first = events()
        assert set(metrics_small.SEVERITIES) <= set(first)
        f.source.request("event", event_type=552, name="External Event", severity="Minor")
        f.source.request("event", event_type=552, name="External Event", severity="Minor")
        second = events()
        assert second["Minor"] == first["Minor"] + 2
        assert events() == second  # nothing counted twice
        counter = client.app.state.metrics.events
        assert counter.since == f.source.events()[-1]["id"]


def test_fabriclab_series(fab):
    fams = scrape(TestClient(fab.app()))
    for name in (
        "fabriclab_node_info",
        "fabriclab_fabric_clock_seconds",
        "fabriclab_server_mads",
        "fabriclab_server_mad_outcomes",
        "fabriclab_flows",
        "fabriclab_traffic_sent_bytes",
        "fabriclab_scrape_duration_seconds",
    ):
        assert fams[name].samples, name
    nodes = {s.labels["name"]: s.labels for s in fams["fabriclab_node_info"].samples}
    assert nodes[LEAF]["kind"] == "switch" and nodes[LEAF]["tier"] == "1"
    assert nodes["sched-worker1/mlx5_0"]["host"] == "sched-worker1"
    clock = fams["fabriclab_fabric_clock_seconds"].samples[0].value
    assert clock == fab.source.state().now


def test_gzip_when_asked(fab):
    client = TestClient(fab.app())
    r = client.get("/metrics", headers={"Accept-Encoding": "gzip"})
    assert r.status_code == 200
    assert r.headers["content-encoding"] == "gzip"
    # httpx decodes it; the text is the same exposition
    assert "infiniband_switch_port_transmit_data_bytes_total{" in r.text
    raw = b"".join(metrics_text.gzipped(iter([b"a", b"b"])))
    assert gzip.decompress(raw) == b"ab"


def test_fault_kinds_are_the_servers():
    assert metrics_small.FAULT_KINDS == KINDS


def test_label_values_escaped():
    assert metrics_text.escape('a"b\\c\nd') == 'a\\"b\\\\c\\nd'


def test_large_fabric_sent_plain_even_when_gzip_is_asked(fab, monkeypatch):
    monkeypatch.setattr(metrics, "GZIP_MAX_PORTS", 0)
    r = TestClient(fab.app()).get("/metrics", headers={"Accept-Encoding": "gzip"})
    assert r.status_code == 200 and "content-encoding" not in r.headers


def test_a_fabric_gone_is_one_json_error_not_half_a_scrape(tmp_path):
    def send(req: dict):
        raise FabricUnavailable([Problem("gone", "the fabric is not up")])

    app = make_app(Source("gone", send, tmp_path / "gone.events.jsonl"))
    r = TestClient(app).get("/metrics")
    assert r.status_code == 503
    assert r.json() == {"error": "gone: the fabric is not up"}


def test_text_writer_pieces():
    labels = ['{a="1"} ', '{a="2"} ']
    head = b"# HELP x h\n# TYPE x gauge\n"
    f = metrics_text.family
    assert f("x", "h", "gauge", labels, np.array([5e10, 5e10])) == (
        head + b'x{a="1"} 5e+10\nx{a="2"} 5e+10\n'
    )
    assert f("x", "h", "gauge", labels, np.array([1, 2], dtype=np.uint64)) == (
        head + b'x{a="1"} 1\nx{a="2"} 2\n'
    )
    assert f("x", "h", "gauge", labels, np.array([0.5, 2.0])) == (
        head + b'x{a="1"} 0.5\nx{a="2"} 2.0\n'
    )
    assert f("x", "h", "gauge", [], np.array([], dtype=np.uint64)) == head
    assert metrics_text.times4(np.array([1 << 62], dtype=np.uint64)) == [1 << 64]


def test_mads_counted_by_class_and_method():
    # a directed-route SMP (class 0x81) Get (0x01) to the server, as tests/test_dispatch
    # sends one; the server answers it (a GetResp back to the client, not counted: sent)
    lab = build(load_spec("lab"))
    srv = FabricServer(lab.fabric, "unused")
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        ours.setblocking(False)
        theirs.settimeout(0)
        node = srv.sim.node_of(lab.fabric.find("sched-worker1 mlx5_0"))
        cl = Client(0, 1000, node.ports[1], 0, False, "w1", ours)
        srv.transport.attach(cl)
        for _ in range(2):
            mad = dr_smp(Attr.NODE_INFO, [1], tid=7).ljust(256, b"\0")
            theirs.send(simwire.request(0xFFFF, 0, mad))
            srv.transport.receive(cl)
        live = LiveFabric(srv, lab, VirtualClock())
        stats = admin_requests.answer(live, {"op": "stats"})  # as the API asks for them
    finally:
        srv.close()
        theirs.close()
    assert stats["classes"] == [{"class": "0x81", "method": "0x01", "mads": 2}]
    text = metrics_small.text(metrics_small.server_families(stats)).decode()
    assert 'fabriclab_server_mads_by_class_total{class="0x81",method="0x01"} 2.0' in text
    assert "fabriclab_server_mads_total 2.0" in text
    assert "fabriclab_server_clients 1.0" in text  # the one tool attached


def test_openapi_states_the_text_format_and_the_error(fab):
    doc = fab.app().openapi()["paths"]["/metrics"]["get"]["responses"]
    assert set(doc["200"]["content"]) == {"text/plain"}
    assert "error" in doc["503"]["content"]["application/json"]["schema"]["properties"]
