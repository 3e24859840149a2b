"""The fabric server against hostile input and hostile neighbours on the same machine:
datagrams that used to kill it, floods of clients, forged connects and disconnects,
planted state directories and records, remote binds, log floods; and fuzzing of the
control protocol (in-process, with hypothesis) and of a running server, after which the
real tools must still see exactly the model."""

from __future__ import annotations

import json
import os
import re
import resource
import select
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import HERE
from fabric_server import fabric_up
from helpers import (
    SignalWitness,
    alive,
    fl,
    free_udp_ports,
    no_timestamp,
    one_error,
    rendered,
    run_tool,
    served,
    wait_for,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from simclient import SimClient, UdpSimClient, dr_smp, fuzz_requests, lid_mad

from fabriclab.ib import simwire
from fabriclab.model.build import build
from fabriclab.model.cluster import find_port
from fabriclab.sim.wire.server import FabricServer
from fabriclab.spec.load import load_spec

LAB = build(load_spec("lab"))
NOT_A_PID = 100000  # above pid_max (32768 by default, 4194304 at most on 64-bit)


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _udp_ports(pid: int) -> list[int]:
    """The UDP ports process ``pid`` has bound."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    with open("/proc/net/udp") as fh:
        rows = [line.split() for line in fh.readlines()[1:]]
    return [int(r[1].split(":")[1], 16) for r in rows if r[9] in inodes]


def _log(f) -> str:
    return (Path(f.env["FABRICLAB_STATE_DIR"]) / f"{f.name}.log").read_text(errors="replace")


def _ctl(clientid: int, type_: int, data: bytes = b"") -> bytes:
    return simwire.Ctl(clientid, type_, len(data), data).encode()


def _connect_record(key: int, nodeid: str = "", issm: int = 0) -> bytes:
    return _ctl(0, simwire.CTL_CONNECT, simwire.CLIENT_INFO.pack(key, 0, issm, nodeid.encode()))


def _unix(bind: bytes | None = None, timeout: float = 5.0) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    if bind is not None:
        s.bind(bind)
    s.settimeout(timeout)
    return s


def _reply(s: socket.socket) -> simwire.Ctl:
    return simwire.Ctl.decode(s.recv(4096))


def _pump(srv: FabricServer, make):
    """Run ``make()`` (a client attaching) on a thread while this one answers the control
    socket of ``srv``, which is not serving on its own; what ``make`` returned."""
    out: list = []
    t = threading.Thread(target=lambda: out.append(_attempt(make)))
    t.start()
    deadline = time.monotonic() + 10
    while t.is_alive() and time.monotonic() < deadline:  # a polling loop: it serves
        srv.transport.read_control()
        time.sleep(0.005)
    t.join(5)
    if isinstance(out[0], Exception):
        raise out[0]
    return out[0]


def _attempt(make):
    try:
        return make()
    except Exception as e:  # handed to the test's thread
        return e


# --- 1. one datagram, and control requests that fail ------------------------------------


def test_control_record_from_an_unbound_socket_kills_nothing(real_tools, tmp_path):
    """A disconnect (or any type) from an unbound socket has no address to answer: it
    is dropped, and the server and its OpenSM carry on: OpenSM, made to sweep after
    them, brings the subnet up again from its port, which stayed up."""
    with fabric_up("lab", tmp_path, sm=True) as f:
        sm_pid = json.loads((Path(f.env["FABRICLAB_STATE_DIR"]) / f"{f.name}.json").read_text())[
            "sm_pid"
        ]
        with _unix() as s:
            for type_ in (2, 0xDEADBEEF, 77, 0):
                s.sendto(
                    struct.pack("<IIII64s", 0xDEADBEEF, 0, type_, 0, b""),
                    simwire.sockname(f.name, "ctl"),
                )
        # an unknown type from a bound socket is answered, with an error
        with _unix(simwire.sockname(f.name, f"ctl{NOT_A_PID}")) as s:
            s.sendto(_ctl(0, 77), simwire.sockname(f.name, "ctl"))
            assert _reply(s).type == simwire.CTL_ERROR
        f.instance()  # raises if the server is gone
        f.sweep()  # a sweep after the records: OpenSM still attached and answered
        assert "SM port is down" not in f.opensm_log()
        assert alive(sm_pid)
        assert "SMINFO_MASTER" in f.run("sched-worker1", "sminfo").stdout
        assert "internal" not in _log(f) and "Traceback" not in _log(f)


def test_a_control_request_whose_handling_fails_is_answered(real_tools, tmp_path):
    """A handler that raises (a port whose LID cannot be encoded, as a spec with
    ``lids: [-5, …]`` once produced) is answered SIM_CTL_ERROR: the real tool fails at
    once ("ctl error") instead of waiting forever, and the server goes on."""
    with served(LAB) as srv:
        model, _ = LAB.locate("sched-worker1", switches=True)
        # (once the server has encoded its ports ahead: the change is then the port's
        # own, encoded anew when next read, as every change of a port's state is)
        wait_for(lambda: srv.transport.spare_time is None, 30, "the ports encoded ahead")
        port = srv.sim.port_of(model)
        port.lid = -5
        port.changed()
        r = run_tool(srv.name, "sched-worker1", ["ibstat"], tmp_path, timeout=30)
        assert r.returncode != 0 and "ctl error" in r.stderr, r.stderr
        assert srv.stats.failed >= 1
        ok = run_tool(srv.name, "sched-worker2", ["ibstat"], tmp_path, timeout=30)
        assert ok.returncode == 0 and "State: Initializing" in ok.stdout, ok.stderr
        # and in-process: every kind of request on that port is answered
        with SimClient(srv.name, "sched-worker1") as c:
            for t in (simwire.CTL_GET_PORT, simwire.CTL_GET_PORTINFO, simwire.CTL_GET_GID, 200):
                assert c.control(t, b"\0" * 4).type == simwire.CTL_ERROR
            assert c.control(simwire.CTL_GET_GUID).type == simwire.CTL_GET_GUID


# --- 2. floods: limits, expiry, descriptors, ports ------------------------------------


def test_sweep_and_refusals_work_without_free_descriptors(tmp_path):
    """Out of file descriptors: a vanished client is still found (the socket table is
    read through a descriptor kept open), and a connect is refused with an answer."""
    with served(LAB, serve=False) as srv:
        c = _pump(srv, lambda: SimClient(srv.name, "sched-worker1"))
        assert len(srv.clients) == 1
        c.ctl.close()
        c.data.close()  # the client is gone
        # the same process about to attach again (its data socket is never reached)
        late = _unix(simwire.sockname(srv.name, f"ctl{os.getpid()}"), timeout=2)
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        # take every free descriptor number up to the highest in use, then set the
        # limit just above: not one descriptor left
        top = max(int(fd) for fd in os.listdir("/proc/self/fd"))
        fillers = [os.open("/dev/null", os.O_RDONLY)]
        while fillers[-1] < top:
            fillers.append(os.open("/dev/null", os.O_RDONLY))
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (fillers[-1] + 1, hard))
            srv.transport.sweep()
            after_sweep = dict(srv.clients)
            late.sendto(_connect_record(os.getpid()), simwire.sockname(srv.name, "ctl"))
            srv.transport.read_control()
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
            for fd in fillers:
                os.close(fd)
        assert after_sweep == {}
        assert _reply(late).type == simwire.CTL_ERROR
        assert srv.clients == {}
        late.close()


def test_forged_unix_client_flood_is_refused(real_tools, tmp_path):
    """Thousands of connects, each naming a pid whose data socket exists but that is not
    the sender's: every one is answered with a refusal, the server's descriptors stay
    few, and the real tools go on as before."""
    n = 2000
    want = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(want[0], min(want[1], n + 1024)), want[1]))
    with fabric_up("lab", tmp_path) as f:
        pid = f.instance().pid
        fakes = [_unix(simwire.sockname(f.name, f"in{NOT_A_PID + i}")) for i in range(n)]
        with _unix(simwire.sockname(f.name, f"ctl{NOT_A_PID}")) as s:
            types = []
            for i in range(n):
                s.sendto(_connect_record(NOT_A_PID + i), simwire.sockname(f.name, "ctl"))
                types.append(_reply(s).type)
        assert set(types) == {simwire.CTL_ERROR}
        assert _fds(pid) < 100
        for x in fakes:
            x.close()
        assert no_timestamp(f.run("sched-worker1", "ibnetdiscover").stdout) == rendered(
            f.cluster, "sched-worker1"
        )
    log = _log(f)
    assert len(re.findall(r"connect from \S+ refused", log)) <= 10
    assert re.search(r"\d+ more refused control requests suppressed", log)
    assert re.search(r"down: .* 2000 control requests refused", log)


def _discovers_once_a_place_is_free(f, where: str) -> None:
    """Wait until a real ibnetdiscover at ``where`` attaches (a place was freed for it);
    what it shows must be the model's."""
    r = wait_for(
        lambda: (r := f.run(where, "ibnetdiscover", check=False)).returncode == 0 and r,
        15,
        "a place freed for a new tool",
        interval=0.5,
    )
    assert no_timestamp(r.stdout) == rendered(f.cluster, where)


_CHILD = """
import os, sys
sys.path.insert(0, {tests!r})
from simclient import SimClient
try:
    c = SimClient({name!r}, "sched-worker1")
    print("attached", flush=True)
except ConnectionError:
    print("refused", flush=True)
sys.stdin.read()
"""


def test_client_limit_refuses_cleanly_and_dead_clients_expire(real_tools, tmp_path):
    """``--max-clients``: real processes beyond it are refused (answered), a real tool
    too (it fails at once, no hang); once they die, the sweep frees their places."""
    with fabric_up("lab", tmp_path, extra=["--max-clients", "6"]) as f:
        code = _CHILD.format(tests=str(HERE), name=f.name)
        kids, said = [], []
        for _ in range(9):
            p = subprocess.Popen(
                [sys.executable, "-c", code],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=f.env,
            )
            kids.append(p)
            said.append(p.stdout.readline().strip())
        try:
            assert said == ["attached"] * 6 + ["refused"] * 3
            t0 = time.monotonic()
            r = f.run("sched-worker2", "ibstat", check=False, timeout=30)
            assert r.returncode != 0 and "connect failed" in r.stderr
            assert time.monotonic() - t0 < 10  # refused: it did not wait for an answer
            assert _fds(f.instance().pid) < 60
        finally:
            for p in kids:
                p.kill()
                p.wait()
        _discovers_once_a_place_is_free(f, "sched-worker2")
        assert "holds its limit of 6 clients" in _log(f)


def test_udp_connect_flood_keeps_ports_in_range(real_tools, tmp_path):
    """Twenty thousand connects from one UDP sender, each claiming another data port:
    the server's data ports never leave the valid range (they used to overflow past
    65535, after which no tool could attach), and a real tool attaches afterwards."""
    port = free_udp_ports(12, 65300, 65420)
    with fabric_up("lab", tmp_path, listen=f"127.0.0.1:{port}") as f:
        pid = f.instance().pid
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind(("127.0.0.1", 0))
            s.settimeout(0.02)
            answers = 0
            for batch in range(200):  # in batches the server's receive buffer holds
                for i in range(100):
                    s.sendto(_connect_record(1 + (batch * 100 + i) % 65535), ("127.0.0.1", port))
                try:
                    while True:
                        s.recv(4096)
                        answers += 1
                except TimeoutError:
                    pass
        assert answers > 1000
        assert _fds(pid) < 60
        ports = _udp_ports(pid)
        assert port in ports and len(ports) <= 3 and all(port <= p <= 65535 for p in ports)
        r = f.run("sched-worker2", "ibnetdiscover", timeout=60)
        assert no_timestamp(r.stdout) == rendered(f.cluster, "sched-worker2")
        assert "internal" not in _log(f) and "OverflowError" not in _log(f)


def test_udp_client_limits_per_sender_and_expiry(real_tools, tmp_path):
    """Remote mode: one sender (here a user of this host) holds at most its share of the
    clients; beyond it, refusals are answered; clients whose sockets are closed expire,
    and the real tools attach again."""
    port = free_udp_ports(12, 47000, 60000)
    with fabric_up("lab", tmp_path, listen=f"127.0.0.1:{port}", extra=["--max-clients", "8"]) as f:
        fakes, refused = [], 0
        for _ in range(10):
            try:
                fakes.append(UdpSimClient(("127.0.0.1", port), "sched-worker1"))
            except ConnectionError:
                refused += 1
        assert (len(fakes), refused) == (4, 6)
        r = f.run("sched-worker2", "ibstat", check=False, timeout=30)
        assert r.returncode != 0 and "connect failed" in r.stderr
        for c in fakes:  # gone without a word
            c.ctl.close()
            c.data.close()
        _discovers_once_a_place_is_free(f, "sched-worker2")
        assert "uid 0 holds its limit of 4 clients" in _log(f)


def test_silent_remote_clients_make_way_when_places_run_out():
    """A client on another host (its sockets cannot be seen from here) that has been
    silent for longer than the policy allows loses its place to a new client when the
    limit is reached; one that spoke since does not, though it came first.  (No second
    host here: loopback is taken for one.)"""
    from fabriclab.sim.wire.admission import Policy

    port = free_udp_ports(4, 47000, 60000)
    start, _ = find_port(LAB, None)
    srv = FabricServer(
        LAB.fabric,
        "x",
        listen=("127.0.0.1", port),
        default_port=start,
        policy=Policy(max_clients=2, max_per_sender=2, idle_after=0.5),
    )
    srv.bind()
    srv.control.addresses._local["127.0.0.1"] = False  # pretend loopback is another host
    clients = []
    try:

        def attach():
            clients.append(_pump(srv, lambda: UdpSimClient(("127.0.0.1", port))))
            return clients[-1]

        b, _a = attach(), attach()  # b first: the longer silent of the two, until it speaks
        assert len(srv.clients) == 2
        with pytest.raises(ConnectionError):  # both are fresh: no place for a third
            attach()
        policy = srv.transport.policy
        wait_for(
            lambda: all(srv.transport.idle(cl) > policy.idle_after for cl in srv.clients.values()),
            10,
            "both clients silent for longer than the policy allows",
        )
        # b is busy: one MAD, read by the server once it is there
        b.send_raw(simwire.REQUEST.pack(0xFFFF, 0, 0, 0, 0, 256, dr_smp(0x11, [1])))
        (cl_b,) = [cl for cl in srv.clients.values() if cl.key == b.key]
        assert select.select([cl_b.sock], [], [], 10)[0], "b's MAD did not reach the server"
        for cl in list(srv.clients.values()):
            srv.transport.receive(cl)
        srv.control._next_reclaim = 0
        c = attach()  # a has been silent too long: it makes way
        assert {cl.key for cl in srv.clients.values()} == {b.key, c.key}
        assert simwire.REQUEST.unpack(b.recv_raw())[4] == 0  # b's NodeInfo was answered
    finally:
        for x in clients:
            x.ctl.close()
            x.data.close()
        srv.close()


# --- 3. forged connects and disconnects -------------------------------------------------


def test_forged_connects_and_disconnects_cannot_detach_opensm_or_a_tool(real_tools, tmp_path):
    with fabric_up("lab", tmp_path, sm=True) as f:
        inst = f.instance()
        ctl = simwire.sockname(f.name, "ctl")
        with _unix(simwire.sockname(f.name, f"ctl{NOT_A_PID}")) as s:
            # a connect claiming OpenSM's pid (and so its sockets)
            s.sendto(_connect_record(inst.sm_pid, "sched-worker1"), ctl)
            assert _reply(s).type == simwire.CTL_ERROR
            # disconnects and IsSM changes in other clients' names
            for cid in range(4):
                s.sendto(_ctl(cid, simwire.CTL_SET_ISSM, struct.pack("<I", 0)), ctl)
                assert _reply(s).type == simwire.CTL_ERROR
                s.sendto(_ctl(cid, simwire.CTL_DISCONNECT), ctl)
                s.recv(4096)
        # a process claiming another live process's pid, from sockets named after it
        sleeper = subprocess.Popen(["sleep", "60"])
        try:
            with (
                _unix(simwire.sockname(f.name, f"ctl{sleeper.pid}")) as s,
                _unix(simwire.sockname(f.name, f"in{sleeper.pid}")),
            ):
                s.sendto(_connect_record(sleeper.pid), ctl)
                assert _reply(s).type == simwire.CTL_ERROR
        finally:
            sleeper.kill()
            sleeper.wait()
        # a tool attached here, and a child process claiming its pid
        with SimClient(f.name, "sched-worker2") as c:
            code = (
                f"import socket, struct; s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); "
                f"s.settimeout(5); s.bind({simwire.sockname(f.name, 'ctlchild')!r}); "
                f"s.sendto({_connect_record(os.getpid(), 'sched-worker2')!r}, {ctl!r}); "
                f"print(struct.unpack_from('<III', s.recv(100))[2]); "
                f"s.sendto({_ctl(c.id, simwire.CTL_DISCONNECT)!r}, {ctl!r}); "
                f"print(struct.unpack_from('<III', s.recv(100))[2])"
            )
            out = subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, timeout=30
            ).stdout.split()
            assert out == [str(simwire.CTL_ERROR), str(simwire.CTL_ERROR)]
            status, reply = c.request(dr_smp(0x11, [1]))  # still attached, still answered
            assert status == 0 and reply[64 + 12 : 64 + 20] == f.cluster.fabric.find(
                "MF0;LAB-IBLEAF-01:MQM9701/U1"
            ).guid.to_bytes(8, "big")
        assert "SMINFO_MASTER" in f.run("sched-worker1", "sminfo").stdout
        f.sweep()  # a sweep after the forgeries: OpenSM still attached and answered
        assert "SM port is down" not in f.opensm_log()
        assert alive(inst.sm_pid)


