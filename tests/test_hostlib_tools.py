"""The real tools on a tray through fabriclab's host library, against 'fabriclab up':
ibstat and ibstatus list the tray's ConnectX-7s, ibnetdiscover discovers from each rail,
OpenSM (brought up through the library) answers saquery with whole tables, ibping runs
between two trays, perfquery -x prints the server's counters to the last byte, and a
tool fails clearly when the HCA or the server is not there."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time

import pytest
import versions
from conftest import SPECS
from fabric_server import fabric_up
from helpers import no_timestamp

from fabriclab.formats import ibnetdiscover
from fabriclab.sim import admin, hostlib, tools
from fabriclab.sim.sysfs import rate_text

pytestmark = pytest.mark.realtools

TRAY, OTHER = "gb-r02-t03", "gb-r05-t11"
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


def test_saquery_returns_whole_tables_from_opensm(su):
    fabric = su.cluster.fabric
    nodes = _run(su, OTHER, "saquery", "-C", "mlx5_3").stdout
    guids = re.findall(r"^\s+node_guid\.+0x([0-9a-f]+)$", nodes, re.M)
    lids = re.findall(r"^\s+lid\.+(\w+)$", nodes, re.M)
    # one NodeRecord per node here (a GB200 HCA has one port): 617 of them, about 70 kB
    # in many RMPP segments, all of them there
    assert sorted(int(g, 16) for g in guids) == sorted(n.guid for n in fabric.nodes)
    assert len(set(lids)) == len(lids) == len(fabric.nodes)
    links = _run(su, OTHER, "saquery", "-C", "mlx5_0", "LR").stdout
    assert len(re.findall(r"^LinkRecord dump:", links, re.M)) == 2 * fabric.link_count()
    a, b = su.cluster.tray(TRAY).hcas[1].ports[1], su.cluster.tray(OTHER).hcas[2].ports[1]
    path = _run(su, OTHER, "saquery", "-p", "--src-to-dst", f"{a.lid}:{b.lid}").stdout
    assert f"slid.....................{a.lid}" in path.replace(" ", "")
    assert f"dlid.....................{b.lid}" in path.replace(" ", "")


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
        time.sleep(0.5)  # its registration
        r = _run(su, TRAY, "ibping", "-c", "3", "-C", "mlx5_1", str(target.lid), timeout=60)
        assert "3 packets transmitted, 3 received, 0% packet loss" in r.stdout, r.stdout
        assert f"Pong from {OTHER}" in r.stdout  # the server answers with its host name
    finally:
        server.terminate()
        server.wait(10)
    # nobody listening there now: the MAD layer answers "unsupported", at once
    t0 = time.monotonic()
    r = _run(su, TRAY, "ibping", "-c", "1", "-C", "mlx5_1", str(target.lid), check=False)
    assert r.returncode != 0 and time.monotonic() - t0 < 10


def test_perfquery_x_prints_the_servers_counters_and_nothing_is_left_behind(su, tmp_path):
    tray = su.cluster.tray(TRAY)
    a = f"{TRAY}/mlx5_0"
    su.fabriclab("fault", "errors", "--name", su.name, a, "--ber", "1e-9")
    for dst in (f"{OTHER}/mlx5_0", f"{OTHER}/mlx5_1"):  # 2 x 40 GB/s out of a 50 GB/s port
        r = su.fabriclab("traffic", "send", "--name", su.name, a, dst, "--rate", "40GB/s")
        assert r.returncode == 0, r.stderr
    time.sleep(1.5)
    su.fabriclab("traffic", "stop", "--name", su.name)
    su.fabriclab("fault", "clear", "--name", su.name)
    empty = tmp_path / "cwd"
    empty.mkdir()
    out = _run(su, TRAY, "perfquery", "-x", "-C", "mlx5_0", cwd=empty).stdout
    assert list(empty.iterdir()) == []  # no ./sys-<pid> or anything else
    printed = dict(_FIELD.findall(out))
    with_env = {**os.environ, **su.env}
    old = os.environ.copy()
    os.environ.update(with_env)
    try:
        view = admin.request(su.name, {"op": "tray", "host": TRAY})
    finally:
        os.environ.clear()
        os.environ.update(old)
    port = view["hcas"][0]["ports"][0]
    ext, narrow = port["counters_ext"], port["counters"]
    assert int(printed["PortXmitWait"]) == ext["PortXmitWait"] > 0
    assert int(printed["SymbolErrorCounter"]) == narrow["SymbolErrorCounter"] > 0
    for k in ("VL15Dropped", "QP1Dropped", "LinkErrorRecoveryCounter", "PortRcvErrors"):
        assert int(printed[k]) == ext[k], k
    # the data counters moved by the query itself at most (two 256-byte MADs)
    assert 0 <= ext["PortXmitData"] - int(printed["PortXmitData"]) <= 2 * 72
    assert int(printed["PortXmitData"]) > 10**9 // 4
    assert tray.hcas[0].ports[1].lid


def test_a_missing_hca_and_a_server_gone_fail_clearly(real_tools, tmp_path):
    with fabric_up("lab", tmp_path / "lab") as f:
        r = _run(f, "sched-worker1", "ibstat", "mlx5_7", check=False)
        assert r.returncode != 0 and "mlx5_7" in r.stderr
        r = _run(f, "sched-worker1", "smpquery", "-C", "mlx5_7", "nodeinfo", "1", check=False)
        assert r.returncode != 0 and "mlx5_7" in r.stderr
        r = _run(f, "no-such-tray", "ibstat", check=False)
        assert r.returncode != 0 and "no-such-tray: no such tray" in r.stderr
        lid = f.cluster.tray("sched-worker2").hcas[0].ports[1].lid
        ping = subprocess.Popen(
            ["ibping", "-c", "100000", "-C", "mlx5_0", str(lid)],
            env=_env(f, "sched-worker1"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(1)
        inst = f.instance()
        os.kill(inst.pid, signal.SIGKILL)
        try:
            _out, err = ping.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            ping.kill()
            raise AssertionError("the tool hangs when the server goes away") from None
        assert ping.returncode != 0
        assert f"the fabric server '{f.name}' went away" in err


def test_an_xdr_tray_reads_800(real_tools, tmp_path):
    with fabric_up(str(SPECS / "xdr-lab.yaml"), tmp_path / "xdr") as f:
        tray = f.cluster.trays[0].host
        got = _blocks(_run(f, tray, "ibstat").stdout)
        assert {b["Rate"] for b in got.values()} == {"800"}
        assert rate_text("XDR", 4) == "800 Gb/sec (4X XDR)"


def test_the_library_is_built():
    assert os.path.exists(hostlib.library_path())
