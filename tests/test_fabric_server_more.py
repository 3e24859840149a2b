"""The fabric server beyond discovery: a cross-check against the Debian ibsim, many
tools at once, garbage and dying clients, remote (UDP) mode, links taken down and up
with the real ibportstate (and OpenSM reacting to the traps), and the CLI around it."""

from __future__ import annotations

import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import SPECS
from fabric_server import fabric_up
from helpers import no_timestamp
from realtools import ibsim
from simclient import SimClient, dr_smp, fuzz_requests, lid_mad

from fabriclab.formats import ibnetdiscover, ibsim_net
from fabriclab.ib import simwire
from fabriclab.model.build import build
from fabriclab.model.cluster import find_port
from fabriclab.spec.load import load_spec

pytestmark = pytest.mark.realtools
THREE = str(SPECS / "three-tier-hdr.yaml")


def test_same_net_file_on_ibsim_and_fabriclab(real_tools, tmp_path):
    """The same fabric served by the Debian ibsim (from fabriclab's net file) and by
    fabriclab: the real ibnetdiscover prints the same lines, except the one thing ibsim
    cannot express here (a ConnectX's port GUID, which ibsim makes node GUID + 1).  The
    fabric is HDR, which ibsim 0.10 knows, so the rates compare too."""
    cluster = build(load_spec(THREE))
    origin = "node006:mlx5_1"
    start, _ = find_port(cluster, origin)
    net = tmp_path / "fabric.net"
    net.write_text(ibsim_net.render(cluster.fabric))
    with ibsim(net, tmp_path, ibsim_net.limits(cluster.fabric).args()) as sim:
        theirs = sim.run(start.node.desc, "ibnetdiscover").stdout
    with fabric_up(THREE, tmp_path / "fl") as f:
        ours = f.run(origin, "ibnetdiscover").stdout
    # ibsim's CA port GUIDs, mapped back to the node GUID a ConnectX-7 port carries
    fixed = theirs
    for n in cluster.fabric.cas():
        if n.nports == 1:
            fixed = fixed.replace(f"({n.guid + 1:x})", f"({n.guid:x})")
            fixed = fixed.replace(f"port {n.guid + 1:016x}", f"port {n.guid:016x}")
    assert fixed != theirs  # the difference was there, and is now accounted for
    assert no_timestamp(ours) == no_timestamp(fixed)
    assert re.search(r"4xHDR$", ours, re.M)


def test_32_tools_at_once(real_tools, tmp_path):
    """32 real tool processes against one server at the same time, each answered
    correctly: directed-route discovery, LID-routed SMPs and PMA queries mixed."""
    with fabric_up("gb200-su", tmp_path, sm=True) as f:
        hosts = [t.host for t in f.cluster.trays][::4][:32]
        want = {}
        for h in hosts[:12]:
            start, _ = find_port(f.cluster, h)
            want[h] = no_timestamp(ibnetdiscover.render(f.cluster.fabric, start))

        def job(i_host):
            i, h = i_host
            if i < 12:
                return h, "discover", f.run(h, "ibnetdiscover").stdout
            if i < 22:
                return h, "perf", f.run(h, "perfquery", "-x").stdout
            sw = f.cluster.fabric.switches()[i % len(f.cluster.fabric.switches())]
            return h, ("smp", sw), f.run(h, "smpquery", "nodedesc", str(sw.lid)).stdout

        with ThreadPoolExecutor(32) as pool:
            results = list(pool.map(job, enumerate(hosts)))
    assert len(results) == 32
    for h, kind, out in results:
        if kind == "discover":
            assert no_timestamp(out) == want[h]
        elif kind == "perf":
            assert re.search(r"PortXmitData:\.+\d+", out)
        else:
            assert kind[1].desc in out


