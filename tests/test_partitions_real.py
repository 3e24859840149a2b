"""Partitions with the real OpenSM and infiniband-diags against 'fabriclab up': what
OpenSM's pkey manager writes (osm_pkey_mgr.c) lands where it writes it and reads back
through the real smpquery and saquery; inter-switch links lose enforcement."""

from __future__ import annotations

import os
import re
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from fabric_server import fabric_up
from helpers import run_tool, served
from realtools import UMAD2SIM

from fabriclab.model.build import build
from fabriclab.sim.partitions import share_partition
from fabriclab.spec.load import load_spec

pytestmark = pytest.mark.realtools

LEAF = "MF0;LAB-IBLEAF-01:MQM9701/U1"
SPINE = "MF0;LAB-IBSPINE-01:MQM9701/U1"


def _enforcement(text: str) -> tuple[int, int]:
    inb = re.search(r"^PartEnforceInb:\.+(\d+)$", text, re.M)
    outb = re.search(r"^PartEnforceOutb:\.+(\d+)$", text, re.M)
    assert inb and outb, text
    return int(inb.group(1)), int(outb.group(1))


def test_opensm_clears_enforcement_on_inter_switch_links(real_tools, tmp_path):
    """OpenSM's pkey manager sets enforcement on CA-facing switch ports and clears it on
    links between switches; the real smpquery then shows exactly that (it used to show
    PartEnforceInb/Outb 1 on the uplinks: the Set was answered but not kept)."""
    with fabric_up("lab", tmp_path, sm=True) as f:
        fabric = f.cluster.fabric
        leaf, spine = fabric.find(LEAF), fabric.find(SPINE)
        for sw, port in ((leaf, 9), (leaf, 12), (spine, 1), (spine, 4)):
            out = f.run("sched-worker1", "smpquery", "portinfo", str(sw.lid), str(port)).stdout
            assert _enforcement(out) == (0, 0), (sw.desc, port, out)
        for port in (1, 8):
            out = f.run("sched-worker1", "smpquery", "portinfo", str(leaf.lid), str(port)).stdout
            assert _enforcement(out) == (1, 1), (port, out)


@contextmanager
def opensm(name: str, host: str, workdir: Path, partitions: str):
    """The real OpenSM attached at ``host`` of the fabric served under ``name``, with
    ``partitions`` as its partitions.conf; stopped after."""
    workdir.mkdir(parents=True, exist_ok=True)
    conf = workdir / "opensm.conf"
    conf.write_text("force_log_flush TRUE\n")
    (workdir / "partitions.conf").write_text(partitions)
    log = workdir / "opensm.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IBSIM_", "SIM_"))}
    env.update(
        LD_PRELOAD=UMAD2SIM,
        IBSIM_SOCKNAME=name,
        SIM_HOST=host,
        OSM_CACHE_DIR=str(workdir),
        OSM_TMP_DIR=str(workdir),
    )
    argv = ["opensm", "-F", str(conf), "-f", str(log), "-e", "-P", str(workdir / "partitions.conf")]
    with open(workdir / "opensm.out", "wb") as out:
        proc = subprocess.Popen(argv, env=env, cwd=workdir, stdout=out, stderr=out)
    try:
        deadline = time.monotonic() + 120
        while "SUBNET UP" not in (log.read_text() if log.exists() else ""):
            assert proc.poll() is None and time.monotonic() < deadline, (
                log.read_text() if log.exists() else "no log"
            )
            time.sleep(0.1)
        yield log
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _table(out: str) -> list[int]:
    """The P_Keys smpquery pkeys printed, in table order (zeros left out)."""
    keys = [int(k, 16) for k in re.findall(r"0x[0-9a-f]{4}", out)]
    return [k for k in keys if k & 0x7FFF]


def test_two_tenants_tables_land_where_opensm_writes_them(real_tools, tmp_path):
    """partitions.conf with two tenants (worker1's HCAs, worker2's HCAs), the default
    partition limited for everyone but switches and the SM's port: the real smpquery
    and saquery show the tables OpenSM wrote on each tenant's CAs and on the switch
    ports facing them; share_partition says yes inside a tenant, no across."""
    cluster = build(load_spec("lab"))
    fabric = cluster.fabric
    a = [fabric.find(f"sched-worker1 mlx5_{i}") for i in range(4)]
    b = [fabric.find(f"sched-worker2 mlx5_{i}") for i in range(4)]

    def members(nodes):
        return ", ".join(f"0x{n.ports[1].guid:016x}=full" for n in nodes)

    conf = (
        "Default=0x7fff : ALL=limited, ALL_SWITCHES=full, SELF=full ;\n"
        f"TenantA=0x0001 : {members(a)} ;\n"
        f"TenantB=0x0002 : {members(b)} ;\n"
    )
    leaf = fabric.find(LEAF)
    with served(cluster) as srv, opensm(srv.name, "sched-worker1", tmp_path / "sm", conf):
        log = (tmp_path / "sm" / "opensm.log").read_text()
        assert "Partition configuration in error" not in log, log[-3000:]

        def smp(*argv):
            r = run_tool(srv.name, "sched-worker2", list(argv), tmp_path)
            assert r.returncode == 0, r.stderr
            return r.stdout

        # the CAs: default limited (the SM's own port full), then their tenant's key
        assert _table(smp("smpquery", "pkeys", str(a[1].ports[1].lid))) == [0x7FFF, 0x8001]
        assert _table(smp("smpquery", "pkeys", str(b[2].ports[1].lid))) == [0x7FFF, 0x8002]
        assert _table(smp("smpquery", "pkeys", str(a[0].ports[1].lid))) == [0xFFFF, 0x8001]
        # the leaf ports facing them got their CA's keys; port 0 is a full member of the
        # default partition; an inter-switch port got nothing from OpenSM
        for ca in (a[1], b[2]):
            leaf_port = ca.ports[1].peer.num
            want = _table(smp("smpquery", "pkeys", str(ca.ports[1].lid)))
            got = _table(smp("smpquery", "pkeys", str(leaf.lid), str(leaf_port)))
            assert got == want, (ca.desc, leaf_port, got)
        assert _table(smp("smpquery", "pkeys", str(leaf.lid), "0")) == [0xFFFF]
        assert _table(smp("smpquery", "pkeys", str(leaf.lid), "9")) == [0xFFFF]
        # the SA holds the same tables (it answers only with the SM_Key, 1 by default)
        rec = smp("saquery", "--smkey", "1", "PKTR", f"{b[2].ports[1].lid}/1/0")
        assert "PKeyTableRecord dump:" in rec and "0x8002" in rec and "0x7fff" in rec, rec
        # share_partition on the server's own ports, as OpenSM left them
        sim = srv.sim
        pa = [sim.port_of(n.ports[1]) for n in a]
        pb = [sim.port_of(n.ports[1]) for n in b]
        assert share_partition(pa[1], pa[2]) and share_partition(pb[0], pb[3])
        assert not share_partition(pa[1], pb[0]) and not share_partition(pb[3], pa[2])
        # the SM's port is a full member of the default partition: it reaches everyone
        assert share_partition(pa[0], pb[1])
