"""The real node_exporter and Prometheus on trays' live /sys/class/infiniband
('fabriclab sysfs'): a GB200 tray's devices and rates, a link taken down, traffic of a
known size counted to the byte, and Prometheus scraping two trays' exporters.

The tests start everything themselves on free loopback ports (Debian's
prometheus-node-exporter and prometheus, installed by scripts/install-system-deps.sh).
"""

from __future__ import annotations

import json
import shutil
import sys
import urllib.parse
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest
from fabric_server import fabric_up
from helpers import free_port, started, wait_for
from prometheus_client.parser import text_string_to_metric_families

from fabriclab.ib.packets import HEADER_WORDS
from fabriclab.sim.fabric.state import MAD_WORDS

NODE_EXPORTER = shutil.which("prometheus-node-exporter") or "prometheus-node-exporter"
PROMETHEUS = shutil.which("prometheus") or "prometheus"
LINK_DOWNED_MLX5_1 = ("node_infiniband_link_downed_total", "mlx5_1")
T1, T2 = "gb-r01-t01", "gb-r01-t02"
DEVICES = ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
# what node_exporter's infiniband collector exports per port from the counters/ set a
# ConnectX host has (node_exporter collector/infiniband_linux.go; procfs
# sysfs/class_infiniband.go), plus state, physical state and rate
PORT_SERIES = {
    f"node_infiniband_{n}"
    for n in (
        "excessive_buffer_overrun_errors_total",
        "link_downed_total",
        "link_error_recovery_total",
        "local_link_integrity_errors_total",
        "multicast_packets_received_total",
        "multicast_packets_transmitted_total",
        "physical_state_id",
        "port_constraint_errors_received_total",
        "port_constraint_errors_transmitted_total",
        "port_data_received_bytes_total",
        "port_data_transmitted_bytes_total",
        "port_discards_transmitted_total",
        "port_errors_received_total",
        "port_packets_received_total",
        "port_packets_transmitted_total",
        "port_receive_remote_physical_errors_total",
        "port_receive_switch_relay_errors_total",
        "port_transmit_wait_total",
        "rate_bytes_per_second",
        "state_id",
        "symbol_error_total",
        "unicast_packets_received_total",
        "unicast_packets_transmitted_total",
        "vl15_dropped_total",
    )
}


@pytest.fixture(scope="module")
def exporters():
    for tool in (NODE_EXPORTER, PROMETHEUS):
        if shutil.which(tool) is None:
            pytest.fail(f"missing {tool}: run scripts/install-system-deps.sh")


