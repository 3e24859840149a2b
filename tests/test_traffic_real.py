"""Flows on a running fabric ('fabriclab up --sm --virtual-clock', the real OpenSM),
driven and read with the fabriclab command as a user does: a flow to a port that went
down retries, then fails with the reason once its retry count is spent, its packets
counted where perfquery reads them; stop tells how many flows it stopped; 'traffic
list' gives a summary, filters and JSON, fast with gb200-su's 20,592 flows."""

from __future__ import annotations

import json
import time

from fabric_server import fabric_up
from helpers import counter, wait_for

LEAF = "LAB-IBLEAF-01"


def _list(f, *args: str) -> dict:
    return json.loads(f.ok("traffic", "--name", f.name, "list", "--json", *args))


def test_a_flow_to_a_downed_port_retries_then_fails_with_the_reason(real_tools, tmp_path):
    with fabric_up("lab", tmp_path, sm=True, extra=["--virtual-clock"]) as f:
        leaf = f.cluster.fabric.find(LEAF)
        log_before = len(f.opensm_log())
        f.ok("fault", "--name", f.name, "down", f"{LEAF}[5]")  # sched-worker2's link
        f.swept_after_trap(leaf.lid, since=log_before)  # OpenSM routed the LID away
        r = f.fabriclab("traffic", "--name", f.name, "send", "sched-worker1", "sched-worker2")
        assert r.returncode == 2 and "want one of --bytes N or --rate R" in r.stderr
        f.ok(
            "traffic", "--name", f.name, "send", "sched-worker1", "sched-worker2", "--bytes", "1Gi"
        )
        f.ok("clock", "--name", f.name, "advance", "20")
        text = f.ok("traffic", "--name", f.name, "list")
        assert text.splitlines()[0] == "1 flow(s): 1 retrying"
        [flow] = _list(f)["flows"]
        assert (flow["state"], flow["delivered"], flow["sent"]) == ("retrying", 0, 4096)
        assert flow["reason"] == f"link {LEAF}[5] is down"
        assert (flow["timeout"], flow["retry_count"]) == (20, 7)  # NCCL's defaults
        # 60 s on: past 8 x 4.29 s, the queue pair's retries are spent
        f.ok("clock", "--name", f.name, "advance", "40")
        [flow] = _list(f)["flows"]
        assert flow["state"] == "failed"
        assert flow["reason"] == f"retry count exceeded: link {LEAF}[5] is down"
        assert flow["sent"] <= flow["size"] and flow["delivered"] == 0
        # its 8 sends were dropped at the leaf, which has no route for the LID: perfquery
        # reads them on the leaf port they came in by
        port = int(f.cluster.fabric.find("sched-worker1 mlx5_0").port(1).peer.num)
        pq = f.run("sched-worker1", "perfquery", str(leaf.lid), str(port)).stdout
        assert counter(pq, "PortRcvSwitchRelayErrors") == 8
        assert f.ok("traffic", "--name", f.name, "stop") == "stop: 0 flow(s)\n"
        # a flow at a rate between two of sched-worker1's HCAs runs; stop stops it
        f.ok(
            "traffic", "--name", f.name, "send", "sched-worker1/mlx5_0", "sched-worker1/mlx5_1",
            "--rate", "10GB/s", "--timeout", "14", "--retry-count", "3",
        )  # fmt: skip
        [flow] = _list(f, "--state", "running")["flows"]
        assert (flow["id"], flow["timeout"], flow["retry_count"]) == (2, 14, 3)
        assert f.ok("traffic", "--name", f.name, "stop") == "stop: 1 flow(s) 2\n"
        # a retrying flow whose route comes back runs again
        f.ok(
            "traffic", "--name", f.name, "send", "sched-worker1", "sched-worker2", "--bytes", "1Mi"
        )
        assert _list(f, "--id", "3")["flows"][0]["state"] == "retrying"
        f.ok("fault", "--name", f.name, "up", f"{LEAF}[5]")
        wait_for(
            lambda: _list(f, "--id", "3")["flows"][0]["state"] == "running",
            timeout=60,
            what="flow 3 running once OpenSM routed sched-worker2 again",
        )
        f.ok("clock", "--name", f.name, "advance", "1")
        assert _list(f, "--id", "3")["flows"][0]["state"] == "done"


def test_traffic_list_summary_filters_and_json(real_tools, tmp_path):
    with fabric_up("lab", tmp_path, sm=True, extra=["--virtual-clock"]) as f:
        f.ok("traffic", "--name", f.name, "all-to-all", "sched-worker[1-2]", "--rate", "1GB/s")
        f.ok(
            "traffic", "--name", f.name, "send", "sched-worker1", "sched-worker2", "--bytes", "4Ki"
        )
        f.ok("clock", "--name", f.name, "advance", "1")
        lines = f.ok("traffic", "--name", f.name, "list").splitlines()
        assert lines[0] == "3 flow(s): 2 running, 1 done"
        assert lines[1].startswith("sent 2000004096 B, delivered 2000004096 B, rate 2e+09 B/s")
        assert lines[2].split() == [
            "id", "from", "to", "state", "rate", "sent", "delivered", "size", "reason"
        ]  # fmt: skip
        assert len(lines) == 6
        doc = _list(f, "--state", "running", "--from", "sched-worker1")
        assert set(doc) == {"summary", "flows", "more"} and doc["more"] == 0
        assert [x["id"] for x in doc["flows"]] == [1]
        assert doc["summary"]["flows"] == 1 and doc["summary"]["states"]["running"] == 1
        assert [x["id"] for x in _list(f, "--to", "sched-worker2/mlx5_0")["flows"]] == [1, 3]
        assert _list(f, "--id", "2")["flows"][0]["from"] == "sched-worker2/mlx5_0"
        r = f.fabriclab("traffic", "--name", f.name, "list", "--state", "lost")
        assert r.returncode == 2
        assert r.stderr.startswith("error: --state: 'lost': want one of running")


def test_listing_20592_flows_is_fast(real_tools, tmp_path):
    """gb200-su's 144 trays all-to-all: the issue's 20,592 flows took 14.5 s to list."""
    with fabric_up("gb200-su", tmp_path, sm=True, extra=["--virtual-clock"]) as f:
        out = f.ok(
            "traffic", "--name", f.name, "all-to-all", "gb-r[01-08]-t[01-18]", "--rate", "1GB/s"
        )
        assert out.startswith("all-to-all: 20592 flow(s)")
        f.ok("clock", "--name", f.name, "advance", "1")
        t0 = time.monotonic()
        lines = f.ok("traffic", "--name", f.name, "list").splitlines()
        took = time.monotonic() - t0
        assert lines[0] == "20592 flow(s): 20592 running" and len(lines) == 2 + 1 + 20 + 1
        assert lines[-1].startswith("… 20572 more: 'traffic list --all'")
        assert took < 5, f"traffic list took {took:.1f} s"
        t0 = time.monotonic()
        lines = f.ok("traffic", "--name", f.name, "list", "--all").splitlines()
        took = time.monotonic() - t0
        assert len(lines) == 2 + 1 + 20592
        assert took < 15, f"traffic list --all took {took:.1f} s"
        t0 = time.monotonic()
        doc = json.loads(f.ok("traffic", "--name", f.name, "list", "--all", "--json"))
        took = time.monotonic() - t0
        assert len(doc["flows"]) == 20592 and doc["more"] == 0
        assert took < 15, f"traffic list --all --json took {took:.1f} s"
        assert f.ok("traffic", "--name", f.name, "stop").startswith("stop: 20592 flow(s)")
