"""Partitions with the real OpenSM and infiniband-diags against 'fabriclab up': what
OpenSM's pkey manager writes (osm_pkey_mgr.c) lands where it writes it and reads back
through the real smpquery and saquery; inter-switch links lose enforcement."""

from __future__ import annotations

import json
import re
from contextlib import contextmanager
from pathlib import Path

import pytest
from fabric_server import fabric_up
from helpers import counter, run_tool, served, started, umad2sim_env, wait_for

from fabriclab.model.build import build
from fabriclab.sim.fabric.partitions import share_partition
from fabriclab.spec.load import load_spec

pytestmark = pytest.mark.realtools

LEAF = "MF0;LAB-IBLEAF-01:MQM9701/U1"
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SPINE = "MF0;LAB-IBSPINE-01:MQM9701/U1"


def _enforcement(text: str) -> tuple[int, int]:
    return counter(text, "PartEnforceInb"), counter(text, "PartEnforceOutb")


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
    env = umad2sim_env(name, host)
    env.update(OSM_CACHE_DIR=str(workdir), OSM_TMP_DIR=str(workdir))
    argv = ["opensm", "-F", str(conf), "-f", str(log), "-e", "-P", str(workdir / "partitions.conf")]
    with started(argv, workdir / "opensm.out", env=env, cwd=workdir) as proc:

        def text() -> str:
            return log.read_text(errors="replace") if log.exists() else "no log"

        def up() -> bool:
            assert proc.poll() is None, f"opensm exited {proc.poll()}: {text()[-3000:]}"
            return "SUBNET UP" in text()

        wait_for(up, 120, lambda: f"OpenSM's SUBNET UP: {text()[-3000:]}")
        yield log


def _table(out: str) -> list[int]:
    """The P_Keys smpquery pkeys printed, in table order (zeros left out)."""
    keys = [int(k, 16) for k in re.findall(r"0x[0-9a-f]{4}", out)]
    return [k for k in keys if k & 0x7FFF]


def _two_tenants():
    """The lab cluster, its two tenants' HCAs (worker1's, worker2's) and a partitions.conf
    giving each tenant a partition, the default one limited for everyone but switches and
    the SM's port."""
    cluster = build(load_spec("lab"))
    a = [cluster.fabric.find(f"sched-worker1 mlx5_{i}") for i in range(4)]
    b = [cluster.fabric.find(f"sched-worker2 mlx5_{i}") for i in range(4)]

    def members(nodes):
        return ", ".join(f"0x{n.ports[1].guid:016x}=full" for n in nodes)

    conf = (
        "Default=0x7fff : ALL=limited, ALL_SWITCHES=full, SELF=full ;\n"
        f"TenantA=0x0001 : {members(a)} ;\n"
        f"TenantB=0x0002 : {members(b)} ;\n"
    )
    return cluster, a, b, conf


def test_two_tenants_tables_land_where_opensm_writes_them(real_tools, tmp_path):
    """partitions.conf with two tenants (worker1's HCAs, worker2's HCAs), the default
    partition limited for everyone but switches and the SM's port: the real smpquery
    and saquery show the tables OpenSM wrote on each tenant's CAs and on the switch
    ports facing them; share_partition says yes inside a tenant, no across."""
    cluster, a, b, conf = _two_tenants()
    fabric = cluster.fabric
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


def test_traffic_inside_a_tenant_flows_and_across_is_dropped_and_counted(real_tools, tmp_path):
    """Two tenants in the real OpenSM's partitions.conf, traffic under the virtual clock:
    a flow inside tenant A reaches its receiver (the real perfquery -x there shows its
    words); a flow from tenant A to tenant B is discarded at the leaf port facing the
    receiver, which enforces outbound as OpenSM set it: the real perfquery and
    ibqueryerrors show PortXmitConstraintErrors there, and the receiver gets nothing."""
    _, a, b, conf = _two_tenants()
    with (
        fabric_up("lab", tmp_path / "up", extra=["--virtual-clock"]) as f,
        opensm(f.name, "sched-worker1", tmp_path / "sm", conf),
    ):
        _tenants_isolated_in_traffic(f, a, b)


