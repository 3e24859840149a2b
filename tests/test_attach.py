"""``fabriclab attach``: a directory that makes a shell a tray of a running fabric, with
nothing but that directory: the real ibstat through its env and its bin/, from where it
was written and from a copy elsewhere; over the socket file, and over TCP with the
token (``up --host-listen``); unknown trays and fabrics in one line."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess

import pytest
from fabric_server import fabric_up
from helpers import one_error

pytestmark = pytest.mark.realtools

TRAY = "sched-worker1"


def _bare_env() -> dict[str, str]:
    """A shell that knows nothing of fabriclab: no state directory, no preload."""
    return {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/nonexistent", "LANG": "C"}


def _sh(script: str, env=None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["sh", "-c", script],
        env=env or _bare_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _cas(out: str) -> list[str]:
    return [line.split("'")[1] for line in out.splitlines() if line.startswith("CA '")]


@pytest.fixture(scope="module")
def lab(real_tools, tmp_path_factory):
    with fabric_up("lab", tmp_path_factory.mktemp("attach")) as f:
        yield f


def test_attach_writes_env_bin_and_lib_that_run_the_trays_tools_anywhere(lab, tmp_path):
    d = tmp_path / "tray"
    done = json.loads(lab.ok("attach", "--name", lab.name, TRAY, str(d), "--json"))
    assert done["way"] == "unix" and done["token"] is None and done["tray"] == TRAY
    assert (d / "lib" / "libfabriclab-umad.so").is_file() and not (d / "token").exists()
    assert os.access(d / "bin" / "ibstat", os.X_OK) and "ibnetdiscover" in done["bin"]
    r = _sh(f". {d}/env && ibstat")
    assert r.returncode == 0, r.stderr
    assert _cas(r.stdout) == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    assert "Rate: 400" in r.stdout
    # a copy elsewhere (as a bind mount would be): the wrappers find their own directory,
    # and env follows FABRICLAB_ATTACH_DIR
    moved = tmp_path / "elsewhere"
    shutil.copytree(d, moved, symlinks=True)
    shutil.rmtree(d)
    r = _sh(f"{moved}/bin/ibstat -l")
    assert r.returncode == 0 and r.stdout.split() == [f"mlx5_{i}" for i in range(4)], r.stderr
    r = _sh(f"FABRICLAB_ATTACH_DIR={moved} . {moved}/env && ibstat -l")
    assert r.returncode == 0 and len(r.stdout.split()) == 4, r.stderr
    # linked from elsewhere (ln -s DIR/bin/* /usr/local/sbin/): it finds its directory
    links = tmp_path / "links"
    links.mkdir()
    (links / "ibstat").symlink_to(moved / "bin" / "ibstat")
    r = _sh(f"{links}/ibstat -l")
    assert r.returncode == 0 and len(r.stdout.split()) == 4, r.stderr
    # a tool this machine lacks: one line, exit 127 (never itself, looping)
    (moved / "bin" / "no-such-tool").write_text(
        (moved / "bin" / "ibstat").read_text().replace("ibstat", "no-such-tool")
    )
    (moved / "bin" / "no-such-tool").chmod(0o755)
    r = _sh(f"{moved}/bin/no-such-tool")
    assert r.returncode == 127 and r.stderr.startswith("fabriclab: no-such-tool: not installed")


def test_over_tcp_env_carries_the_address_and_a_0600_token(real_tools, tmp_path):
    with fabric_up("lab", tmp_path / "f", extra=["--host-listen", "127.0.0.1:0"]) as f:
        inst = f.instance()
        assert inst.host_listen and inst.host_listen[1] > 0
        d = tmp_path / "tray"
        done = json.loads(f.ok("attach", "--name", f.name, TRAY, str(d), "--json"))
        assert done["way"] == "tcp" and done["address"] == f"127.0.0.1:{inst.host_listen[1]}"
        assert stat.S_IMODE((d / "token").stat().st_mode) == 0o600
        token = (d / "token").read_text().strip()
        assert len(token) == 64 and token == open(inst.host_token).read().strip()
        env = (d / "env").read_text()
        assert f"FABRICLAB_HOST_ADDR=127.0.0.1:{inst.host_listen[1]}" in env
        assert 'FABRICLAB_HOST_TOKEN_FILE="$FABRICLAB_ATTACH_DIR/token"' in env
        assert token not in env and token not in f.ok("status")
        assert f"TCP 127.0.0.1:{inst.host_listen[1]}" in f.ok("status")
        log = (tmp_path / "f" / "state" / f"{f.name}.log").read_text()
        assert token not in log


def test_an_unknown_tray_or_fabric_is_one_line(lab, tmp_path):
    one_error(
        lab.fabriclab("attach", "--name", lab.name, "sched-wrker1", str(tmp_path / "x")),
        "sched-wrker1: no such tray in this fabric",
        "sched-worker1",
    )
    one_error(
        lab.fabriclab("attach", "--name", "nosuch", TRAY, str(tmp_path / "x")),
        "no fabric named 'nosuch' is up",
    )
    assert not (tmp_path / "x").exists()