def test_forged_udp_connect_cannot_take_a_live_clients_port(real_tools, tmp_path):
    port = free_udp_ports(8, 47000, 60000)
    with fabric_up("lab", tmp_path, listen=f"127.0.0.1:{port}"):
        with UdpSimClient(("127.0.0.1", port), "sched-worker1") as victim:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.bind(("127.0.0.1", 0))
                s.settimeout(5)
                s.sendto(_connect_record(victim.key, "sched-worker2"), ("127.0.0.1", port))
                assert _reply(s).type == simwire.CTL_ERROR
                s.sendto(_ctl(victim.id, simwire.CTL_DISCONNECT), ("127.0.0.1", port))
                assert _reply(s).type == simwire.CTL_ERROR
            status, reply = victim.request(dr_smp(0x11, [1]))
            assert status == 0 and reply[3] == 0x81


def test_other_users_are_refused_unless_allowed(real_tools, tmp_path):
    """Only the server's own uid may attach; ``--allow-user`` adds others.  A refused
    tool fails at once."""
    work = tmp_path / "w"
    work.mkdir()
    work.chmod(0o777)  # libumad2sim writes ./sys-<pid>

    def as_nobody():
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)

    for extra, ok in (([], False), (["--allow-user", "nobody"], True)):
        with fabric_up("lab", tmp_path / f"f{ok}", extra=extra) as f:
            r = f.run("sched-worker1", "ibstat", check=False, timeout=30)
            assert r.returncode == 0  # the server's own user
            r = run_tool(
                f.name, "sched-worker1", ["ibstat"], work, timeout=30, preexec_fn=as_nobody
            )
            assert (r.returncode == 0) == ok, r.stderr
            if not ok:
                assert "connect failed" in r.stderr
                assert "uid 65534 may not attach" in _log(f)