def test_up_sm_partitions_from_the_cli_isolates_tenants(real_tools, tmp_path):
    """The same, with OpenSM as 'up --sm --partitions examples/two-tenants.conf' runs
    it: the tenants' traffic is isolated as above, and the real saquery shows each
    tenant's key in the SA's P_Key tables (to a requester sharing a partition with
    the port)."""
    _, a, b, _ = _two_tenants()
    extra = ["--virtual-clock", "--partitions", str(EXAMPLES / "two-tenants.conf")]
    with fabric_up("lab", tmp_path, sm=True, extra=extra) as f:
        assert "Partition configuration in error" not in f.opensm_log()

        def pktr(at: str, ca) -> str:
            lid = ca.ports[1].lid
            return f.run(at, "saquery", "--smkey", "1", "PKTR", f"{lid}/1/0").stdout

        # from OpenSM's own port (a full member of the default partition): both tenants
        for ca, key in ((a[1], "0x8001"), (b[2], "0x8002")):
            rec = pktr("sched-worker1", ca)
            assert "PKeyTableRecord dump:" in rec and key in rec and "0x7fff" in rec, rec
        # from tenant B: its own tables; tenant A's are none of its business for the SA
        assert "0x8002" in pktr("sched-worker2", b[1])
        assert pktr("sched-worker2", a[1]) == ""
        _tenants_isolated_in_traffic(f, a, b)


def _tenants_isolated_in_traffic(f, a, b) -> None:
    """Under the virtual clock: a flow inside tenant A (``a``: worker1's HCAs) arrives
    whole; one to tenant B (``b``) is dropped at the leaf port facing the receiver
    (PortXmitConstraintErrors there, in perfquery and ibqueryerrors)."""
    inside_to, across_to = a[2].ports[1], b[1].ports[1]
    leaf = across_to.peer  # the leaf port facing the receiver in tenant B
    assert leaf is not None

    def pq(*argv: str) -> str:
        return f.run("sched-worker1", "perfquery", *argv).stdout

    def rcv(port) -> int:
        return counter(pq("-x", str(port.lid), "1"), "PortRcvData")

    def xmit_constraint() -> int:
        return counter(pq(str(leaf.node.lid), str(leaf.num)), "PortXmitConstraintErrors")

    before = (rcv(inside_to), rcv(across_to), xmit_constraint())
    for dst in ("sched-worker1/mlx5_2", "sched-worker2/mlx5_1"):
        r = f.fabriclab(
            "traffic", "--name", f.name, "send", "sched-worker1/mlx5_1", dst, "--bytes", "1Mi"
        )
        assert r.returncode == 0, r.stderr
    r = f.fabriclab("clock", "--name", f.name, "advance", "1")
    assert r.returncode == 0, r.stderr
    listing = f.fabriclab("traffic", "--name", f.name, "list", "--json").stdout
    # payload and headers in 4-byte words: 256 packets of 4096 bytes + LRH/BTH/ICRC;
    # and the perfquery MADs of 72 words: the first read's reply, this read's request
    assert rcv(inside_to) - before[0] == 256 * (4096 // 4 + 6) + 2 * 72, listing
    assert rcv(across_to) == before[1] + 2 * 72, listing  # the MADs alone
    # flow 2 cannot arrive: as an RC queue pair it resends each local ACK timeout
    # (4.096 us * 2^20 = 4.29 s, NCCL's default) and is 'retrying' meanwhile; each
    # send is one packet (MTU 4096) stopped at the leaf
    flow = next(x for x in json.loads(listing)["flows"] if x["id"] == 2)
    assert flow["state"] == "retrying", flow
    reason = flow["reason"]
    assert reason.startswith("partition: refused at ") and reason.endswith(f"[{leaf.num}]"), flow
    assert flow["delivered"] == 0 and before[2] == 0 and xmit_constraint() == 1, flow
    # NCCL's retry count 7: the first send and 7 resends, then it fails (8 * 4.29 s)
    r = f.fabriclab("clock", "--name", f.name, "advance", "40")
    assert r.returncode == 0, r.stderr
    listing = f.fabriclab("traffic", "--name", f.name, "list", "--json").stdout
    flow = next(x for x in json.loads(listing)["flows"] if x["id"] == 2)
    assert flow["state"] == "failed", flow
    assert flow["reason"].startswith("retry count exceeded: partition"), flow
    dropped = 8
    assert xmit_constraint() == dropped, flow
    q = f.run("sched-worker1", "ibqueryerrors", check=False).stdout
    at = f"GUID 0x{leaf.node.guid:016x} port {leaf.num}: "
    line = next((ln for ln in q.splitlines() if at in ln), "")
    assert f"[PortXmitConstraintErrors == {dropped} (" in line, q  # the 64-bit view
