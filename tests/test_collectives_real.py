"""Collectives on a running fabric routed by the real OpenSM: 'collective --apply' moves
the counters the real perfquery reads on exactly the ports the estimate names, and
nccl-tests' binaries from 'fabriclab shims' run under a Slurm-like launch."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from fabric_server import fabric_up
from helpers import counter, wait_for

from fabriclab.formats import nccl_tests as nt
from fabriclab.model.lookup import lookup

SPEC = str(Path(__file__).parent / "specs" / "coll-rails.yaml")
MAD_NOISE = 1 << 20  # bytes: what the tools' own MADs may add to a port


def _ports(f) -> dict[str, tuple[int, int]]:
    """Every cabled port of the fabric as the estimate names it, with the LID and port
    number perfquery takes (a switch's ports answer at its port 0's LID)."""
    out = {}
    for node in f.cluster.fabric.nodes:
        doc = lookup(f.cluster, str(node.name))["nodes"][0]
        lid0 = doc["ports"][0]["lid"] if doc["type"] == "switch" else None
        for p in node.iter_ports():
            if p.peer is None or p.num == 0:
                continue
            if doc["type"] == "switch":
                lid = lid0
            else:
                lid = next(x["lid"] for x in doc["ports"] if x["port"] == p.num)
            out[f"{node.name}[{p.num}]"] = (lid, p.num)
    return out


def _xmit(f, where: tuple[int, int]) -> int:
    out = f.run("r8", "perfquery", "-x", str(where[0]), str(where[1])).stdout
    return counter(out, "PortXmitData")


def _flows_done(f) -> bool:
    doc = json.loads(f.ok("traffic", "--name", f.name, "list", "--json"))
    s = doc["summary"]
    return s["flows"] > 0 and s["states"]["done"] == s["flows"]


def test_apply_moves_the_counters_on_exactly_the_ports_reported(real_tools, tmp_path):
    with fabric_up(SPEC, tmp_path, sm=True, extra=["--virtual-clock"]) as f:
        wait_for(lambda: "SUBNET UP" in f.opensm_log(), 60, "OpenSM's SUBNET UP")
        ports = _ports(f)
        switch_ports = {k: v for k, v in ports.items() if k.startswith("IB-")}
        before = {k: _xmit(f, v) for k, v in switch_ports.items()}
        hca_before = {k: _xmit(f, v) for k, v in ports.items() if k.startswith(("r1/", "r2/"))}
        # ranks on crossed rails: the ring leaves each tray by one rail and enters the
        # next by another, through the spine
        out = f.ok(
            "collective", "--name", f.name, "--op", "all-reduce", "--size", "256M",
            "--nodes", "r1:0,r2:1,r3:2,r4:3", "--apply", "--json",
        )  # fmt: skip
        d = json.loads(out)
        assert d["flows"]["count"] > 0 and d["algorithm"] == "Ring"
        loaded = {x["from"]: x["bytes"] for x in d["links"]}
        assert any(k.startswith("IB-SPINE") for k in loaded)
        f.ok("clock", "--name", f.name, "advance", "10")
        wait_for(lambda: _flows_done(f), 30, "the collective's flows to be done")
        for name, where in switch_ports.items():
            moved = (_xmit(f, where) - before[name]) * 4  # PortXmitData counts 4-byte words
            if name in loaded:  # its bytes, with each packet's headers
                assert loaded[name] <= moved <= loaded[name] * 1.02 + MAD_NOISE, (name, moved)
            else:
                assert moved < MAD_NOISE, (name, moved, "not in the estimate")
        for name, was in hca_before.items():
            moved = (_xmit(f, ports[name]) - was) * 4
            assert (name in loaded) == (moved > MAD_NOISE), (name, moved)


def test_nccl_tests_binaries_from_shims_under_slurm(real_tools, tmp_path):
    with fabric_up(SPEC, tmp_path, extra=["--virtual-clock", "--routed"]) as f:
        bin_dir = tmp_path / "bin"
        f.ok("shims", "--name", f.name, "r1", str(bin_dir))
        env = dict(f.env, SLURM_JOB_NODELIST="r[1-2]", SLURM_NTASKS="2", SLURM_PROCID="0")
        r = subprocess.run(
            [str(bin_dir / "all_reduce_perf"), "-b", "1M", "-e", "64M", "-f", "4", "-g", "4"],
            env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        rows = nt.parse_rows(r.stdout)
        assert [x.size for x in rows] == [1 << 20, 4 << 20, 16 << 20, 64 << 20]
        assert r.stdout.count("#  Rank") == 8 and " on         r2 device  3 " in r.stdout
        assert rows[-1].out_of_place.busbw > rows[0].out_of_place.busbw
        # its bytes went on the fabric: (warmup + iterations) x 2, every size
        f.ok("clock", "--name", f.name, "advance", "30")
        wait_for(lambda: _flows_done(f), 30, "the benchmark's flows to be done")
        rank1 = f.run("r2", "perfquery", "-x").stdout
        assert counter(rank1, "PortRcvData") * 4 > 25 * 2 * (64 << 20) * 2 * 7 / 8 / 4 / 4
        env["SLURM_PROCID"] = "1"  # only rank 0's process prints
        r = subprocess.run(
            [str(bin_dir / "all_reduce_perf"), "-b", "1M", "-e", "1M", "-g", "4"],
            env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path,
        )  # fmt: skip
        assert r.returncode == 0 and r.stdout == "", r.stderr


def test_a_failed_uplink_under_opensm_raises_the_time(real_tools, tmp_path):
    spec = str(Path(__file__).parent / "specs" / "coll-oversub.yaml")
    with fabric_up(spec, tmp_path, sm=True) as f:
        wait_for(lambda: "SUBNET UP" in f.opensm_log(), 60, "OpenSM's SUBNET UP")
        ask = ("collective", "--name", f.name, "--op", "all-to-all", "--size", "1G",
               "--nodes", "n[01-08],n[17-24]", "--json")  # fmt: skip
        before = json.loads(f.ok(*ask))
        uplink = next(
            x["from"]
            for x in before["links"]
            if x["from"].startswith("IB-LEAF-01") and "SPINE" in x["to"]
        )
        leaf = f.cluster.fabric.find("IB-LEAF-01")
        since = len(f.opensm_log())
        f.ok("fault", "--name", f.name, "down", uplink)
        f.swept_after_trap(leaf.lid, since=since)  # OpenSM routed around it
        after = json.loads(f.ok(*ask))
        assert uplink not in {x["from"] for x in after["links"]}
        assert after["time_s"] > 1.5 * before["time_s"]
