"""The real tools on a tray through fabriclab's host library, against 'fabriclab up':
ibstat and ibstatus list the tray's ConnectX-7s, ibnetdiscover discovers from each rail,
OpenSM (brought up through the library) answers saquery with whole tables, ibping runs
between two trays, perfquery -x prints the server's counters to the last byte, and a
tool fails clearly when the HCA or the server is not there."""

from __future__ import annotations

import ipaddress
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import versions
from conftest import SPECS
from fabric_server import fabric_up
from helpers import no_timestamp, stop_process, wait_for
from simclient import SimClient, lid_mad

from fabriclab.formats import ibnetdiscover
from fabriclab.ib.mad.consts import Attr
from fabriclab.ib.mad.layouts import PORT_COUNTERS_EXT
from fabriclab.sim.host import hostlib
from fabriclab.sim.host.sysfs import rate_text
from fabriclab.sim.run import tools

pytestmark = pytest.mark.realtools

TRAY, OTHER, THIRD = "gb-r02-t03", "gb-r05-t11", "gb-r07-t01"
_FIELD = re.compile(r"^(\w+):\.+(\S+)$", re.M)  # perfquery's "Name:....value"


def _env(f, tray: str) -> dict[str, str]:
    return tools.host_env(f.instance(), tray, base=f.env)


