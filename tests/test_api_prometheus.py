"""``/metrics`` scraped by the real Prometheus (Debian's): treydock/infiniband_exporter's
own recording rules (``infiniband.rules``, unchanged) load and produce series, the rate
Prometheus computes of a flow of known rate matches within 5 %, and a link taken down
shows in ``fabriclab_port_state_id`` within one scrape.

The fabric runs on its virtual clock, moved on at wall rate by a thread of the test, so
that Prometheus's time (the scrapes' wall-clock timestamps) and the fabric's agree: the
counters it scrapes grow as they would on a fabric under wall time, yet the test decides
what happens when (chosen over a wall-clock fabric, which this in-process fixture does
not make).  The fabric is driven under one lock, from that thread and the API's."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import uvicorn
from api_fabric import api_fabric
from helpers import free_port, started, wait_for

from fabriclab.api.app import make_app
from fabriclab.api.source import Source
from fabriclab.ib.packets import HEADER_WORDS

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
FIXTURES = Path(__file__).parent / "fixtures" / "infiniband_exporter"
RULES = FIXTURES / "infiniband.rules"
MTU = 4096  # the lab's NDR links' path MTU
RATE = 2_000_000_000  # the flow's payload, bytes per second
LEAF = "LAB-IBLEAF-01"


@pytest.fixture(autouse=True, scope="module")
def _prometheus_installed():
    """The install script installs Prometheus: missing, it is a failure, not a skip."""
    if not Path(PROMETHEUS).exists():
        pytest.fail(f"{PROMETHEUS} missing: run scripts/install-system-deps.sh")


def test_promtool_checks_the_exporters_rules():
    r = subprocess.run([PROMTOOL, "check", "rules", str(RULES)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout


class Ticker:
    """Moves the fabric's virtual clock on at wall rate, under ``lock``."""

    def __init__(self, live, lock: threading.Lock):
        self.live, self.lock = live, lock
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.error: BaseException | None = None

    def run(self) -> None:
        last = time.monotonic()
        try:
            while not self.stop.wait(0.05):
                now = time.monotonic()
                with self.lock:
                    self.live.advance(now - last)
                last = now
        except BaseException as e:  # the test fails on it
            self.error = e


def query(base: str, expr: str) -> list[dict]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as r:
        ans = json.load(r)
    assert ans["status"] == "success", ans
    return ans["data"]["result"]


def panel_queries(dashboard: str) -> dict[str, list[str]]:
    """Each panel's queries in one of the exporter's Grafana dashboards."""
    doc = json.loads((FIXTURES / dashboard).read_text())
    return {
        p["title"]: [t["expr"] for t in p.get("targets", []) if t.get("expr")]
        for p in doc["panels"]
    }


def guid_of(lay, name: str, port: int) -> str:
    i = lay.nodes["name"].index(name)
    row = next(r for r in lay.rows_of(i) if lay.ports["num"][r] == port)
    return "0x" + lay.ports["guid"][row]


