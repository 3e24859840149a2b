"""Names another local user could take first: the control socket's abstract name bound
before ``up`` (refused, naming who holds it), the host library's socket (a file in the
0700 state directory, and the library talks only to a server of the fabric's owner or
root), and a user admitted with ``--allow-user``, whom the host library turns away with
one line naming the way that works for them (libumad2sim).  The other uid is nobody
(65534), as in the rest of the suite."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from fabric_server import fabric_up
from helpers import fl, one_error, run_tool, stop_process

from fabriclab.errors import InputError
from fabriclab.ib import simwire
from fabriclab.sim.host.hostlib import library_path
from fabriclab.sim.run import tools
from fabriclab.sim.wire import procfs, sockdiag
from fabriclab.statedir import UnsafeState, bind_socket

NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="another uid needs root to become it")


def _as_nobody() -> None:
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)


def _squat(code: str, *args: str) -> subprocess.Popen:
    """Python ``code`` run as nobody; it prints a line once its sockets are bound."""
    proc = subprocess.Popen(
        [shutil.which("python3", path="/usr/bin:/bin") or sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_as_nobody,
        cwd="/",
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line.strip() != "bound":
        stop_process(proc)
        raise AssertionError(f"the squatter did not bind: {proc.stderr.read()}")
    return proc


_BIND_CTL = """
import socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(b"\\0" + sys.argv[1].encode() + b":ctl\\0")
print("bound", flush=True)
time.sleep(120)
"""


def test_the_holder_of_an_abstract_name_is_named():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    address = simwire.sockname(f"flnames{os.getpid()}", "ctl")
    s.bind(address)
    try:
        with open(f"/proc/{os.getpid()}/comm") as f:
            comm = f.read().strip()
        assert procfs.abstract_holder(address) == f"uid {os.geteuid()} (pid {os.getpid()}, {comm})"
    finally:
        s.close()
    assert procfs.abstract_holder(address) == "no process now"


def test_a_holder_out_of_sight_is_still_named_by_its_uid(monkeypatch):
    """A user who may not read another's /proc/PID/fd still learns the holder's uid,
    from the kernel (sock_diag)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    address = simwire.sockname(f"flnames{os.getpid()}diag", "ctl")
    s.bind(address)
    try:
        assert sockdiag.unix_uid(os.fstat(s.fileno()).st_ino) == os.geteuid()
        monkeypatch.setattr(procfs, "holders", lambda inode: [])  # as another user sees
        assert procfs.abstract_holder(address) == (
            f"uid {os.geteuid()} (its process is not yours to see: root can name it)"
        )
    finally:
        s.close()
    assert sockdiag.unix_uid(2**32 - 2) is None  # no such socket


@as_root
def test_up_on_a_control_name_another_user_holds_names_the_holder(tmp_path):
    name = f"flnames{os.getpid()}ctl"
    squatter = _squat(_BIND_CTL, name)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IBSIM_", "SIM_"))}
    env["FABRICLAB_STATE_DIR"] = str(tmp_path / "state")
    try:
        for detach in (["--detach"], []):
            r = fl("up", "lab", "--name", name, *detach, env=env, cwd=tmp_path, timeout=60)
            one_error(
                r,
                f"error: {name}: the socket name '@{name}:ctl' is held by uid {NOBODY} "
                f"(pid {squatter.pid}, python",
            )
    finally:
        stop_process(squatter)
        if list((tmp_path / "state").glob("*.json")):  # it came up after all
            fl("down", "--name", name, env=env, cwd=tmp_path)


_BIND_OUT = """
import socket, sys, time
socks = []
for i in range(2):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(b"\\0" + sys.argv[1].encode() + b":out%d\\0" % i)
    socks.append(s)
print("bound", flush=True)
time.sleep(120)
"""


@as_root
def test_data_socket_names_another_user_took_are_passed_over(real_tools, tmp_path):
    """Another user binds the names of the first client ids' data sockets: tools still
    attach, at the ids after them."""
    with fabric_up("lab", tmp_path) as f:
        squatter = _squat(_BIND_OUT, f.name)
        try:
            r = f.run("sched-worker1", "ibstat", check=False, timeout=60)
        finally:
            stop_process(squatter)
        assert r.returncode == 0 and "CA 'ibsim0'" in r.stdout, r.stderr
        log = (Path(f.env["FABRICLAB_STATE_DIR"]) / f"{f.name}.log").read_text()
        assert f"{f.name}:out0 is held by another process: client id 0 passed over" in log