# --- 4. the state directory and its records ------------------------------------------


@pytest.fixture
def tmp_env(tmp_path):
    """An environment whose state directory is the default one under TMPDIR."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("FABRICLAB_STATE_DIR", "XDG_RUNTIME_DIR")
        and not k.startswith(("IBSIM_", "SIM_"))
    }
    env["TMPDIR"] = str(tmp_path)
    return env, tmp_path / f"fabriclab-{os.geteuid()}"


def test_a_symlinked_state_directory_is_refused(tmp_env, tmp_path):
    env, state = tmp_env
    target = tmp_path / "elsewhere"
    target.mkdir()
    state.symlink_to(target)
    name = f"flhard{os.getpid()}sym"
    r = fl("up", "lab", "--name", name, "--detach", env=env, cwd=tmp_path)
    try:
        one_error(r, str(state), "symbolic link")
        assert list(target.iterdir()) == []
    finally:
        if r.returncode == 0:
            fl("down", "--name", name, env=env, cwd=tmp_path)


def test_a_state_directory_of_another_user_is_refused(tmp_env, tmp_path):
    """Another user made /tmp/fabriclab-<uid> first and planted a log symlink (to make
    'up --detach' append to a file of theirs) and a record (so that 'down' signals a
    process of their choice, or 'exec' attaches to their server)."""
    env, state = tmp_env
    state.mkdir(mode=0o700)
    name = f"flhard{os.getpid()}own"
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (state / f"{name}.log").symlink_to(victim)
    with SignalWitness() as witness:  # the process of their choice
        (state / f"{name}.json").write_text(
            json.dumps(
                {
                    "name": name,
                    "pid": witness.pid,
                    "spec": "lab",
                    "trays": None,
                    "listen": None,
                    "log": str(state / f"{name}.log"),
                    "started": 0,
                    "sm_pid": witness.pid,
                }
            )
        )
        os.chown(state, 12345, 12345)
        for p in state.iterdir():
            os.chown(p, 12345, 12345, follow_symlinks=False)
        r = fl("up", "lab", "--name", name, "--detach", env=env, cwd=tmp_path)
        if r.returncode == 0:
            fl("down", "--name", name, env=env, cwd=tmp_path)
        one_error(r, "owned by uid 12345")
        assert victim.read_text() == "precious\n"
        r = fl("down", "--name", name, env=env, cwd=tmp_path)
        one_error(r, "owned by uid 12345")
        witness.assert_unsignalled()
        r = fl(
            "exec",
            "--name",
            name,
            "sched-worker1",
            "--",
            "ibstat",
            env=env,
            cwd=tmp_path,
            timeout=30,
        )
        one_error(r, "owned by uid 12345")
        r = fl("status", env=env, cwd=tmp_path)
        one_error(r, "owned by uid 12345")
        # writable by others is as bad, even when it is ours
        os.chown(state, os.geteuid(), os.getegid())
        state.chmod(0o777)
        one_error(fl("down", "--name", name, env=env, cwd=tmp_path), "writable by others")
        witness.assert_unsignalled()


def _stat_start(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[19])


def test_a_reused_pid_is_never_signalled(tmp_path):
    """A record whose pid now belongs to another process (another start time, or no
    start time recorded at all): 'down' refuses to signal it; a record whose process
    is alive but does not hold the fabric's socket: 'exec' refuses to attach there."""
    state = tmp_path / "state"
    env = {**os.environ, "FABRICLAB_STATE_DIR": str(state)}
    state.mkdir(mode=0o700)
    with SignalWitness() as witness:
        base = {
            "spec": "lab",
            "trays": None,
            "listen": None,
            "log": "",
            "started": 0,
            "sm_pid": None,
        }
        cmd = witness.cmdline
        for name, extra in (
            ("reused", {"start": _stat_start(witness.pid) - 7, "cmdline": cmd}),
            ("unknown", {}),
        ):
            (state / f"{name}.json").write_text(
                json.dumps({**base, "name": name, "pid": witness.pid, **extra})
            )
            one_error(fl("down", "--name", name, env=env, cwd=tmp_path))
            witness.assert_unsignalled()
        # alive and itself, but someone else holds the fabric's name
        name = f"flhard{os.getpid()}squat"
        (state / f"{name}.json").write_text(
            json.dumps(
                {
                    **base,
                    "name": name,
                    "pid": witness.pid,
                    "start": _stat_start(witness.pid),
                    "cmdline": cmd,
                }
            )
        )
        with _unix(simwire.sockname(name, "ctl")):
            r = fl(
                "exec",
                "--name",
                name,
                "sched-worker1",
                "--",
                "ibstat",
                env=env,
                cwd=tmp_path,
                timeout=30,
            )
        one_error(r, "is not held by the fabric's server")
        # a record that is a symlink
        (state / "link.json").symlink_to(state / f"{name}.json")
        one_error(fl("down", "--name", "link", env=env, cwd=tmp_path), "symbolic link")
        witness.assert_unsignalled()