def test_real_prometheus_scrapes_and_the_exporters_rules_work(tmp_path):
    (tmp_path / "fabric").mkdir()
    with api_fabric(tmp_path / "fabric") as f:
        lock = threading.Lock()
        plain = f.source._send

        def send(req: dict):
            with lock:
                return plain(req)

        source = Source(f.source.name, send, f.source.events_path)
        api_port, prom_port = free_port(), free_port()
        server = uvicorn.Server(
            uvicorn.Config(make_app(source), host="127.0.0.1", port=api_port, log_level="warning")
        )
        serving = threading.Thread(target=server.run, daemon=True)
        serving.start()
        ticker = Ticker(f.live, lock)
        rules = tmp_path / "infiniband.rules"
        shutil.copyfile(RULES, rules)
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
            f"rule_files:\n  - {rules}\n"
            "scrape_configs:\n  - job_name: fabriclab\n    metrics_path: /metrics\n"
            f"    static_configs:\n      - targets: ['127.0.0.1:{api_port}']\n"
        )
        argv = [
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
        ]
        base = f"http://127.0.0.1:{prom_port}"
        log = tmp_path / "prometheus.log"
        try:
            wait_for(lambda: server.started, 30, "the API serving")
            with lock:
                f.live.traffic_request(
                    "send", ["sched-worker1/mlx5_0", "sched-worker2/mlx5_0"], {"rate": RATE}
                )
            ticker.thread.start()
            with started(argv, log) as prom:

                def up() -> bool:
                    assert prom.poll() is None, log.read_text()[-2000:]
                    try:
                        return bool(query(base, 'up{job="fabriclab"} == 1'))
                    except OSError:
                        return False

                wait_for(up, 60, lambda: log.read_text()[-2000:])
                # the exporter's recording rules, unchanged, produce series
                recorded = wait_for(
                    lambda: query(base, "infiniband:switch_port_transmit_data_bytes:rate5m"),
                    60,
                    "the recording rule's series",
                )
                assert {"switch", "uplink", "uplink_port", "guid", "port"} <= set(
                    recorded[0]["metric"]
                )
                lay = source.layout()
                hca = guid_of(lay, "sched-worker1/mlx5_0", 1)
                want = RATE * (MTU + 4 * HEADER_WORDS) / MTU  # payload and headers
                series = f'infiniband_hca_port_transmit_data_bytes_total{{guid="{hca}",port="1"}}'

                def measured() -> float | None:
                    # the window filled with scrapes (rate() extrapolates a half-empty
                    # one only half a scrape interval back)
                    n = query(base, f"count_over_time({series}[10s])")
                    if not n or float(n[0]["value"][1]) < 10:
                        return None
                    got = query(base, f"rate({series}[10s])")
                    return float(got[0]["value"][1]) if got else None

                got = wait_for(measured, 60, "ten seconds of scrapes")
                assert ticker.error is None, ticker.error
                assert abs(got - want) / want < 0.05, (got, want)
                rec = query(
                    base,
                    'infiniband:switch_port_receive_data_bytes:rate5m{uplink="sched-worker1 mlx5_0"}',
                )
                # (a 5-minute rate of the few seconds scraped so far: moving, not yet
                # the flow's rate)
                assert rec and float(rec[0]["value"][1]) > 0

                # the exporter's dashboards' queries: all answer; those of traffic show it
                perf = panel_queries("grafana-ib-fabric-perf.json")
                health = panel_queries("grafana-ib-fabric-health.json")
                for exprs in [*perf.values(), *health.values()]:
                    for e in exprs:
                        query(base, e)  # (asserts success)
                for title in (
                    "Most active IB switches by bandwidth",
                    "Most active IB links by bandwidth",
                    "Most active IB switches by packet rate",
                    "Most active IB links by packet rate",
                ):
                    assert query(base, perf[title][0]), title

                # a link taken down: in the state series within one scrape
                leaf = guid_of(lay, LEAF, 5)
                state = f'fabriclab_port_state_id{{guid="{leaf}",port="5"}}'
                assert float(query(base, state)[0]["value"][1]) == 4
                with lock:
                    f.live.fault("down", f"{LEAF}[5]")
                t0 = time.monotonic()
                wait_for(lambda: float(query(base, state)[0]["value"][1]) == 1, 10, "Down")
                # the next scrape (<= 1 s away) carries it; a scrape and a query besides
                assert time.monotonic() - t0 < 2.5
                # and the health dashboard's "IB switch port link down" panel shows it
                (down,) = health["IB switch port link down"]
                shown = wait_for(lambda: query(base, down), 10, "the link-down panel")
                assert {(s["metric"]["switch"], s["metric"]["port"]) for s in shown} == {
                    (lay.nodes["desc"][lay.nodes["name"].index(LEAF)], "5")
                }
        finally:
            ticker.stop.set()
            if ticker.thread.is_alive():
                ticker.thread.join(10)
            server.should_exit = True
            serving.join(10)
