"""A tray's /sys/class/infiniband from the fabric's state: the kernel's formats, values
that follow faults and traffic, atomic replacement, and (as root) the real ibstat and
ibstatus reading the tree in a private mount namespace, compared with a real host's
ibstat."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest
from conftest import FIXTURES
from helpers import served

from fabriclab.errors import InputError
from fabriclab.ib.packets import HEADER_WORDS
from fabriclab.model.build import build
from fabriclab.sim.fabric import minhop
from fabriclab.sim.host import sysfs
from fabriclab.sim.live import admin_requests
from fabriclab.sim.live.api import LiveFabric
from fabriclab.sim.live.clock import VirtualClock
from fabriclab.sim.live.traffic.engine import TrafficEngine
from fabriclab.spec.load import load_spec

TRAY = "gb-r01-t01"
IBSTAT = FIXTURES / "real" / "sparticlesteve__pytorch-cuda-mpi-error__ibstat.txt"


@pytest.fixture(scope="module")
def su():
    cluster = build(load_spec("gb200-su"))
    with served(cluster, serve=False) as srv:
        minhop.fill(srv.sim)
        clock = VirtualClock()
        yield LiveFabric(srv, cluster, clock, traffic=TrafficEngine(srv.sim, clock))


def _files(live, host: str = TRAY) -> dict[str, str]:
    return sysfs.render(admin_requests.answer(live, {"op": "tray", "host": host}))


def test_a_gb200_tray_has_four_connectx7_devices_in_the_kernels_formats(su):
    f = _files(su)
    devs = sorted({k.split("/")[2] for k in f if k.startswith("class/infiniband/")})
    assert devs == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    tray = su.resolver.cluster.tray(TRAY)
    for i, node in enumerate(tray.hcas):
        d = f"class/infiniband/mlx5_{i}"
        g = f"{node.guid:016x}"
        assert f[f"{d}/node_type"] == "1: CA\n"
        assert f[f"{d}/node_guid"] == f"{g[0:4]}:{g[4:8]}:{g[8:12]}:{g[12:16]}\n"
        assert f[f"{d}/hca_type"] == "MT4129\n"
        assert f[f"{d}/node_desc"] == f"{TRAY} mlx5_{i}\n"
        assert re.fullmatch(r"\d+\.\d+\.\d{4}\n", f[f"{d}/fw_ver"])  # mlx5 "%d.%d.%04d"
        p = f"{d}/ports/1"
        assert f[f"{p}/state"] == "4: ACTIVE\n"
        assert f[f"{p}/phys_state"] == "5: LinkUp\n"
        assert f[f"{p}/rate"] == "400 Gb/sec (4X NDR)\n"
        assert f[f"{p}/lid"] == f"0x{node.ports[1].lid:x}\n"
        assert f[f"{p}/cap_mask"] == "0xa751e848\n"
        assert f[f"{p}/link_layer"] == "InfiniBand\n"
        assert f[f"{p}/gids/0"] == f"fe80:0000:0000:0000:{g[0:4]}:{g[4:8]}:{g[8:12]}:{g[12:16]}\n"
        assert f[f"{p}/pkeys/0"] == "0xffff\n" and f[f"{p}/pkeys/127"] == "0x0000\n"
        assert f"{p}/pkeys/128" not in f
        counters = {k.rsplit("/", 1)[1] for k in f if k.startswith(f"{p}/counters/")}
        assert counters == set(sysfs.COUNTERS) and len(counters) == 21
        hw = {k.rsplit("/", 1)[1] for k in f if k.startswith(f"{p}/hw_counters/")}
        assert hw == {*sysfs.HW_COUNTERS, "lifespan"}
        assert all(f[f"{p}/hw_counters/{n}"] == "0\n" for n in sysfs.HW_COUNTERS)
    assert f["class/infiniband_mad/abi_version"] == "5\n"
    assert f["class/infiniband_mad/umad2/ibdev"] == "mlx5_2\n"


def test_xdr_rate_and_other_widths():
    assert sysfs.rate_text("XDR", 4) == "800 Gb/sec (4X XDR)"
    assert sysfs.rate_text("NDR", 2) == "200 Gb/sec (2X NDR)"
    assert sysfs.rate_text("NDR", 1) == "100 Gb/sec (1X NDR)"
    assert sysfs.rate_text("SDR", 1) == "2.5 Gb/sec (1X SDR)"
    assert sysfs.rate_text("FDR", 4) == "56 Gb/sec (4X FDR)"
    cluster = build(load_spec(str(FIXTURES.parent / "specs" / "xdr-lab.yaml")))
    with served(cluster, serve=False) as srv:
        live = LiveFabric(srv, cluster, VirtualClock())
        host = cluster.trays[0].host
        f = _files(live, host)
        assert f["class/infiniband/mlx5_0/ports/1/rate"] == "800 Gb/sec (4X XDR)\n"


def test_state_follows_a_fault_and_data_counts_in_words(su):
    src, dst = f"{TRAY}/mlx5_1", "gb-r01-t02/mlx5_1"
    p = "class/infiniband/mlx5_1/ports/1"
    before = _files(su)
    size = 10_000_000
    su.traffic_request("send", [src, dst], {"bytes": size})
    su.advance(1)
    after = _files(su)
    mtu = 4096
    packets = -(-size // mtu)
    words = -(-size // 4) + packets * HEADER_WORDS  # payload words plus LRH, BTH, ICRC
    xd = int(after[f"{p}/counters/port_xmit_data"]) - int(before[f"{p}/counters/port_xmit_data"])
    xp = int(after[f"{p}/counters/port_xmit_packets"]) - int(
        before[f"{p}/counters/port_xmit_packets"]
    )
    assert (xd, xp) == (words, packets)
    assert int(after[f"{p}/counters/unicast_xmit_packets"]) >= packets
    su.fault("down", f"{src}[1]")
    try:
        f = _files(su)
        assert f[f"{p}/state"] == "1: DOWN\n"
        assert f[f"{p}/phys_state"] == "2: Polling\n"
        assert f[f"{p}/counters/link_downed"] == "1\n"
        assert f["class/infiniband/mlx5_0/ports/1/state"] == "4: ACTIVE\n"
    finally:
        su.up(f"{src}[1]")
    assert _files(su)[f"{p}/phys_state"] == "5: LinkUp\n"


def test_a_bad_tray_is_one_error(su):
    with pytest.raises(InputError, match="no such tray"):
        admin_requests.answer(su, {"op": "tray", "host": "nope"})
    with pytest.raises(InputError, match="host: want a string"):
        admin_requests.answer(su, {"op": "tray", "host": ["a list"]})


def test_tree_is_replaced_atomically_and_only_where_changed(tmp_path, su):
    root = tmp_path / "sys"
    tree = sysfs.Tree(root)
    tree.claim()
    files = _files(su)
    assert tree.update(files) == len(files)
    state = root / "class/infiniband/mlx5_0/ports/1/state"
    ino = state.stat().st_ino
    assert tree.update(files) == 0  # nothing changed: nothing written
    files = dict(files)
    files["class/infiniband/mlx5_0/ports/1/state"] = "1: DOWN\n"
    assert tree.update(files) == 1
    assert state.read_text() == "1: DOWN\n" and state.stat().st_ino != ino  # a new file
    assert not list((root / ".tmp").iterdir())  # nothing left aside
    # a directory that is not ours is refused, a tree written before is replaced
    other = tmp_path / "other"
    other.mkdir()
    (other / "keep").write_text("x")
    with pytest.raises(InputError, match="not a tree fabriclab wrote"):
        sysfs.Tree(other).claim()
    # taken over, the old tree stays readable until the first write replaces it; what
    # the new tray lacks goes then (a node_exporter scraping meanwhile sees a whole tree)
    (root / "class/infiniband/mlx5_9/ports/1").mkdir(parents=True)
    (root / "class/infiniband/mlx5_9/ports/1/state").write_text("4: ACTIVE\n")
    (root / "class/infiniband/mlx5_0/extra").write_text("old\n")
    again = sysfs.Tree(root)
    again.claim()
    assert state.read_text() == "1: DOWN\n" and (root / sysfs.MARK).exists()
    assert again.update(files) == len(files)
    assert not (root / "class/infiniband/mlx5_9").exists()
    assert not (root / "class/infiniband/mlx5_0/extra").exists()
    assert sorted(
        str(f.relative_to(root)) for f in (root / "class").rglob("*") if f.is_file()
    ) == sorted(files)


def _ibstat_blocks(text: str) -> dict[str, list[str]]:
    blocks: dict[str, list[str]] = {}
    cur: list[str] = []
    for line in text.splitlines():
        m = re.match(r"CA '(.+)'$", line)
        if m:
            cur = blocks.setdefault(m.group(1), [])
        cur.append(line)
    return blocks


def _unshare_problem() -> str | None:
    """Why this machine cannot run a tool in a private mount namespace, or None: the test
    needs root, unshare and ibstat, which CI has (a missing one is a failure, not a skip)."""
    if os.geteuid() != 0:
        return "not root"
    for tool in ("unshare", "ibstat"):
        if not shutil.which(tool):
            return f"{tool} is not installed"
    r = subprocess.run(["unshare", "-m", "true"], capture_output=True, text=True)
    return r.stderr.strip() or "unshare -m failed" if r.returncode else None


def test_real_ibstat_reads_the_tree_like_a_real_hosts(tmp_path, su):
    problem = _unshare_problem()
    assert problem is None, f"cannot run ibstat in a mount namespace: {problem}"
    root = tmp_path / "sys"
    sysfs.keep_live(
        lambda: admin_requests.answer(su, {"op": "tray", "host": TRAY}), root, 1, once=True
    )
    script = f"mount --bind {root}/class /sys/class && ibstat && ibstat -l && ibstatus mlx5_3"
    r = subprocess.run(
        ["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    ours = _ibstat_blocks(r.stdout.split("mlx5_0\nmlx5_1")[0])
    assert sorted(ours) == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    assert "mlx5_0\nmlx5_1\nmlx5_2\nmlx5_3\n" in r.stdout
    real = _ibstat_blocks(IBSTAT.read_text())["mlx5_0"]  # a ConnectX-5 InfiniBand port
    block = ours["mlx5_2"]

    def shape(lines: list[str]) -> list[str]:  # each line's indentation and label
        return [line.split(":")[0] for line in lines]

    assert shape(block)[1:] == shape(real)[1:]
    node = su.resolver.cluster.tray(TRAY).hcas[2]
    got = dict(line.strip().split(": ", 1) for line in block[1:] if ": " in line)
    assert got["CA type"] == "MT4129"
    assert got["Firmware version"] == "28.41.1000"
    assert got["Rate"] == "400"
    assert got["Base lid"] == str(node.ports[1].lid)
    assert got["Node GUID"] == got["Port GUID"] == f"0x{node.guid:016x}"
    assert got["Link layer"] == "InfiniBand"
    # the real host's values in the same formats: firmware "%d.%d.%04d", cap mask "%08x"
    real_got = dict(line.strip().split(": ", 1) for line in real[1:] if ": " in line)
    assert re.fullmatch(r"\d+\.\d+\.\d{4}", real_got["Firmware version"])
    assert re.fullmatch(r"0x[0-9a-f]{8}", real_got["Capability mask"])
    assert "rate:\t\t 400 Gb/sec (4X NDR)" in r.stdout  # ibstatus prints the rate file
