"""The other networks built in Linux ('up --networks'), seen by the real programs: ip
shows each endpoint's interfaces as the spec names them, ping reaches what the spec
cables and nothing else, the compute fabric's tools run in the tray's namespace as
before, and 'down' leaves no namespace, veth or process behind."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from fabric_server import fabric_up
from helpers import fl, no_timestamp, wait_for

PING = ("ping", "-c", "1", "-W", "2")
NODE_EXPORTER = shutil.which("prometheus-node-exporter") or "prometheus-node-exporter"


def _ns_left(name: str) -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(f"fl.{name}.")]


def test_lab_networks_as_ip_and_ping_see_them(real_tools, tmp_path):
    with fabric_up("lab", tmp_path, extra=["--networks", "--routed"]) as f:
        doc = json.loads(f.ok("networks", "--name", f.name, "--json"))
        addr = {
            (e["name"], i["network"]): i["address"].split("/")[0]
            for e in doc["endpoints"]
            if e["kind"] != "switch"
            for i in e["interfaces"]
        }
        assert len(_ns_left(f.name)) == 10  # 2 trays, their 2 BMCs, 3 service nodes, 3 switches
        out = f.ok("exec", "--name", f.name, "sched-worker1", "--", "ip", "-br", "addr")
        names = {line.split()[0].split("@")[0] for line in out.splitlines()}
        assert names == {"lo", "enp1s0f0np0", "enp1s0f1np1"}
        assert addr[("sched-worker1", "frontend")] in out

        def ping(src: str, dst: tuple[str, str]):
            return f.fabriclab("exec", "--name", f.name, src, "--", *PING, addr[dst])

        # routes as declared: the default through the front end's gateway, which its
        # switch answers; the BMC's network declares none
        routes = f.ok("exec", "--name", f.name, "sched-worker1", "--", "ip", "route")
        assert "default via 10.107.111.1 dev enp1s0f0np0" in routes, routes
        gw = f.fabriclab("exec", "--name", f.name, "sched-worker1", "--", *PING, "10.107.111.1")
        assert gw.returncode == 0, gw.stdout
        routes = f.ok("exec", "--name", f.name, "sched-worker1-bmc", "--", "ip", "route")
        assert "default" not in routes, routes
        # the controller over the front end, the storage node over the storage network
        assert ping("sched-worker1", ("sched-controller", "frontend")).returncode == 0
        assert ping("sched-worker1", ("sched-storage", "storage")).returncode == 0
        # a BMC only over out-of-band management: from the controller, not from a tray
        assert ping("sched-controller", ("sched-worker2-bmc", "oob")).returncode == 0
        r = ping("sched-worker1", ("sched-worker2-bmc", "oob"))
        assert r.returncode != 0 and " 0 received" in r.stdout  # the gateway routes nowhere
        # lldpd in every namespace: each interface's neighbour is the switch port the
        # spec cables it to
        want = {
            i["name"]: i["peer"]
            for e in doc["endpoints"]
            if e["name"] == "sched-worker1"
            for i in e["interfaces"]
        }

        def neighbours() -> dict[str, str]:
            out = f.ok("exec", "--name", f.name, "sched-worker1", "--", "lldpctl", "-f", "keyvalue")
            got: dict[str, dict[str, str]] = {}
            for line in out.splitlines():
                key, _, value = line.partition("=")
                parts = key.split(".")
                if len(parts) >= 4 and parts[0] == "lldp":
                    got.setdefault(parts[1], {})[".".join(parts[2:])] = value
            return {
                iface: f"{d.get('chassis.name')}[{d.get('port.ifname', '')[3:]}]"
                for iface, d in got.items()
            }

        assert wait_for(lambda: neighbours() == want or None, 30, "LLDP neighbours") is True
        # every cable as LLDP finds it, the spec's
        r = f.fabriclab("check", "--name", f.name, "--lldp", "--json")
        assert (r.returncode, json.loads(r.stdout)) == (0, {"problems": []}), r.stderr
        # the compute fabric's view from the same tray, through the host library
        ibstat = f.ok("exec", "--name", f.name, "sched-worker1", "--", "ibstat", "-l")
        assert ibstat.split() == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
        # a process left running in a namespace goes with the fabric
        sleeper = subprocess.Popen(
            ["ip", "netns", "exec", f"fl.{f.name}.sched-login", "sleep", "600"]
        )
    try:
        assert sleeper.wait(timeout=30) != 0  # ended by 'down'
    finally:
        sleeper.kill()
    assert _ns_left(f.name) == []
    links = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True).stdout
    assert not [line for line in links.splitlines() if line.startswith("fl")]


def test_a_swapped_ethernet_cable_shows_in_lldp_and_check(real_tools, tmp_path):
    swap = "LAB-STOR-01[2],LAB-STOR-01[3]"  # the two trays' storage cables exchanged
    with fabric_up("lab", tmp_path, extra=["--networks", "--swap", swap]) as f:
        r = f.fabriclab("check", "--name", f.name, "--lldp")
        assert r.returncode == 1, r.stderr
        w1, w2 = "sched-worker1/enp1s0f1np1", "sched-worker2/enp1s0f1np1"
        assert r.stdout.splitlines() == [
            f"wrong cable LAB-STOR-01[2] <-> {w2} (the spec cables LAB-STOR-01[2] to {w1}; "
            f"the spec cables {w2} to LAB-STOR-01[3])",
            f"wrong cable LAB-STOR-01[3] <-> {w1} (the spec cables LAB-STOR-01[3] to {w2}; "
            f"the spec cables {w1} to LAB-STOR-01[2])",
        ]
        # the tray's own lldpctl names the port it is really cabled to; the spec's
        # listing stays the intended cabling
        out = f.ok("exec", "--name", f.name, "sched-worker1", "--", "lldpctl", "-f", "keyvalue")
        assert "lldp.enp1s0f1np1.port.ifname=swp3" in out.splitlines()
        doc = json.loads(f.ok("networks", "--name", f.name, "--json"))
        peers = {
            i["name"]: i["peer"]
            for e in doc["endpoints"]
            if e["name"] == "sched-worker1"
            for i in e["interfaces"]
        }
        assert peers["enp1s0f1np1"] == "LAB-STOR-01[2]"
        # a fault names the cable at the port as built
        out = f.ok("fault", "--name", f.name, "net", "LAB-STOR-01[2]", "down", "--json")
        assert json.loads(out)["links"] == [f"LAB-STOR-01[2] -- {w2}"]
    bad = [
        (
            ["--swap", swap],
            "--swap LAB-STOR-01[2],LAB-STOR-01[3]: Ethernet cables are built only with --networks",
        ),
        (
            ["--networks", "--swap", "LAB-STOR-01[2],sched-worker1/mlx5_0[1]"],
            "an Ethernet end and an InfiniBand port: swap alike",
        ),
        (
            ["--networks", "--swap", "LAB-STOR-01[99],LAB-STOR-01[2]"],
            "LAB-STOR-01[99]: LAB-STOR-01 (NVIDIA SN5600) has no port 99",
        ),
    ]
    for extra, message in bad:
        r = fl("up", "lab", "--name", "badswap", "--detach", *extra)
        assert r.returncode == 2 and r.stderr.strip().endswith(message), r.stderr
    assert _ns_left("badswap") == []


def test_a_crashed_fabrics_namespaces_are_cleaned_by_the_next_up_and_by_down(real_tools, tmp_path):
    with fabric_up("lab", tmp_path, extra=["--networks"]) as f:
        [row] = json.loads(f.ok("status", "--json"))
        os.kill(row["pid"], signal.SIGKILL)  # no teardown: namespaces and lldpds stay
        wait_for(lambda: not os.path.exists(f"/proc/{row['pid']}"), 30, "the server to die")
        left = _ns_left(f.name)
        assert len(left) == 10
        ino = os.stat(f"/run/netns/{left[0]}").st_ino
        # the next up of the same name removes them and builds anew
        r = f.fabriclab("up", "lab", "--name", f.name, "--detach", "--networks")
        assert r.returncode == 0, r.stderr
        assert len(_ns_left(f.name)) == 10
        assert os.stat(f"/run/netns/{left[0]}").st_ino != ino
        [row] = json.loads(f.ok("status", "--json"))
        os.kill(row["pid"], signal.SIGKILL)
        wait_for(lambda: not os.path.exists(f"/proc/{row['pid']}"), 30, "the server to die")
        inside = {
            int(pid)
            for ns in _ns_left(f.name)
            for pid in subprocess.run(
                ["ip", "netns", "pids", ns], capture_output=True, text=True
            ).stdout.split()
        }
        assert len(inside) >= 10  # an lldpd in each, at least
    # fabric_up's down: a crashed fabric's namespaces, and the processes in them, go
    assert _ns_left(f.name) == []
    assert [p for p in inside if os.path.exists(f"/proc/{p}")] == []


def test_networks_need_a_spec_that_declares_them(tmp_path):
    with fabric_up("lab", tmp_path) as f:  # declared, not built
        r = f.fabriclab("check", "--name", f.name, "--lldp")
        assert r.returncode == 2
        assert r.stderr.strip() == (
            f"error: --lldp: fabric {f.name!r} runs without its networks (up --networks)"
        ), r.stderr
    spec = str(Path(__file__).parent / "specs" / "coll-rails.yaml")
    r = fl("up", spec, "--name", "nonets", "--networks", "--detach")
    assert r.returncode == 2
    assert r.stderr.strip().endswith(f"--networks: {spec} declares no networks"), r.stderr
    assert _ns_left("nonets") == []


def _addresses(f) -> dict[tuple[str, str], str]:
    doc = json.loads(f.ok("networks", "--name", f.name, "--json"))
    return {
        (e["name"], i["network"]): i["address"].split("/")[0]
        for e in doc["endpoints"]
        if e["kind"] != "switch"
        for i in e["interfaces"]
    }


def test_the_oob_switch_fails_while_the_compute_fabric_is_fine(real_tools, tmp_path):
    with fabric_up("lab", tmp_path, sm=True, extra=["--networks"]) as f:
        wait_for(lambda: "SUBNET UP" in f.opensm_log(), 60, "OpenSM's SUBNET UP")
        addr = _addresses(f)
        bmc = addr[("sched-worker2-bmc", "oob")]

        def bmc_answers() -> bool:
            r = f.fabriclab("exec", "--name", f.name, "sched-controller", "--", *PING, bmc)
            return r.returncode == 0

        assert bmc_answers()
        ib = (f.run("sched-worker1", "ibnetdiscover").stdout, f.ok("topology", "--name", f.name))
        out = f.ok("fault", "--name", f.name, "net", "LAB-OOB-01", "down")
        assert out.strip() == "switch LAB-OOB-01: down, 3 link(s)"
        assert not bmc_answers()
        # the compute fabric: as it was
        assert "State: Active" in f.run("sched-worker1", "ibstat").stdout
        assert no_timestamp(f.run("sched-worker1", "ibnetdiscover").stdout) == no_timestamp(ib[0])
        assert f.ok("topology", "--name", f.name) == ib[1]
        f.ok("fault", "--name", f.name, "net", "LAB-OOB-01", "up")
        wait_for(bmc_answers, 30, "the BMC answering again")
        names = [
            (e["name"], e["object_name"])
            for e in map(json.loads, f.ok("events", "--name", f.name, "--json").splitlines())
        ]
        assert ("Switch is down", "LAB-OOB-01") in names and ("Switch is up", "LAB-OOB-01") in names
        # delay and loss need the kernel's netem: one line where it has none
        r = f.fabriclab("fault", "--name", f.name, "net", "LAB-OOB-01[2]", "--delay", "5")
        if r.returncode != 0:
            assert r.returncode == 2 and r.stderr.strip() == (
                "error: --delay: needs the kernel's sch_netem, which this machine's kernel does not have"
            )


def _iperf(f, server: str, client: str, address: str) -> float:
    """Mb/s a 2-second iperf3 run gets from ``client`` to ``server``'s ``address``."""
    return _iperf_doc(f, server, client, address)["end"]["sum_received"]["bits_per_second"] / 1e6