def test_the_host_library_socket_is_a_file_in_the_0700_state_directory(real_tools, tmp_path):
    with fabric_up("lab", tmp_path) as f:
        state = Path(f.env["FABRICLAB_STATE_DIR"])
        path = state / f"{f.name}.host"
        st = os.lstat(path)
        assert stat.S_ISSOCK(st.st_mode) and st.st_uid == os.geteuid()
        assert stat.S_IMODE(st.st_mode) == 0o600
        assert stat.S_IMODE(os.stat(state).st_mode) == 0o700
        assert not procfs.abstract_bound(simwire.sockname(f.name, "host"))
        env = tools.host_env(f.instance(), "sched-worker1", base=f.env)
        assert env["FABRICLAB_HOST_SOCKET"] == str(path)
        assert env["FABRICLAB_OWNER"] == str(os.geteuid())
        r = subprocess.run(
            ["ibstat", "-l"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60
        )
        assert (r.returncode, r.stderr) == (0, ""), r.stderr
        assert r.stdout.startswith("mlx5_0\n")
    assert not path.exists()  # gone with its server


# A server of the host protocol run by someone else where the library looks for the
# fabric's: at the socket file it is given, and (where the library used to look) at the
# abstract name.  It answers every HELLO with a tree of its own, and says so.
_FAKE_SERVER = """
import socket, struct, sys, threading
path, name = sys.argv[1], sys.argv[2]
socks = []
for where in (path, b"\\0" + name.encode() + b":host\\0"):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.bind(where)
    s.listen(8)
    socks.append(s)
print("bound", flush=True)

def serve(s):
    while True:
        c, _ = s.accept()
        if not c.recv(4096):  # closed unspoken
            c.close()
            continue
        print("hello", flush=True)
        c.send(struct.pack("<IiII", 0x31484C46, 0, 0, 0) + b"/tmp/not-the-fabrics-tree")
        c.close()

threading.Thread(target=serve, args=(socks[1],), daemon=True).start()
serve(socks[0])
"""


@as_root
def test_the_host_library_refuses_a_server_of_another_uid(real_tools, tmp_path):
    """The fabric's server died and another user serves where it was: the library says
    whose the socket is and does not talk to it."""
    open_dir = Path(tempfile.mkdtemp(prefix="flnames"))  # where nobody can go (not tmp_path)
    open_dir.chmod(0o777)
    name = f"flnames{os.getpid()}host"
    path = open_dir / f"{name}.host"
    fake = _squat(_FAKE_SERVER, str(path), name)
    env = {
        **os.environ,
        "LD_PRELOAD": library_path(),
        "FABRICLAB_SOCKNAME": name,
        "FABRICLAB_HOST_SOCKET": str(path),
        "FABRICLAB_OWNER": str(os.geteuid()),
        "FABRICLAB_TRAY": "sched-worker1",
    }
    try:
        r = subprocess.run(
            ["ibstat", "-l"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60
        )
    finally:
        stop_process(fake)
        shutil.rmtree(open_dir)
    said = [x for x in r.stderr.splitlines() if x.startswith("fabriclab:")]
    assert said == [
        f"fabriclab: {path} is held by uid {NOBODY} (pid {fake.pid}), not by the fabric's "
        f"owner (uid {os.geteuid()}) or root: refusing to talk to it"
    ], r.stderr
    assert "mlx5" not in r.stdout  # no devices listed
    assert fake.stdout is not None and "hello" not in fake.stdout.read()  # never spoken to


@as_root
def test_allow_user_through_the_host_library_is_refused_with_one_line(real_tools, tmp_path):
    """A user admitted with --allow-user cannot reach the owner's 0700 state directory:
    the host library says so in one line naming libumad2sim, which works for them."""
    work = tmp_path / "w"
    work.mkdir()
    work.chmod(0o777)  # libumad2sim writes ./sys-<pid>
    with fabric_up("lab", tmp_path / "f", extra=["--allow-user", "nobody"]) as f:
        env = tools.host_env(f.instance(), "sched-worker1", base=f.env)

        def ibstat(preexec=None) -> subprocess.CompletedProcess:
            return subprocess.run(
                ["ibstat"],
                env=env,
                cwd=work,
                capture_output=True,
                text=True,
                timeout=60,
                preexec_fn=preexec,
            )

        r = ibstat()
        assert (r.returncode, r.stderr) == (0, ""), r.stderr  # the owner
        r = ibstat(_as_nobody)
        said = [x for x in r.stderr.splitlines() if x.startswith("fabriclab:")]
        assert said == [
            f"fabriclab: the host library serves the fabric '{f.name}' to its owner "
            f"(uid {os.geteuid()}) only, not to uid {NOBODY}: a user admitted with up "
            "--allow-user attaches through libumad2sim (fabriclab exec --via umad2sim)"
        ], r.stderr
        assert "CA " not in r.stdout and "Permission denied" not in r.stderr
        # an environment written by hand, without the owner: the socket is out of reach
        del env["FABRICLAB_OWNER"]
        r = ibstat(_as_nobody)
        said = [x for x in r.stderr.splitlines() if x.startswith("fabriclab:")]
        assert said == [
            f"fabriclab: cannot reach the fabric server '{f.name}' at "
            f"{env['FABRICLAB_HOST_SOCKET']}: Permission denied (it serves its owner and "
            "root only: a user admitted with up --allow-user attaches through libumad2sim)"
        ], r.stderr
        # the way it names works for them
        r = run_tool(f.name, "sched-worker1", ["ibstat"], work, timeout=30, preexec_fn=_as_nobody)
        assert r.returncode == 0, r.stderr


def test_a_socket_file_replaces_only_a_stale_socket_of_ours(tmp_path):
    path = tmp_path / "f.host"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    stale.bind(str(path))
    stale.close()  # a killed server's
    s = bind_socket(path, socket.SOCK_SEQPACKET)
    s.close()
    assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600
    path.unlink()
    path.write_text("not a socket\n")
    with pytest.raises(UnsafeState, match="exists and is not our socket"):
        bind_socket(path, socket.SOCK_SEQPACKET)
    assert path.read_text() == "not a socket\n"
    with pytest.raises(InputError, match="path too long"):
        bind_socket(tmp_path / ("x" * 120), socket.SOCK_SEQPACKET)