def test_up_records_who_it_is_and_down_stops_it(real_tools, tmp_path):
    with fabric_up("lab", tmp_path, sm=True) as f:
        state = Path(f.env["FABRICLAB_STATE_DIR"])
        assert (state.stat().st_mode & 0o777) == 0o700
        rec = json.loads((state / f"{f.name}.json").read_text())
        assert rec["start"] == _stat_start(rec["pid"]) and "up" in rec["cmdline"]
        assert rec["sm_start"] == _stat_start(rec["sm_pid"]) and "opensm" in rec["sm_cmdline"][0]
        assert ((state / f"{f.name}.log").stat().st_mode & 0o777) == 0o600
    assert not alive(rec["pid"]) and not alive(rec["sm_pid"])


# --- 5. remote binds ------------------------------------------------------------------


def test_a_non_loopback_listen_needs_allow(real_tools, tmp_path):
    port = free_udp_ports(8, 47000, 60000, host="0.0.0.0")
    env = {**os.environ, "FABRICLAB_STATE_DIR": str(tmp_path / "state")}
    name = f"flhard{os.getpid()}any"
    r = fl(
        "up",
        "lab",
        "--name",
        name,
        "--listen",
        f"0.0.0.0:{port}",
        "--detach",
        env=env,
        cwd=tmp_path,
    )
    if r.returncode == 0:
        fl("down", "--name", name, env=env, cwd=tmp_path)
    one_error(r, "--listen", "not a loopback address", "--allow")
    for bad in ("10.0.0.0/33", "fe80::/10", "nonsense"):
        r = fl(
            "up",
            "lab",
            "--name",
            name,
            "--listen",
            f"0.0.0.0:{port}",
            "--allow",
            bad,
            env=env,
            cwd=tmp_path,
        )
        one_error(r, "--allow")
    one_error(
        fl("up", "lab", "--name", name, "--allow", "10.0.0.0/8", env=env, cwd=tmp_path),
        "--allow",
        "remote mode",
    )