def _get(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.read().decode()
    except OSError:
        return None


@contextmanager
def _tray_view(f, tray: str, root: Path, tmp: Path):
    """'fabriclab sysfs' keeping ``tray``'s tree under ``root``, and node_exporter on it;
    yields the exporter's URL."""
    sysfs_argv = [sys.executable, "-m", "fabriclab.cli", "sysfs", "--name", f.name]
    sysfs_argv += [tray, str(root), "--period", "0.2"]
    log = tmp / f"sysfs-{tray}.log"
    with started(sysfs_argv, log, env=f.env, cwd=f.workdir) as writer:

        def written() -> bool:
            assert writer.poll() is None, f"fabriclab sysfs exited: {log.read_text()}"
            return (root / "class/infiniband/mlx5_3/ports/1/hw_counters").is_dir()

        wait_for(written, 60, "the tree")
        port = free_port()
        argv = [NODE_EXPORTER, f"--path.sysfs={root}", "--collector.disable-defaults"]
        argv += ["--collector.infiniband", f"--web.listen-address=127.0.0.1:{port}"]
        with started(argv, tmp / f"node_exporter-{tray}.log"):
            url = f"http://127.0.0.1:{port}/metrics"
            wait_for(lambda: _get(url), 30, "node_exporter")
            yield url


def _scrape(url: str) -> dict[tuple[str, str], float]:
    """(series name, device) -> value for port 1 (and the collector's success)."""
    text = _get(url)
    assert text is not None, url
    out: dict[tuple[str, str], float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.startswith("node_infiniband_") or s.name == "node_scrape_collector_success":
                key = s.labels.get("device") or s.labels.get("collector", "")
                out[s.name, key] = s.value
    return out


def test_node_exporter_reads_a_gb200_tray(exporters, real_tools, tmp_path):
    extra = ["--virtual-clock", "--trays", "2"]
    with fabric_up("gb200-su", tmp_path / "fab", sm=True, extra=extra) as f:
        root = tmp_path / "sys"
        # bad input: one error line each, nothing written
        for args, message in (
            (["--name", f.name, "nope"], "error: nope: no such tray in this fabric"),
            (["--name", f.name + "x", T1], f"error: {f.name}x: "),
        ):
            r = f.fabriclab("sysfs", *args, str(root), "--once")
            assert r.returncode == 2 and r.stderr.startswith(message), r.stderr
            assert len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert not root.exists()
        with _tray_view(f, T1, root, tmp_path) as url:

            def active():
                m = _scrape(url)
                return m if all(m[("node_infiniband_state_id", d)] == 4 for d in DEVICES) else None

            m = wait_for(active, 120, "SUBNET UP: every port ACTIVE")
            assert m[("node_scrape_collector_success", "infiniband")] == 1
            names = {n for n, d in m if n.startswith("node_infiniband_") and d}
            assert PORT_SERIES <= names, PORT_SERIES - names
            assert {d for n, d in m if n.startswith("node_infiniband_")} == set(DEVICES)
            for d in DEVICES:
                assert {n for n, dd in m if dd == d} >= PORT_SERIES | {"node_infiniband_info"}
                assert m[("node_infiniband_rate_bytes_per_second", d)] == 5e10  # 4x NDR
                assert m[("node_infiniband_physical_state_id", d)] == 5

            # traffic of a known size: 10 MB from mlx5_0 to the other tray's mlx5_0
            size = 10_000_000
            before = _scrape(url)
            f.ok("traffic", "--name", f.name, "send", f"{T1}/mlx5_0", f"{T2}/mlx5_0",
                "--bytes", str(size))  # fmt: skip
            f.ok("clock", "--name", f.name, "advance", "1")
            packets = -(-size // 4096)  # whole 4 KiB packets (the path MTU) and the rest

            def moved():
                m = _scrape(url)
                dp = (
                    m[("node_infiniband_port_packets_transmitted_total", "mlx5_0")]
                    - before[("node_infiniband_port_packets_transmitted_total", "mlx5_0")]
                )
                return (m, dp) if dp >= packets else None

            after, dp = wait_for(moved, 30, "the flow's packets in the tree")
            db = (
                after[("node_infiniband_port_data_transmitted_bytes_total", "mlx5_0")]
                - before[("node_infiniband_port_data_transmitted_bytes_total", "mlx5_0")]
            )
            # the flow: its payload plus LRH, BTH and ICRC per packet; anything else
            # the port sent meanwhile is the SM's MADs answered (256-byte MADs)
            mads = dp - packets
            flow_bytes = size + packets * HEADER_WORDS * 4
            assert db == flow_bytes + mads * MAD_WORDS * 4, (db, flow_bytes, mads)
            assert 0 <= mads < 50

            # a link taken down shows in the state and its counter once the tree refreshes
            # (each a file of its own, written one after the other: a scrape between the
            # two sees one moved, so the wait is for both)
            f.ok("fault", "--name", f.name, "down", f"{T1}/mlx5_1[1]")

            def down() -> dict | None:
                m = _scrape(url)
                state = m[("node_infiniband_state_id", "mlx5_1")]
                return m if state == 1 and m[LINK_DOWNED_MLX5_1] >= 1 else None

            m = wait_for(down, 30, "state_id 1 and link_downed 1")
            assert m[("node_infiniband_physical_state_id", "mlx5_1")] == 2  # Polling
            assert m[LINK_DOWNED_MLX5_1] == 1
            assert m[("node_infiniband_state_id", "mlx5_0")] == 4
            f.ok("fault", "--name", f.name, "up", f"{T1}/mlx5_1[1]")
            wait_for(
                lambda: _scrape(url)[("node_infiniband_physical_state_id", "mlx5_1")] == 5,
                30,
                "LinkUp again",
            )


def _query(base: str, q: str) -> list[dict]:
    text = _get(f"{base}/api/v1/query?query={urllib.parse.quote(q)}")
    if text is None:
        return []
    doc = json.loads(text)
    return doc["data"]["result"] if doc.get("status") == "success" else []


def test_prometheus_scrapes_two_trays(exporters, real_tools, tmp_path):
    with fabric_up("gb200-su", tmp_path / "fab", sm=True, extra=["--trays", "2"]) as f:
        with (
            _tray_view(f, T1, tmp_path / "sys1", tmp_path) as u1,
            _tray_view(f, T2, tmp_path / "sys2", tmp_path) as u2,
        ):
            targets = [u.split("/")[2] for u in (u1, u2)]
            config = tmp_path / "prometheus.yml"
            config.write_text(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                "scrape_configs:\n  - job_name: trays\n    static_configs:\n"
                f"      - targets: {json.dumps(targets)}\n"
            )
            port = free_port()
            argv = [PROMETHEUS, f"--config.file={config}", f"--web.listen-address=127.0.0.1:{port}"]
            argv += [f"--storage.tsdb.path={tmp_path / 'tsdb'}"]
            with started(argv, tmp_path / "prometheus.log"):
                base = f"http://127.0.0.1:{port}"
                up = wait_for(
                    lambda: len(r := _query(base, "up == 1")) == 2 and r,
                    90,
                    "both trays scraped",
                )
                assert sorted(x["metric"]["instance"] for x in up) == sorted(targets)
                rates = wait_for(
                    lambda: (
                        len(r := _query(base, "node_infiniband_rate_bytes_per_second")) == 8 and r
                    ),
                    60,
                    "the infiniband series of both trays",
                )
                assert {float(x["value"][1]) for x in rates} == {5e10}
                assert {x["metric"]["device"] for x in rates} == set(DEVICES)
                # wall-clock traffic at a set rate: Prometheus's rate() over the sender's
                # data counter matches it (payload plus 24 header bytes per 4 KiB packet)
                rate = 2e9
                series = (
                    "node_infiniband_port_data_transmitted_bytes_total"
                    f'{{instance="{targets[0]}",device="mlx5_2"}}'
                )
                start = float(_query(base, series)[0]["value"][1])  # scraped before the flow
                f.ok("traffic", "--name", f.name, "send", f"{T1}/mlx5_2", f"{T2}/mlx5_2",
                    "--rate", "2GB/s",
                )  # fmt: skip
                wire = rate * (4096 + HEADER_WORDS * 4) / 4096
                q = f"rate({series}[10s])"
                # once every sample in the window came after the flow began (each shows
                # more than a second of it sent: nothing else moves this counter by
                # gigabytes), the rate() over the window is the flow's alone
                wait_for(
                    lambda: _query(base, f"min_over_time({series}[10s]) > {start + rate}"),
                    60,
                    "a whole 10 s window of samples taken while the flow ran",
                    interval=0.5,
                )
                got = _query(base, q)
                assert got, q
                assert abs(float(got[0]["value"][1]) / wire - 1) < 0.05