def test_garbage_and_dying_clients_leave_the_server_answering(real_tools, tmp_path):
    with fabric_up("lab", tmp_path, sm=True) as f:
        inst = f.instance()
        rng = random.Random(1234)
        # control channel garbage: wrong sizes, bad magic, unknown types, unknown clients
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.bind(simwire.sockname(f.name, f"ctl{os.getpid() + 7}"))
            s.settimeout(1)
            for _ in range(300):
                raw = rng.choice(
                    [
                        rng.randbytes(rng.randrange(200)),
                        simwire.Ctl(
                            rng.randrange(50), rng.randrange(20), 0, rng.randbytes(64)
                        ).encode(),
                    ]
                )
                s.sendto(raw, simwire.sockname(f.name, "ctl"))
        # a connected client sending a few thousand broken datagrams
        with SimClient(f.name, "sched-worker2", timeout=0.2) as c:
            answers = 0
            for raw in fuzz_requests(rng, 4000):
                c.data.settimeout(5)
                c.send_raw(raw)
                c.data.settimeout(0.0)
                try:
                    while True:
                        c.recv_raw()
                        answers += 1
                except (TimeoutError, BlockingIOError):
                    pass
            c.data.settimeout(1)
            try:  # the last answers
                while True:
                    c.recv_raw()
                    answers += 1
            except TimeoutError:
                pass
            assert answers > 1000  # well-formed ones are answered (or timed out) as usual
            c.data.settimeout(5)
            status, reply = c.request(dr_smp(0x11, [1]))  # still answered, correctly
            leaf = f.cluster.fabric.find("MF0;LAB-IBLEAF-01:MQM9701/U1")
            assert status == 0 and reply[64 + 12 : 64 + 20] == leaf.guid.to_bytes(8, "big")
        # tools killed in the middle of their work
        env = f.tool_env("sched-worker1")
        procs = [
            subprocess.Popen(
                ["ibnetdiscover"],
                env=env,
                cwd=tmp_path,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for _ in range(6)
        ]
        time.sleep(0.05)
        for p in procs:
            p.send_signal(signal.SIGKILL)
            p.wait()
        # their data sockets are closed once the server notices they are gone
        deadline = time.monotonic() + 10
        while True:
            outs = _out_sockets(f.name)
            if len(outs) <= 1 or time.monotonic() > deadline:  # OpenSM's own
                break
            time.sleep(0.2)
        assert len(outs) <= 1, outs
        assert inst.alive()
        start, _ = find_port(f.cluster, "sched-worker1")
        assert no_timestamp(f.run("sched-worker1", "ibnetdiscover").stdout) == no_timestamp(
            ibnetdiscover.render(f.cluster.fabric, start)
        )


def _out_sockets(name: str) -> list[str]:
    with open("/proc/net/unix") as fh:
        return [line.split()[-1] for line in fh if f"@{name}:out" in line]


def test_sma_semantics(real_tools, tmp_path):
    """What a real SMA answers to what a real SMA refuses (14.2.5): invalid port numbers
    and table blocks, Sets of read-only attributes, state changes out of order."""
    with fabric_up("lab", tmp_path) as f, SimClient(f.name, "sched-worker1") as c:
        # NodeInfo through the CA and through the leaf (LocalPortNum follows)
        st, r = c.request(dr_smp(0x11, [1, 9]))  # the spine, reached through leaf port 9
        assert st == 0 and r[3] == 0x81 and r[64 + 2] == 2 and r[64 + 36] == 1
        # an unknown attribute: "method/attribute unsupported" with the D bit set
        st, r = c.request(dr_smp(0x1234, [1]))
        assert st == 0 and r[4:6] == (0x8000 | 0x000C).to_bytes(2, "big")
        # Set of NodeInfo (read only)
        st, r = c.request(dr_smp(0x11, [1], method=2))
        assert r[4:6] == (0x8000 | 0x000C).to_bytes(2, "big")
        # PortInfo of a port the switch does not have: invalid field
        st, r = c.request(dr_smp(0x15, [1], mod=99))
        assert r[4:6] == (0x8000 | 0x001C).to_bytes(2, "big")
        # ACTIVE straight from INIT is refused; ARMED then ACTIVE is accepted
        from fabriclab.ib.mad.layouts import PORT_INFO

        st, pi = c.request(dr_smp(0x15, [1], mod=3))
        cur = bytes(pi[64:128])
        assert PORT_INFO.get(cur, "LinkState") == 2
        act = PORT_INFO.pack({"LinkState": 4}, base=cur)
        st, r = c.request(dr_smp(0x15, [1], mod=3, method=2, data=act))
        assert r[4:6] == (0x8000 | 0x001C).to_bytes(2, "big")
        assert PORT_INFO.get(r[64:128], "LinkState") == 2
        # a directed route through a CA (it cannot forward) goes nowhere: timeout
        st, r = c.request(dr_smp(0x11, [1, 1, 1]))
        assert st == 110
        # LID routing needs forwarding tables: none before an SM ran
        st, r = c.request(lid_mad(0x01, 0x11), dlid=1)
        assert st == 110


def test_remote_mode_over_udp(real_tools, tmp_path):
    """Trays in other containers or hosts attach over UDP (IBSIM_SERVER_NAME/PORT)."""
    port = _free_udp_range(40)
    with fabric_up("lab", tmp_path, listen=f"127.0.0.1:{port}") as f:
        env = f.tool_env("sched-worker2:mlx5_1")
        assert env["IBSIM_SERVER_NAME"] == "127.0.0.1" and env["IBSIM_SERVER_PORT"] == str(port)
        out = f.run("sched-worker2:mlx5_1", "ibnetdiscover").stdout
        start, _ = find_port(f.cluster, "sched-worker2:mlx5_1")
        assert no_timestamp(out) == no_timestamp(ibnetdiscover.render(f.cluster.fabric, start))


def _free_udp_range(n: int) -> int:
    for base in range(47000, 60000, 97):
        ok = True
        for p in range(base, base + n):
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise AssertionError("no free UDP port range")


def test_ibportstate_takes_a_link_down_and_opensm_reacts(real_tools, toolset, tmp_path):
    """The real ibportstate disables a leaf port: both ends go down, the switch traps to
    OpenSM, which resweeps; enabling it brings the link back to ACTIVE.  With each tool
    set: rdma-core 56 no longer opens a local port that is DOWN, so the HCA behind the
    disabled port cannot query itself there (44 can)."""
    with fabric_up("lab", tmp_path, sm=True) as f:
        leaf = f.cluster.fabric.find("MF0;LAB-IBLEAF-01:MQM9701/U1")
        f.run("sched-worker1", "ibportstate", str(leaf.lid), "5", "disable", tools=toolset)

        def link(port: int) -> str:
            out = f.run("sched-worker1", "iblinkinfo", "--switches-only", tools=toolset).stdout
            return next(
                line for line in out.splitlines() if re.match(rf"\s+{leaf.lid}\s+{port}\[", line)
            )

        assert "Disabled" in link(5)
        assert "Active" in link(4)
        # the trap reached OpenSM, which swept again
        trap = (
            f"Received Generic Notice type:1 num:128 (Link state change) Producer:2 (Switch) "
            f"from LID:{leaf.lid} "
        )
        swept = re.compile(re.escape(trap) + r"(?s:.*)SUBNET UP")
        deadline = time.monotonic() + 20
        while not swept.search(f.opensm_log()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert swept.search(f.opensm_log()), f.opensm_log()[-3000:]
        # the peer HCA sees its link down: ibstat reads libumad2sim's sysfs, which every
        # release opens
        st = f.run("sched-worker2", "ibstat", tools=toolset).stdout
        assert re.search(r"^\s+State: Down$", st, re.M), st
        assert re.search(r"^\s+Physical state: Polling$", st, re.M), st
        smp = f.run(
            "sched-worker2", "smpquery", "-D", "portinfo", "0", "1", tools=toolset, check=False
        )
        if toolset.rdma_core >= 56:
            # libibumad 56 picks a port through umad_get_smi_gsi_pairs, which skips a port
            # whose state is DOWN (umad_check_active): the tool cannot open its own port
            assert smp.returncode != 0, (str(toolset), smp.stdout)
            assert "Can't open UMAD port" in smp.stderr, (str(toolset), smp.stderr)
        else:  # rdma-core 44 opens the port whatever its state and asks it
            assert re.search(r"PhysLinkState:\.+Polling", smp.stdout), (str(toolset), smp)
        f.run("sched-worker1", "ibportstate", str(leaf.lid), "5", "enable", tools=toolset)
        deadline = time.monotonic() + 30
        while "Active" not in link(5) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert "Active" in link(5)
        perf = f.run("sched-worker1", "perfquery", str(leaf.lid), "5", tools=toolset).stdout
        assert int(re.search(r"LinkDownedCounter:\.+(\d+)", perf).group(1)) == 1


def test_exec_shims_and_errors(real_tools, tmp_path):
    with fabric_up("lab", tmp_path) as f:
        r = f.fabriclab("exec", "--name", f.name, "sched-worker2:mlx5_2", "--", "ibnetdiscover")
        assert r.returncode == 0
        assert (
            "# Initiated from node " + f"{f.cluster.fabric.find('sched-worker2 mlx5_2').guid:016x}"
            in r.stdout
        )
        # one-line errors, never a traceback
        for args, msg in [
            (
                ["exec", "--name", f.name, "nosuch-tray", "--", "ibnetdiscover"],
                "no tray, CA or node",
            ),
            (
                ["exec", "--name", f.name, "sched-worker1", "--", "no-such-tool-x"],
                "command not found",
            ),
            (
                ["exec", "--name", "never-started", "sched-worker1", "--", "ibnetdiscover"],
                "no fabric named",
            ),
            (["up", "lab", "--name", f.name], "already up"),
            (["down", "--name", "never-started"], "no fabric named"),
            (["up", "lab", "--name", "a/b"], "without '/'"),
        ]:
            r = f.fabriclab(*args)
            assert r.returncode == 2, (args, r.stderr)
            assert msg in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
            assert all(line.startswith("error: ") for line in r.stderr.strip().splitlines())
        st = f.fabriclab("status")
        assert st.returncode == 0 and f.name in st.stdout and "lab" in st.stdout
        # shims: a bin directory that makes a shell on this machine look like the tray
        bindir = tmp_path / "bin"
        r = f.fabriclab("shims", "--name", f.name, "sched-worker2", str(bindir))
        assert r.returncode == 0, r.stderr
        env = {k: v for k, v in f.env.items() if k not in ("LD_PRELOAD",)}
        env["PATH"] = f"{bindir}:{env['PATH']}"
        out = subprocess.run(
            ["sh", "-c", "sudo ibnetdiscover"],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        start, _ = find_port(f.cluster, "sched-worker2")
        assert no_timestamp(out.stdout) == no_timestamp(
            ibnetdiscover.render(f.cluster.fabric, start)
        )
        smi = subprocess.run(
            [
                "sh",
                "-c",
                "nvidia-smi --query-gpu=fabric.clusterUuid,fabric.cliqueId --format=csv,noheader",
            ],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert smi.stdout.splitlines() == ["7f3c2a10-5b4e-4d6a-9c1e-2b8f0e6d4a91, 1"] * 4
        assert (bindir / "perfquery").exists() and os.access(bindir / "perfquery", os.X_OK)


def test_foreground_up_stops_cleanly_on_sigint(real_tools, tmp_path):
    """'fabriclab up' in the foreground: Ctrl-C (SIGINT) stops it, says what it served,
    and leaves no record behind; its OpenSM goes with it."""
    env = {**os.environ, "FABRICLAB_STATE_DIR": str(tmp_path / "state")}
    name = f"flfg{os.getpid()}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "fabriclab.cli", "up", "lab", "--name", name, "--sm"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    record = tmp_path / "state" / f"{name}.json"
    deadline = time.monotonic() + 60
    while (
        not (tmp_path / "state" / f"{name}.opensm" / "opensm.log").exists()
        or "SUBNET UP" not in (tmp_path / "state" / f"{name}.opensm" / "opensm.log").read_text()
    ):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.1)
    assert record.exists()
    sm_pid = __import__("json").loads(record.read_text())["sm_pid"]
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert f"fabric {name!r} down:" in err and "MADs" in err
    assert not record.exists()
    assert (
        not os.path.exists(f"/proc/{sm_pid}")
        or open(f"/proc/{sm_pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"
    )