def test_allow_filters_senders(real_tools, tmp_path):
    """Served on every address for 127.0.0.1/32 only: a sender at 127.0.0.2 is not
    answered (and is counted, its log lines limited); the real tools here work."""
    port = free_udp_ports(8, 47000, 60000, host="0.0.0.0")
    with fabric_up(
        "lab", tmp_path, listen=f"0.0.0.0:{port}", extra=["--allow", "127.0.0.1/32"]
    ) as f:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind(("127.0.0.2", 0))
            s.settimeout(1)
            for _ in range(300):
                s.sendto(_connect_record(s.getsockname()[1]), ("127.0.0.1", port))
                # pacing, not a wait: 300 datagrams sent no faster than the server's
                # receive buffer takes them, so that every one is counted
                time.sleep(0.002)
            with pytest.raises(socket.timeout):
                s.recv(4096)
        out = f.run("sched-worker1", "ibnetdiscover").stdout
        assert no_timestamp(out) == rendered(f.cluster, "sched-worker1")
    log = _log(f)
    assert (
        1
        <= len(re.findall(r"from 127\.0\.0\.2:\d+ dropped: not in the allowed networks", log))
        <= 10
    )
    counted = int(re.search(r"down: .* (\d+) datagrams from outside the allowed networks", log)[1])
    assert 250 <= counted <= 300