def _iperf_doc(f, server: str, client: str, address: str) -> dict:
    """iperf3's JSON report of a 2-second run from ``client`` to ``server``'s
    ``address``."""
    srv = subprocess.Popen(
        ["ip", "netns", "exec", f"fl.{f.name}.{server}", "iperf3", "-s", "-1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def run():
            r = f.fabriclab(
                "exec", "--name", f.name, client, "--", "iperf3", "-c", address, "-t", "2", "-J"
            )
            return json.loads(r.stdout) if r.returncode == 0 else None

        return wait_for(run, 30, "iperf3 to connect")
    finally:
        srv.kill()
        srv.wait()


def test_a_congested_storage_link_caps_iperf3(real_tools, tmp_path):
    with fabric_up("lab", tmp_path, extra=["--networks", "--routed"]) as f:
        addr = _addresses(f)
        f.ok("fault", "--name", f.name, "net", "sched-worker1/enp1s0f1np1", "--rate", "200mbit")
        capped = _iperf(f, "sched-storage", "sched-worker1", addr[("sched-storage", "storage")])
        assert 180 <= capped <= 220, capped  # within 10 % of the rate set
        free = _iperf(
            f, "sched-controller", "sched-worker1", addr[("sched-controller", "frontend")]
        )
        assert free > 5 * 220, free  # the front end unaffected
        f.ok("fault", "--name", f.name, "net", "sched-worker1/enp1s0f1np1", "--rate", "off")
        lifted = _iperf(f, "sched-storage", "sched-worker1", addr[("sched-storage", "storage")])
        assert lifted > 5 * 220, lifted
        # the tray's interface counters, as node_exporter's netdev collector reads them in
        # its namespace, move by what iperf3 sent
        exporter = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "fabriclab.cli",
                "exec",
                "--name",
                f.name,
                "sched-worker1",
                "--",
                NODE_EXPORTER,
                "--collector.disable-defaults",
                "--collector.netdev",
                "--web.listen-address=127.0.0.1:9100",
            ],
            env=f.env,
            cwd=f.workdir,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:

            def tx() -> float | None:
                r = f.fabriclab(
                    "exec",
                    "--name",
                    f.name,
                    "sched-worker1",
                    "--",
                    "curl",
                    "-sf",
                    "127.0.0.1:9100/metrics",
                )
                for line in r.stdout.splitlines():
                    if line.startswith('node_network_transmit_bytes_total{device="enp1s0f1np1"}'):
                        return float(line.split()[-1])
                return None

            before = wait_for(tx, 30, "node_exporter's netdev metrics in sched-worker1")
            sent = _iperf_doc(
                f, "sched-storage", "sched-worker1", addr[("sched-storage", "storage")]
            )
            moved = tx() - before
            assert (
                sent["end"]["sum_sent"]["bytes"]
                <= moved
                <= 1.2 * sent["end"]["sum_sent"]["bytes"] + 1e6
            ), moved
            sysfs = f.ok(
                "exec",
                "--name",
                f.name,
                "sched-worker1",
                "--",
                "cat",
                "/sys/class/net/enp1s0f1np1/statistics/tx_bytes",
            )
            assert int(sysfs) >= before + sent["end"]["sum_sent"]["bytes"]
        finally:
            exporter.terminate()
            exporter.wait(timeout=30)


def _events(f) -> list[dict]:
    return [json.loads(line) for line in f.ok("events", "--name", f.name, "--json").splitlines()]


def _carrier(f, node: str, iface: str) -> bool:
    """Whether ``node``'s ``iface`` has its carrier (its cable up at both ends)."""
    out = f.ok("exec", "--name", f.name, node, "--", "ip", "-br", "link", "show", iface)
    return "LOWER_UP" in out


def test_network_faults_flap_are_journaled_resumed_and_counted(real_tools, tmp_path, monkeypatch):
    with fabric_up("lab", tmp_path, extra=["--networks", "--virtual-clock"]) as f:
        # a flap on the fabric's (virtual) clock: down the first half of each period
        out = f.ok(
            "fault",
            "--name",
            f.name,
            "net",
            "LAB-FE-01[3]",
            "flap",
            "--period",
            "10s",
            "--count",
            "2",
        )
        assert out.strip() == "link LAB-FE-01[3]: flapping 2 time(s), 10 s each, 1 link(s)"
        seen = []
        for _ in range(4):
            seen.append(
                wait_for(
                    lambda: str(_carrier(f, "sched-worker1", "enp1s0f0np0")),
                    10,
                    "the tray's carrier",
                )
            )
            f.ok("clock", "--name", f.name, "advance", "5")
        assert seen == ["False", "True", "False", "True"]
        faults = json.loads(f.ok("networks", "--name", f.name, "--json"))["faults"]
        assert faults == {"down": [], "rates": {}, "flaps": []}  # the flap is over
        log = _events(f)
        flapped = [e["event_type"] for e in log if e["object_name"].startswith("LAB-FE-01[3]")]
        assert flapped == ["9001", "9002", "9001", "9002"]
        # faults in force: a link down, a rate cap, a flap half way; counted in /metrics
        f.ok("fault", "--name", f.name, "net", "LAB-OOB-01[2]", "down")
        f.ok("fault", "--name", f.name, "net", "sched-worker1/enp1s0f1np1", "--rate", "200mbit")
        f.ok("fault", "--name", f.name, "net", "LAB-FE-01[4]", "flap", "--period", "1m")
        before = json.loads(f.ok("networks", "--name", f.name, "--json"))["faults"]
        assert before["down"] == ["LAB-FE-01[4]", "LAB-OOB-01[2]"]
        assert set(before["rates"]) == {"LAB-STOR-01[2]", "sched-worker1/enp1s0f1np1"}
        from prometheus_client.parser import text_string_to_metric_families
        from starlette.testclient import TestClient

        from fabriclab.api.app import make_app
        from fabriclab.api.source import Source

        monkeypatch.setenv("FABRICLAB_STATE_DIR", f.env["FABRICLAB_STATE_DIR"])
        text = TestClient(make_app(Source.remote(f.name))).get("/metrics").text
        fams = {m.name: m for m in text_string_to_metric_families(text)}
        got = {s.labels["kind"]: s.value for s in fams["fabriclab_net_faults_active"].samples}
        assert got == {"down": 2, "rate": 2, "flap": 1}
        f.ok("down", "--name", f.name)
        # brought back from the journal, without their events written again
        r = f.fabriclab(
            "up", "lab", "--name", f.name, "--detach", "--networks", "--virtual-clock", "--resume"
        )
        assert r.returncode == 0, r.stderr
        after = json.loads(f.ok("networks", "--name", f.name, "--json"))["faults"]
        assert after == before
        assert not _carrier(f, "sched-worker1-bmc", "eth0")
        assert not _carrier(f, "sched-worker2", "enp1s0f0np0")
        qdisc = f.ok(
            "exec",
            "--name",
            f.name,
            "sched-worker1",
            "--",
            "tc",
            "qdisc",
            "show",
            "dev",
            "enp1s0f1np1",
        )
        assert "tbf" in qdisc and "rate 200Mbit" in qdisc
        assert len(_events(f)) == len(log) + 3
        f.ok("clock", "--name", f.name, "advance", "30")  # the flap goes on where it was
        assert wait_for(lambda: _carrier(f, "sched-worker2", "enp1s0f0np0"), 10, "flap's up")