def _run(f, tray: str, *argv: str, timeout: float = 120, check: bool = True, cwd=None):
    r = subprocess.run(
        list(argv),
        env=_env(f, tray),
        cwd=cwd or f.workdir,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check and r.returncode:
        raise AssertionError(
            f"{' '.join(argv)} on {tray} exited {r.returncode}:\n{r.stderr[-3000:]}"
        )
    return r


@pytest.fixture(scope="module")
def su(real_tools, tmp_path_factory):
    """gb200-su with the real OpenSM, itself run through the host library (``up --sm``
    on a tray), so SA answers travel whole."""
    with fabric_up("gb200-su", tmp_path_factory.mktemp("su"), sm=True) as f:
        yield f


def _blocks(text: str) -> dict[str, dict[str, str]]:
    """ibstat's output: CA name -> its 'Label: value' lines (the port's too)."""
    out: dict[str, dict[str, str]] = {}
    for chunk in re.split(r"^CA '", text, flags=re.M)[1:]:
        name, _, body = chunk.partition("'\n")
        out[name] = dict(line.strip().split(": ", 1) for line in body.splitlines() if ": " in line)
    return out


def test_ibstat_and_ibstatus_show_the_trays_four_connectx7s(su):
    tray = su.cluster.tray(TRAY)
    got = _blocks(_run(su, TRAY, "ibstat").stdout)
    assert list(got) == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    for i, node in enumerate(tray.hcas):
        b = got[f"mlx5_{i}"]
        assert b["CA type"] == "MT4129" and b["Number of ports"] == "1"
        assert re.fullmatch(r"\d+\.\d+\.\d{4}", b["Firmware version"])
        assert b["Node GUID"] == b["Port GUID"] == f"0x{node.guid:016x}"
        assert b["Base lid"] == str(node.ports[1].lid)
        assert (b["State"], b["Physical state"], b["Rate"]) == ("Active", "LinkUp", "400")
        assert b["Link layer"] == "InfiniBand"
    assert _run(su, TRAY, "ibstat", "-l").stdout == "mlx5_0\nmlx5_1\nmlx5_2\nmlx5_3\n"
    status = _run(su, TRAY, "ibstatus").stdout  # a dash script: cd, globs, cat
    assert status.count("rate:\t\t 400 Gb/sec (4X NDR)") == 4, status
    assert re.findall(r"^Infiniband device '(\w+)' port 1 status:", status, re.M) == [
        "mlx5_0",
        "mlx5_1",
        "mlx5_2",
        "mlx5_3",
    ]


def test_ibnetdiscover_from_each_rail_equals_the_renderer(su):
    tray = su.cluster.tray(TRAY)
    for i, node in enumerate(tray.hcas):
        real = _run(su, TRAY, "ibnetdiscover", "-C", f"mlx5_{i}").stdout
        ours = ibnetdiscover.render(su.cluster.fabric, node.ports[1], rdma_core=_rdma_core())
        assert no_timestamp(real) == no_timestamp(ours), f"mlx5_{i}"


def _rdma_core() -> int:
    return versions.rdma_core(None)


def _records(text: str, kind: str) -> list[dict[str, str]]:
    """saquery's '<kind> dump:' blocks as field -> value."""
    return [
        dict(re.findall(r"^\s+(\w+)\.+(.*)$", block, re.M))
        for block in text.split(f"{kind} dump:")[1:]
    ]


def test_saquery_returns_whole_tables_from_opensm(su):
    """NodeRecords (617, about 70 kB: many RMPP segments), LinkRecords and a PathRecord,
    each record against the model."""
    fabric = su.cluster.fabric
    nodes = _records(_run(su, OTHER, "saquery", "-C", "mlx5_3").stdout, "NodeRecord")
    got = {int(r["node_guid"], 16): (int(r["lid"]), r["node_type"]) for r in nodes}
    want = {
        n.guid: (
            n.lid if n.is_switch else n.ports[1].lid,
            "Switch" if n.is_switch else "Channel Adapter",
        )
        for n in fabric.nodes
    }
    assert len(nodes) == len(got) == len(want) > 600
    assert got == want
    links = _records(_run(su, OTHER, "saquery", "-C", "mlx5_0", "LR").stdout, "LinkRecord")
    seen = {
        (int(r["FromLID"]), int(r["FromPort"]), int(r["ToLID"]), int(r["ToPort"])) for r in links
    }
    lid = {id(n): n.lid if n.is_switch else n.ports[1].lid for n in fabric.nodes}
    expected = set()
    for n in fabric.nodes:
        for p in n.iter_ports():
            if p.peer is not None:
                expected.add((lid[id(n)], p.num, lid[id(p.peer.node)], p.peer.num))
    assert len(links) == len(seen) == 2 * fabric.link_count()
    assert seen == expected
    a, b = su.cluster.tray(TRAY).hcas[1].ports[1], su.cluster.tray(OTHER).hcas[2].ports[1]
    path = _records(
        _run(su, OTHER, "saquery", "-p", "--src-to-dst", f"{a.lid}:{b.lid}").stdout, "PathRecord"
    )
    assert len(path) == 1
    assert (int(path[0]["slid"]), int(path[0]["dlid"])) == (a.lid, b.lid)
    assert path[0]["sgid"] == str(ipaddress.IPv6Address(0xFE80 << 112 | a.guid))
    assert path[0]["dgid"] == str(ipaddress.IPv6Address(0xFE80 << 112 | b.guid))


def test_ibping_between_two_trays(su):
    target = su.cluster.tray(OTHER).hcas[2].ports[1]
    server = subprocess.Popen(
        ["ibping", "-S", "-C", "mlx5_2"],
        env=_env(su, OTHER),
        cwd=su.workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _answering(su, TRAY, "mlx5_1", target.lid, server)
        r = _run(su, TRAY, "ibping", "-c", "3", "-C", "mlx5_1", str(target.lid), timeout=60)
        assert "3 packets transmitted, 3 received, 0% packet loss" in r.stdout, r.stdout
        # the server answers with its host's name (gethostname: this machine's)
        assert len(re.findall(rf"^Pong from .* \(Lid {target.lid}\)", r.stdout, re.M)) == 3
    finally:
        stop_process(server)
    # nobody listening there now: the MAD layer answers "unsupported", at once
    t0 = time.monotonic()
    r = _run(su, TRAY, "ibping", "-c", "1", "-C", "mlx5_1", str(target.lid), check=False)
    assert "1 packets transmitted, 0 received" in r.stdout and time.monotonic() - t0 < 10


def _answering(f, tray: str, hca: str, lid: int, server: subprocess.Popen) -> None:
    """Wait until the ibping server ``server`` (at ``lid``) answers a ping from
    ``tray``'s ``hca``: it has registered and waits for pings."""

    def answered() -> bool:
        assert server.poll() is None, server.communicate()
        r = _run(f, tray, "ibping", "-c", "1", "-C", hca, str(lid), check=False)
        return "1 packets transmitted, 1 received" in r.stdout

    wait_for(answered, 30, f"the ibping server at LID {lid} answering", interval=0.2)


def _wire_counters(f, lid: int, port: int) -> dict[str, int]:
    """PortCountersExtended as the server answers it, read off the wire (an ibsim client
    from another tray)."""
    with SimClient(f.name, f"{THIRD}") as client:
        mad = lid_mad(4, Attr.PORT_COUNTERS_EXT, data=PORT_COUNTERS_EXT.pack({"PortSelect": port}))
        status, reply = client.request(mad, dlid=lid, dqp=1)
    assert status == 0
    return PORT_COUNTERS_EXT.unpack(reply[64:])


def test_perfquery_x_prints_the_servers_counters_and_nothing_is_left_behind(su, tmp_path):
    """Incast into one HCA (two 40 GB/s flows into a 50 GB/s port: its leaf port waits)
    under a bit-error rate: perfquery -x prints every counter of the HCA's port and of
    the leaf port as the server holds them, the extra extended ones (MAD bytes 224-247,
    which libumad2sim loses) included."""
    hca = su.cluster.tray(TRAY).hcas[0].ports[1]
    leaf = hca.peer
    a = f"{TRAY}/mlx5_0"
    r = su.fabriclab(
        "fault", "errors", "--name", su.name, a, "--ber", "1e-11", "--down-after", "255"
    )
    assert r.returncode == 0, r.stderr
    for src in (f"{OTHER}/mlx5_0", f"{THIRD}/mlx5_0"):
        r = su.fabriclab("traffic", "send", "--name", su.name, src, a, "--rate", "40GB/s")
        assert r.returncode == 0, r.stderr

    def moved() -> bool:  # what the assertions below look for, on the wire
        at_hca, at_leaf = (
            _wire_counters(su, hca.lid, 1),
            _wire_counters(su, leaf.node.lid, leaf.num),
        )
        return (
            at_hca["SymbolErrorCounter"] > 0
            and at_hca["PortRcvData"] > 10**9
            and at_leaf["PortXmitWait"] > 0
        )

    wait_for(moved, 60, "bit errors and a gigabyte of incast at the HCA", interval=0.2)
    su.fabriclab("traffic", "stop", "--name", su.name)
    su.fabriclab("fault", "clear", "--name", su.name)
    empty = tmp_path / "cwd"
    empty.mkdir()
    for lid, num in ((hca.lid, 1), (leaf.node.lid, leaf.num)):
        # from the tray's second rail: the MADs cross these ports a known number of times
        out = _run(su, TRAY, "perfquery", "-x", "-C", "mlx5_1", str(lid), str(num), cwd=empty)
        printed = {k: int(v, 0) for k, v in _FIELD.findall(out.stdout)}
        wire = _wire_counters(su, lid, num)
        moved = ("PortXmitData", "PortRcvData", "PortXmitPkts", "PortRcvPkts")
        moved += ("PortUnicastXmitPkts", "PortUnicastRcvPkts")
        for k, v in wire.items():
            if k in printed and k not in moved:
                assert printed[k] == v, (lid, k)
        for k in moved:  # the query's own answer and the wire read: two MADs each way
            assert 0 <= wire[k] - printed[k] <= (2 * 72 if "Data" in k else 2), (lid, k)
        if lid == hca.lid:
            assert printed["SymbolErrorCounter"] > 0 and printed["PortRcvData"] > 10**9
        else:
            assert printed["PortXmitWait"] > 0  # the incast waited here
    assert list(empty.iterdir()) == []  # no ./sys-<pid> or anything else


def test_a_missing_hca_and_a_server_gone_fail_clearly(real_tools, tmp_path):
    """A tool asking for an HCA the tray lacks, or on a tray that does not exist, fails
    with one line saying so; a tool blocked reading its umad device when the server is
    killed says the server went away instead of hanging."""
    with fabric_up("lab", tmp_path / "lab", sm=True) as f:
        r = _run(f, "sched-worker1", "ibstat", "mlx5_7", check=False)
        assert r.returncode != 0 and "mlx5_7" in r.stderr
        r = _run(f, "sched-worker1", "smpquery", "-C", "mlx5_7", "nodeinfo", "1", check=False)
        assert r.returncode != 0 and "mlx5_7" in r.stderr
        r = _run(f, "no-such-tray", "ibstat", check=False)  # no devices: ibstat says nothing
        assert (
            r.stdout == "" and r.stderr == "fabriclab: no-such-tray: no such tray in this fabric\n"
        )
        # a tool blocked reading its umad device (ibping's server, once it has answered
        # a ping, waits for the next)
        ping = subprocess.Popen(
            ["ibping", "-S", "-C", "mlx5_1"],
            env=_env(f, "sched-worker2"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        lid = f.cluster.tray("sched-worker2").hcas[1].ports[1].lid
        _answering(f, "sched-worker1", "mlx5_0", lid, ping)
        os.kill(f.instance().pid, signal.SIGKILL)
        try:
            _out, err = ping.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            ping.kill()
            raise AssertionError("the tool hangs when the server goes away") from None
        assert f"fabriclab: the fabric server '{f.name}' went away" in err


def test_opensm_bound_to_a_named_hca_of_a_tray(real_tools, tmp_path):
    """OpenSM through the library on sched-worker1, bound to its third HCA by port GUID:
    SUBNET UP, and sminfo from the other tray finds the SM there."""
    with fabric_up("lab", tmp_path / "lab") as f:
        hca = f.cluster.tray("sched-worker1").hcas[2].ports[1]
        log = tmp_path / "opensm.log"
        env = {
            **_env(f, "sched-worker1"),
            "OSM_CACHE_DIR": str(tmp_path),
            "OSM_TMP_DIR": str(tmp_path),
        }
        conf = tmp_path / "opensm.conf"
        conf.write_text("force_log_flush TRUE\n")  # else SUBNET UP waits in its buffer
        sm = subprocess.Popen(
            ["opensm", "-F", str(conf), "-g", f"0x{hca.guid:016x}", "-e", "-f", str(log)],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:

            def text() -> str:
                return log.read_text(errors="replace") if log.exists() else ""

            def up() -> bool:
                assert sm.poll() is None, f"opensm exited {sm.poll()}: {text()[-3000:]}"
                return "SUBNET UP" in text()

            wait_for(up, 120, lambda: f"OpenSM's SUBNET UP: {text()[-3000:]}", interval=0.2)
            assert f"0x{hca.guid:016x}" in text()  # the port it bound to
            out = _run(f, "sched-worker2", "sminfo", "-C", "mlx5_0").stdout
        finally:
            stop_process(sm)
        assert out.startswith(f"sminfo: sm lid {hca.lid} sm guid 0x{hca.guid:016x}"), out


def test_exec_mount_shows_the_tray_at_sys_class_infiniband(su):
    """A program reading sysfs itself (here cat and ls, no preload) in 'exec --mount':
    the tray's devices at /sys/class/infiniband, the machine's other classes still
    there.  Root (CI is); a private mount namespace, so nothing stays mounted."""
    assert os.geteuid() == 0, "exec --mount needs root, which CI has"
    script = (
        "cat /sys/class/infiniband/mlx5_2/ports/1/rate /sys/class/infiniband/mlx5_2/node_desc;"
        " ls /sys/class/infiniband; test -d /sys/class/net && echo net-too"
    )
    env = {k: v for k, v in su.env.items() if k != "LD_PRELOAD"}
    r = subprocess.run(
        [sys.executable, "-m", "fabriclab.cli", "exec", "--name", su.name, "--mount", TRAY,
         "--", "sh", "-c", script],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout == (
        f"400 Gb/sec (4X NDR)\n{TRAY} mlx5_2\nmlx5_0\nmlx5_1\nmlx5_2\nmlx5_3\nnet-too\n"
    )
    assert not os.path.exists("/sys/class/infiniband/mlx5_2")  # only in its namespace


def test_an_xdr_tray_reads_800(real_tools, tmp_path):
    with fabric_up(str(SPECS / "xdr-lab.yaml"), tmp_path / "xdr") as f:
        tray = f.cluster.trays[0].host
        got = _blocks(_run(f, tray, "ibstat").stdout)
        assert {b["Rate"] for b in got.values()} == {"800"}
        assert rate_text("XDR", 4) == "800 Gb/sec (4X XDR)"


def test_the_library_is_built():
    assert os.path.exists(hostlib.library_path())