# --- 6. log floods ----------------------------------------------------------------------


def test_malformed_datagrams_are_counted_and_their_log_lines_limited(real_tools, tmp_path):
    with fabric_up("lab", tmp_path) as f:
        with SimClient(f.name, "sched-worker1") as c:
            for i in range(3000):
                c.send_raw(b"x" * (i % 200))
            with _unix(simwire.sockname(f.name, f"ctl{NOT_A_PID}")) as s:
                for i in range(3000):
                    s.sendto(b"\1" * (i % 100), simwire.sockname(f.name, "ctl"))
            status, _ = c.request(dr_smp(0x11, [1]))
            assert status == 0
    log = _log(f)
    assert len(log.splitlines()) < 40, log[-3000:]
    assert re.search(r"\d+ more malformed datagrams suppressed", log)
    assert re.search(r"\d+ more malformed control records suppressed", log)
    assert re.search(r"down: .* 6000 malformed", log)


# --- fuzzing ----------------------------------------------------------------------------


@given(st.binary(max_size=200))
def test_ctl_decode_takes_any_bytes(raw):
    try:
        ctl = simwire.Ctl.decode(raw)
    except ValueError:
        assert len(raw) != simwire.CTL.size or raw[:4] != struct.pack("<I", simwire.MAGIC)
    else:
        assert ctl.encode() == raw


