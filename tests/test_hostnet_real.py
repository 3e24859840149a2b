"""Trays in network namespaces of their own, reaching the fabric over TCP: the test makes
a server namespace and two tray namespaces (veth pairs, 10.x addresses inside them
only), runs ``fabriclab up --host-listen`` in the server's and ``fabriclab attach``, and
in a tray's namespace, from nothing but the attach directory (no state directory, no
fabriclab), the real ibstat, ibnetdiscover -C mlx5_2, perfquery and OpenSM see that
tray exactly as on the fabric's machine; a wrong token and an address outside --allow
are refused with one line; the server going ends a waiting tool with the library's
"went away" line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import netns
import pytest
from helpers import fl, stop_process, wait_for

from fabriclab.model.build import build
from fabriclab.sim.run import records, tools
from fabriclab.spec.load import load_spec

pytestmark = pytest.mark.realtools

TRAY, OTHER = "sched-worker1", "sched-worker2"
_BARE = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/nonexistent", "LANG": "C"}


class World:
    """The namespaces, the fabric served in the server's, and DIR attached for TRAY."""

    def __init__(self, net: netns.Net, work: Path):
        self.net = net
        self.work = work
        self.name = f"flnet{os.getpid()}"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("IBSIM_", "SIM_"))}
        self.env.pop("LD_PRELOAD", None)
        self.env["FABRICLAB_STATE_DIR"] = str(work / "state")
        self.tray_ns, self.foreign_ns = list(net.trays)
        self.cluster = build(load_spec("lab"))
        self.dir = work / "tray"

    def fabriclab(self, *args: str, ns: str | None = None, timeout: float = 120):
        if ns is None:
            return fl(*args, env=self.env, cwd=self.work, timeout=timeout)
        argv = self.net.argv(ns, [sys.executable, "-m", "fabriclab.cli", *args])
        return subprocess.run(
            argv, env=self.env, cwd=self.work, capture_output=True, text=True, timeout=timeout
        )

    def in_tray(self, script: str, ns: str | None = None, timeout: float = 120):
        """``sh -c script`` in a tray's namespace, with an environment that knows
        nothing of fabriclab."""
        argv = self.net.argv(ns or self.tray_ns, ["sh", "-c", script])
        return subprocess.run(
            argv, env=_BARE, cwd=self.work, capture_output=True, text=True, timeout=timeout
        )

    def local(self, tray: str, *argv: str) -> subprocess.CompletedProcess:
        """A tool on ``tray`` on the fabric's own machine, through its socket file."""
        with_state = {**os.environ, "FABRICLAB_STATE_DIR": self.env["FABRICLAB_STATE_DIR"]}
        os.environ["FABRICLAB_STATE_DIR"] = self.env["FABRICLAB_STATE_DIR"]
        try:
            inst = records.Instance.load(self.name)
        finally:
            os.environ.pop("FABRICLAB_STATE_DIR", None)
        env = tools.host_env(inst, tray, base=with_state)
        return subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def world(real_tools, tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    why = netns.why_not()
    if why:  # root, and still none: the machine lacks what the test needs
        pytest.fail(why)
    work = tmp_path_factory.mktemp("hostnet")
    with netns.namespaces(2) as net:
        w = World(net, work)
        listen = net.server_addr[w.tray_ns]
        r = w.fabriclab(
            "up", "lab", "--name", w.name, "--detach", "--host-listen", f"{listen}:0",
            "--allow", net.nets[w.tray_ns], ns=net.server,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        try:
            assert f"host library over TCP at {listen}:" in r.stderr, r.stderr
            r = w.fabriclab("attach", "--name", w.name, TRAY, str(w.dir), "--json")
            assert r.returncode == 0, r.stderr
            assert json.loads(r.stdout)["address"].startswith(f"{listen}:")
            yield w
        finally:
            w.fabriclab("down", "--name", w.name, timeout=60)


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def test_ibstat_in_a_trays_namespace_is_the_trays_own_view(world):
    r = world.in_tray(f". {world.dir}/env && ibstat")
    assert r.returncode == 0, r.stderr
    local = world.local(TRAY, "ibstat")
    assert r.stdout == local.stdout  # exactly as on the fabric's machine
    cas = [line.split("'")[1] for line in r.stdout.splitlines() if line.startswith("CA '")]
    assert cas == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    assert r.stdout.count("Rate: 400") == 4 and r.stderr == ""


def test_ibnetdiscover_and_perfquery_from_a_trays_namespace(world):
    def topo(text: str) -> list[str]:
        return [line for line in text.splitlines() if "generated on" not in line]

    r = world.in_tray(f". {world.dir}/env && ibnetdiscover -C mlx5_2")
    assert r.returncode == 0, r.stderr
    assert topo(r.stdout) == topo(world.local(TRAY, "ibnetdiscover", "-C", "mlx5_2").stdout)
    lid = world.cluster.tray(TRAY).hcas[1].ports[1].lid
    r = world.in_tray(f"{world.dir}/bin/perfquery -C mlx5_1")  # the wrapper alone
    assert r.returncode == 0, r.stderr
    assert f"# Port counters: Lid {lid} port 1" in r.stdout


def test_opensm_in_a_trays_namespace_brings_the_subnet_up(world):
    smdir = world.work / "sm"
    smdir.mkdir()
    (smdir / "opensm.conf").write_text("force_log_flush TRUE\n")
    log = smdir / "opensm.log"
    hca = world.cluster.tray(TRAY).hcas[0].ports[1]
    script = (
        f"export OSM_CACHE_DIR={smdir} OSM_TMP_DIR={smdir}; . {world.dir}/env && "
        f"exec opensm -F {smdir}/opensm.conf -g 0x{hca.guid:016x} -e -f {log}"
    )
    argv = world.net.argv(world.tray_ns, ["sh", "-c", script])
    sm = subprocess.Popen(argv, env=_BARE, cwd=smdir, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:

        def up() -> bool:
            assert sm.poll() is None, f"opensm exited {sm.poll()}: {sm.stderr.read()}"  # type: ignore[union-attr]
            return log.exists() and "SUBNET UP" in log.read_text(errors="replace")

        wait_for(up, 120, lambda: f"OpenSM's SUBNET UP: {log.read_text()[-2000:]}", interval=0.2)
        r = world.in_tray(f". {world.dir}/env && sminfo -C mlx5_3")
        assert r.stdout.startswith(f"sminfo: sm lid {hca.lid} sm guid 0x{hca.guid:016x}"), r
    finally:
        stop_process(sm)


def test_a_wrong_token_and_a_foreign_address_are_refused_in_one_line(world):
    bad = world.work / "bad-token"
    shutil.copytree(world.dir, bad)
    (bad / "token").write_text("0" * 64 + "\n")
    t0 = time.monotonic()
    r = world.in_tray(f"{bad}/bin/ibstat")  # no device: ibstat lists none (and exits 0)
    assert r.stdout == "" and time.monotonic() - t0 < 30
    assert _lines(r.stderr) == [f"fabriclab: wrong token for fabric '{world.name}'"], r.stderr
    foreign = world.net.trays[world.foreign_ns]
    r = world.in_tray(f"{world.dir}/bin/ibstat", ns=world.foreign_ns)
    assert r.stdout == ""
    r2 = world.in_tray(f"{world.dir}/bin/smpquery -C mlx5_0 nodeinfo 1", ns=world.foreign_ns)
    assert r2.returncode != 0 and f"{foreign} is not allowed" in r2.stderr
    assert _lines(r.stderr) == [
        f"fabriclab: {foreign} is not allowed to attach to fabric '{world.name}' (up --allow)"
    ], r.stderr


def test_a_tray_as_a_container_network_and_mount_namespace_sees_only_dir(world):
    """The recipe: DIR bind-mounted at /mnt/fabriclab (attach --at) in a private mount
    namespace of the tray's network namespace, with DIR's own place, the state
    directory and this checkout (fabriclab's install) hidden under empty tmpfs: the
    tools still see the tray, from nothing but the mount."""
    mounted = world.work / "mounted"
    r = world.fabriclab(
        "attach", "--name", world.name, TRAY, str(mounted), "--at", "/mnt/fabriclab"
    )
    assert r.returncode == 0, r.stderr
    repo = Path(__file__).resolve().parent.parent
    script = (
        "set -e; mount -t tmpfs tmpfs /mnt; mkdir /mnt/fabriclab; "
        f"mount --bind {mounted} /mnt/fabriclab; "
        f"mount -t tmpfs tmpfs {world.work}; mount -t tmpfs tmpfs {repo}; "
        f"test ! -e {mounted}/env; test ! -e {repo}/.venv; "
        ". /mnt/fabriclab/env; ibstat -l; ibnetdiscover -C mlx5_2 | grep -c '^Switch'"
    )
    argv = world.net.argv(world.tray_ns, ["unshare", "--mount", "sh", "-c", script])
    r = subprocess.run(argv, env=_BARE, cwd="/", capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = r.stdout.split()
    assert out[:4] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"] and int(out[4]) > 0, r.stdout
    assert (world.work / "state").is_dir()  # the mounts were the namespace's alone


def test_the_server_going_ends_a_waiting_tool_with_one_line(world):
    """Last in the module: it takes the fabric down.  ibping's server, once it has
    answered a ping, waits reading its device; the fabric stopped, it says the server
    went away and ends instead of hanging."""
    lid = world.cluster.tray(TRAY).hcas[1].ports[1].lid
    argv = world.net.argv(world.tray_ns, ["sh", "-c", f"exec {world.dir}/bin/ibping -S -C mlx5_1"])
    ping = subprocess.Popen(argv, env=_BARE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip
    try:

        def answered() -> bool:
            assert ping.poll() is None, ping.communicate()
            r = world.local(OTHER, "ibping", "-c", "1", "-C", "mlx5_0", str(lid))
            return "1 packets transmitted, 1 received" in r.stdout

        wait_for(answered, 30, f"the ibping server at LID {lid} answering", interval=0.2)
        r = world.fabriclab("down", "--name", world.name, timeout=60)
        assert r.returncode == 0, r.stderr
        try:
            _out, err = ping.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            raise AssertionError("the tool hangs when the server goes away") from None
    finally:
        stop_process(ping)
    assert f"fabriclab: the fabric server '{world.name}' went away" in err, err
