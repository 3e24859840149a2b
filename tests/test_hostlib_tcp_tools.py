"""The real tools on a tray through the host library over TCP, against the real server
(``fabriclab up --host-listen 127.0.0.1:0``): ibstat, ibnetdiscover -C mlx5_2 and
perfquery print over TCP what they print through the fabric's socket file, and ``down``
ends a tool waiting on its umad device with the library's "went away" line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest
from fabric_server import fabric_up
from helpers import no_timestamp

from fabriclab.sim.run import tools

pytestmark = pytest.mark.realtools

TRAY = "gb-r02-t03"


def _envs(f, tray: str, tmp) -> tuple[dict[str, str], dict[str, str]]:
    """The tool's environment through the socket file, and over TCP."""
    inst = f.instance()
    local = tools.host_env(inst, tray, base=f.env)
    host, port = inst.host_listen
    tcp = {k: v for k, v in local.items() if k not in ("FABRICLAB_HOST_SOCKET", "FABRICLAB_OWNER")}
    tcp["FABRICLAB_HOST_ADDR"] = f"{host}:{port}"
    tcp["FABRICLAB_HOST_TOKEN_FILE"] = inst.host_token
    tcp["TMPDIR"] = str(tmp)
    return local, tcp


def _run(argv: list[str], env: dict[str, str], cwd, timeout: float = 120):
    return subprocess.run(
        argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


@pytest.fixture(scope="module")
def su(real_tools, tmp_path_factory):
    with fabric_up(
        "gb200-su", tmp_path_factory.mktemp("sutcp"), extra=["--host-listen", "127.0.0.1:0"]
    ) as f:
        yield f


def test_the_tools_print_over_tcp_what_they_print_through_the_socket_file(su, tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    local, tcp = _envs(su, TRAY, tmp)
    r = _run(["ibstat"], tcp, tmp_path)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert re.findall(r"^CA '(\S+)'", r.stdout, re.M) == [f"mlx5_{i}" for i in range(4)]
    assert r.stdout.count("\t\tRate: 400\n") == 4
    assert r.stdout == _run(["ibstat"], local, tmp_path).stdout
    argv = ["ibnetdiscover", "-C", "mlx5_2"]
    over = _run(argv, tcp, tmp_path)
    assert over.returncode == 0, over.stderr
    assert no_timestamp(over.stdout) == no_timestamp(_run(argv, local, tmp_path).stdout)
    assert len(re.findall(r"^Switch", over.stdout, re.M)) == 41  # rail 2 of gb200-su
    argv = ["perfquery", "-C", "mlx5_1"]
    over, here = _run(argv, tcp, tmp_path), _run(argv, local, tmp_path)
    assert over.returncode == 0, over.stderr
    fields = re.compile(r"^(PortSelect|CounterSelect|SymbolErrorCounter|LinkDownedCounter)\S*")
    assert [x for x in over.stdout.splitlines() if fields.match(x)] == [
        x for x in here.stdout.splitlines() if fields.match(x)
    ]
    assert os.listdir(tmp) == [] and os.listdir(tmp_path) == ["tmp"]


_WAIT = """
import os, select, sys
fd = os.open("/dev/infiniband/umad0", os.O_RDWR)
print("open", flush=True)
select.select([fd], [], [], 60)  # the server goes meanwhile: readable at once
try:
    os.read(fd, 320)
except OSError as e:
    print(e.strerror)
"""


def test_the_server_going_down_ends_a_waiting_tool_with_one_line(real_tools, tmp_path):
    with fabric_up("lab", tmp_path / "lab", extra=["--host-listen", "127.0.0.1:0"]) as f:
        _, tcp = _envs(f, "sched-worker1", tmp_path)
        p = subprocess.Popen(
            [sys.executable, "-c", _WAIT], env=tcp, cwd=tmp_path, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        assert p.stdout is not None and p.stdout.readline() == "open\n"
        t0 = time.monotonic()
    try:
        out, err = p.communicate(timeout=30)
    finally:
        p.kill()
    assert time.monotonic() - t0 < 30
    assert out == "Input/output error\n"  # the device failed (EIO), as on the socket file
    assert err == f"fabriclab: the fabric server '{f.name}' went away\n"


def test_a_foreign_address_and_a_wrong_token_are_refused_with_one_line(real_tools, tmp_path):
    allow = ["--host-listen", "127.0.0.1:0", "--allow", "192.0.2.0/24"]  # not loopback
    with fabric_up("lab", tmp_path / "lab", extra=allow) as f:
        _, tcp = _envs(f, "sched-worker1", tmp_path)
        r = _run(["ibstat", "-l"], tcp, tmp_path)
    assert (r.stdout, r.stderr) == (
        "",
        f"fabriclab: 127.0.0.1 is not allowed to attach to fabric '{f.name}' (up --allow)\n",
    )
    with fabric_up("lab", tmp_path / "lab2", extra=["--host-listen", "127.0.0.1:0"]) as f:
        _, tcp = _envs(f, "sched-worker1", tmp_path)
        wrong = tmp_path / "wrong"
        wrong.write_text("0" * 64 + "\n")
        tcp["FABRICLAB_HOST_TOKEN_FILE"] = str(wrong)
        r = _run(["ibstat", "mlx5_0"], tcp, tmp_path)
    assert r.returncode != 0 and "'mlx5_0' IB device can't be found" in r.stderr
    assert [x for x in r.stderr.splitlines() if x.startswith("fabriclab")] == [
        f"fabriclab: wrong token for fabric '{f.name}'"
    ]