_u32 = st.integers(0, 2**32 - 1)
_nodeids = st.sampled_from(
    ["", "sched-worker1", "sched-worker2:mlx5_2", "nosuch", "S-1", "x" * 40, "\xff\xfe"]
)


@st.composite
def _control_datagram(draw, pid: int):
    kind = draw(st.sampled_from(["record", "connect", "raw"]))
    if kind == "raw":
        return draw(st.binary(max_size=120))
    clientid = draw(st.one_of(st.integers(0, 4), _u32))
    if kind == "connect":
        key = draw(st.one_of(st.just(pid), _u32))
        data = simwire.CLIENT_INFO.pack(
            key,
            draw(st.integers(0, 3)),
            draw(st.integers(0, 1)),
            draw(_nodeids).encode("utf-8", "replace")[:32],
        )
        return simwire.Ctl(clientid, simwire.CTL_CONNECT, draw(_u32), data).encode()
    type_ = draw(st.one_of(st.integers(0, 12), _u32))
    return simwire.Ctl(
        clientid, type_, draw(_u32), draw(st.binary(min_size=64, max_size=64))
    ).encode()


def test_control_handling_fuzz():
    """Arbitrary control datagrams, from this process's own client sockets, from another
    name and from an unbound socket, handled in-process: nothing escapes the loop, each
    well-formed record from a bound socket gets exactly one answer, and the server keeps
    its invariants (limits, a watched socket per client, one SM per port)."""
    pid = os.getpid()
    with served(LAB, serve=False) as srv:
        ctl = simwire.sockname(srv.name, "ctl")
        mine = _unix(simwire.sockname(srv.name, f"ctl{pid}"), timeout=0)
        data = _unix(simwire.sockname(srv.name, f"in{pid}"), timeout=0)
        other = _unix(simwire.sockname(srv.name, f"ctl{NOT_A_PID}"), timeout=0)
        anon = _unix(timeout=0)
        try:

            @settings(
                max_examples=400,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
            )
            @given(
                st.lists(
                    st.tuples(st.sampled_from([mine, other, anon]), _control_datagram(pid)),
                    max_size=12,
                )
            )
            def run(batch):
                for s, raw in batch:
                    s.sendto(raw, ctl)
                    srv.transport.read_control()  # raises nothing
                    if s is anon:
                        continue
                    answers = []
                    try:
                        while True:
                            answers.append(s.recv(4096))
                    except BlockingIOError:
                        pass
                    well_formed = len(raw) == simwire.CTL.size and raw[:4] == struct.pack(
                        "<I", simwire.MAGIC
                    )
                    assert len(answers) == (1 if well_formed else 0)
                    if answers:
                        assert len(answers[0]) == simwire.CTL.size
                assert len(srv.clients) <= srv.transport.capacity
                for cl in srv.clients.values():
                    assert srv.transport._fds.get(cl.sock.fileno()) is cl
                    assert cl.key == pid and cl.addr == simwire.sockname(srv.name, f"ctl{pid}")
                sms = [cl.port for cl in srv.clients.values() if cl.issm]
                assert len(sms) == len(set(map(id, sms)))

            run()
            # and then a client that does everything right is served
            mine.sendto(_connect_record(pid, "sched-worker1"), ctl)
            srv.transport.read_control()
            reply = simwire.Ctl.decode(mine.recv(4096))
            assert reply.type == simwire.CTL_CONNECT
            cid = simwire.CLIENT_INFO.unpack(reply.data[: simwire.CLIENT_INFO.size])[0]
            mine.sendto(_ctl(cid, simwire.CTL_GET_GUID), ctl)
            srv.transport.read_control()
            guid = LAB.locate("sched-worker1", switches=True)[0].node.guid
            assert simwire.Ctl.decode(mine.recv(4096)).data[:8] == guid.to_bytes(8, "little")
        finally:
            for s in (mine, data, other, anon):
                s.close()


@st.composite
def _mutated_request(draw):
    """A well-formed request the real tools send (discovery SMPs along real paths,
    LID-routed SMPs and PMA queries), with some of its bytes changed, or plain junk.
    No Sets of SMP attributes: a valid one would change the fabric under test."""
    kind = draw(st.sampled_from(["dr", "lid", "pma", "junk"]))
    if kind == "junk":
        return draw(st.one_of(st.binary(max_size=400), st.binary(min_size=288, max_size=288)))
    attr = draw(st.sampled_from([0x10, 0x11, 0x12, 0x14, 0x15, 0x19, 0x1B, 0x20, 0x30, 0x31]))
    if kind == "dr":
        path = draw(st.lists(st.integers(0, 40), min_size=1, max_size=6))
        mad = dr_smp(attr, path, mod=draw(st.integers(0, 300)))
    elif kind == "lid":
        mad = lid_mad(0x01, attr, mod=draw(st.integers(0, 300)))
    else:
        mad = lid_mad(
            0x04,
            draw(st.sampled_from([0x12, 0x11, 0x13, 0x1D, 0x1E, 0x01])),
            data=bytes([0, draw(st.integers(0, 255))]),
        )
    mad = bytearray(mad)
    for pos, val in draw(st.lists(st.tuples(st.integers(0, 255), st.integers(0, 255)), max_size=6)):
        mad[pos] = val
    if mad[1] in (0x01, 0x81) and mad[3] & 0x7F == 0x02:
        mad[3] = (mad[3] & 0x80) | 0x01  # a Get instead
    dlid = draw(st.one_of(st.just(0xFFFF), st.integers(0, 200), st.integers(0, 0xFFFF)))
    dqp = draw(st.sampled_from([0, 1, 2, 7]))
    req = bytearray(simwire.REQUEST.pack(dlid, 0, dqp, 0, 0, 256, bytes(mad)))
    for pos, val in draw(st.lists(st.tuples(st.integers(0, 31), st.integers(0, 255)), max_size=2)):
        req[pos] = val
    return bytes(req)


def test_datagram_fuzz_of_a_running_server(real_tools, tmp_path):
    """Thousands of random and mutated requests and control records against a running
    server with OpenSM; afterwards the real tools see exactly the model."""
    import random

    with fabric_up("lab", tmp_path, sm=True) as f:
        ctl = simwire.sockname(f.name, "ctl")
        with (
            SimClient(f.name, "sched-worker2", timeout=5) as c,
            _unix(simwire.sockname(f.name, f"ctl{NOT_A_PID}")) as other,
            _unix() as anon,
        ):

            def drain(timeout: float = 0.0) -> None:
                """Read what came back (the answers, and the refusals to ``other``)."""
                c.data.settimeout(timeout)
                try:
                    while True:
                        c.recv_raw()
                except (TimeoutError, BlockingIOError):
                    pass
                other.setblocking(False)
                try:
                    while True:
                        other.recv(4096)
                except BlockingIOError:
                    pass
                other.settimeout(5)

            @settings(
                max_examples=30,
                deadline=None,
                derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
            )
            @given(
                st.lists(_mutated_request(), min_size=50, max_size=150),
                st.lists(st.tuples(st.booleans(), _control_datagram(NOT_A_PID)), max_size=30),
            )
            def run(requests, controls):
                for raw in requests:
                    c.data.settimeout(5)
                    c.send_raw(raw)
                    drain()
                for bound, raw in controls:  # from a bound socket, or from an unbound one
                    (other if bound else anon).sendto(raw, ctl)
                drain(0.05)

            run()
            # the seeded generator the older garbage test uses, on top
            for raw in fuzz_requests(random.Random(99), 2000):
                c.data.settimeout(5)
                c.send_raw(raw)
                drain()
            drain(1.0)
            c.data.settimeout(5)
            status, reply = c.request(dr_smp(0x11, [1]))
            assert status == 0 and reply[3] == 0x81
        for where in ("sched-worker1", "sched-worker2:mlx5_2"):
            assert no_timestamp(f.run(where, "ibnetdiscover").stdout) == rendered(f.cluster, where)
        assert "SMINFO_MASTER" in f.run("sched-worker1", "sminfo").stdout
        assert re.search(r"PortXmitData:\.+\d+", f.run("sched-worker1", "perfquery", "-x").stdout)
        assert "Traceback" not in _log(f)
