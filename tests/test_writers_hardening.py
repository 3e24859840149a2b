"""The writers (``fabriclab sysfs``, ``fabriclab shims``, the trees the host library
reads) in a directory another user can reach: another uid's directory, entries, planted
symbolic links are refused with one line and their targets left untouched.  The other
uid is nobody (65534), made by util-linux's setpriv; these run as root, as CI does."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest
from fabric_server import fabric_up
from helpers import wait_for

OTHER_UID = 65534
AS_OTHER = ["setpriv", "--reuid", str(OTHER_UID), "--regid", str(OTHER_UID), "--clear-groups"]
TRAY = "sched-worker1"


def as_other(script: str) -> None:
    """Run a shell script as the other uid."""
    r = subprocess.run([*AS_OTHER, "sh", "-c", script], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, f"as uid {OTHER_UID}: {script}: {r.stderr}"


@pytest.fixture(scope="module")
def fabric(tmp_path_factory, real_tools):
    assert os.geteuid() == 0, "these tests plant files as another uid: run them as root"
    assert shutil.which("setpriv"), "setpriv (util-linux) is not installed"
    with fabric_up("lab", tmp_path_factory.mktemp("writers")) as f:
        yield f


@pytest.fixture
def shared():
    """A directory every user may create in, as /tmp is (1777); pytest's own is 0700."""
    d = Path(tempfile.mkdtemp(prefix="fabriclab-writers-", dir="/tmp"))
    d.chmod(0o1777)
    yield d
    shutil.rmtree(d)


@pytest.fixture
def secret(tmp_path):
    """A root-only file and a root-only directory, and what each holds now."""
    f = tmp_path / "secret"
    f.write_text("root's own\n")
    f.chmod(0o600)
    d = tmp_path / "secret-dir"
    d.mkdir(mode=0o700)
    return f, d


def _untouched(f: Path, d: Path) -> None:
    assert f.read_text() == "root's own\n" and stat.S_IMODE(f.stat().st_mode) == 0o600
    assert not f.is_symlink()
    assert list(d.iterdir()) == []


def _refused(r: subprocess.CompletedProcess, where: str, what: str) -> None:
    lines = r.stderr.splitlines()
    assert r.returncode == 2, r.stderr
    assert len(lines) == 1 and lines[0].startswith(f"error: {where}: "), r.stderr
    assert what in lines[0], r.stderr


def _make_dir(d: Path, owner: str) -> None:
    """DIR as another user made it ("theirs"), or root's own that the other uid's group
    may write in ("shared")."""
    if owner == "theirs":
        as_other(f"mkdir {d}")
    else:
        d.mkdir()
        os.chown(d, 0, OTHER_UID)
        d.chmod(0o775)


# (the command, what the other uid plants in DIR: name -> the secret file or directory)
PLANTS = {
    "sysfs-mark-link": ("sysfs", {".fabriclab-sysfs": "file"}),
    "sysfs-class-link": ("sysfs", {".fabriclab-sysfs": None, "class": "dir"}),
    "shims-ibstat-link": ("shims", {"ibstat": "file"}),
}


def _run(fabric, command: str, d: Path) -> subprocess.CompletedProcess:
    if command == "sysfs":
        return fabric.fabriclab("sysfs", "--name", fabric.name, TRAY, str(d), "--once")
    return fabric.fabriclab("shims", "--name", fabric.name, TRAY, str(d))


@pytest.mark.parametrize("owner", ["theirs", "shared"])
@pytest.mark.parametrize("case", list(PLANTS))
def test_a_planted_link_is_refused_and_its_target_untouched(fabric, shared, secret, case, owner):
    command, plants = PLANTS[case]
    f, sd = secret
    d = shared / "dir"
    _make_dir(d, owner)
    script = []
    for name, target in plants.items():
        if target is None:
            script.append(f"echo 'written by fabriclab sysfs' > {d / name}")
        else:
            script.append(f"ln -s {f if target == 'file' else sd} {d / name}")
    as_other(" && ".join(script))
    r = _run(fabric, command, d)
    if owner == "theirs":
        _refused(r, str(d), f"is owned by uid {OTHER_UID}, not by you (uid 0)")
    else:  # the entry named is the first in the directory's order
        assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, r.stderr
        assert f"is owned by uid {OTHER_UID}" in r.stderr and f"into {d}" in r.stderr, r.stderr
        assert any(r.stderr.startswith(f"error: {d / n}: ") for n in plants), r.stderr
    _untouched(f, sd)
    assert sorted(p.name for p in d.iterdir()) == sorted(plants)  # nothing written beside


@pytest.mark.parametrize("command", ["sysfs", "shims"])
def test_a_directory_of_another_uid_is_refused(fabric, shared, command):
    d = shared / "theirs"
    as_other(f"mkdir {d}")
    r = _run(fabric, command, d)
    _refused(r, str(d), f"is owned by uid {OTHER_UID}, not by you (uid 0)")
    assert list(d.iterdir()) == []


@pytest.mark.parametrize("command", ["sysfs", "shims"])
def test_a_link_of_another_uid_as_dir_is_refused(fabric, shared, secret, command):
    f, sd = secret
    d = shared / "link"
    as_other(f"ln -s {sd} {d}")
    r = _run(fabric, command, d)
    _refused(r, str(d), f"is a symbolic link that is owned by uid {OTHER_UID}")
    _untouched(f, sd)


@pytest.mark.parametrize("command", ["sysfs", "shims"])
def test_a_directory_in_another_uids_directory_is_refused(fabric, shared, command):
    """Its owner could rename ours away and put their own in its place."""
    parent = shared / "theirs"
    as_other(f"mkdir -m 777 {parent}")
    d = parent / "mine"
    r = _run(fabric, command, d)
    _refused(r, str(d), f"which is owned by uid {OTHER_UID}")
    assert not d.exists()


@pytest.mark.parametrize("command", ["sysfs", "shims"])
def test_a_directory_anyone_may_write_is_refused(fabric, shared, command):
    """Anyone could add a tool of their own beside the wrappers, or a file to the tree."""
    r = _run(fabric, command, shared)
    _refused(r, str(shared), "is writable by every user (mode 1777)")
    assert list(shared.iterdir()) == []


def test_the_callers_own_directory_is_written(fabric, shared):
    """The docs' own example: a fresh DIR under /tmp, written and written again."""
    d = shared / "sys"
    for _ in range(2):
        r = _run(fabric, "sysfs", d)
        assert r.returncode == 0, r.stderr
    state = (d / "class/infiniband/mlx5_0/ports/1/state").read_text()
    assert re.fullmatch(r"\d: [A-Z_]+\n", state), state
    b = shared / "bin"
    r = _run(fabric, "shims", b)
    assert r.returncode == 0, r.stderr
    assert stat.S_IMODE((b / "sudo").stat().st_mode) == 0o755
    assert (b / "sudo").read_text().startswith("#!/bin/sh\n# written by fabriclab shims\n")


def test_the_host_librarys_tree_follows_no_link(fabric, tmp_path, monkeypatch):
    """The trees the server keeps in the state directory go through the same writer: a
    link put in one between two refreshes is refused (a warning in the log, the server
    answering on), and the next ask writes the tree afresh."""
    from fabriclab.sim.run import tools

    # the tree is asked for through the fabric's host socket, in its state directory
    monkeypatch.setenv("FABRICLAB_STATE_DIR", fabric.env["FABRICLAB_STATE_DIR"])
    target = tmp_path / "target"
    target.mkdir()
    tree = tools.tray_tree(fabric.name, TRAY)
    assert (tree / "class/infiniband/mlx5_0/ports/1/state").is_file()
    shutil.rmtree(tree / "class")
    (tree / "class").symlink_to(target)
    fabric.ok("fault", "down", TRAY, "--name", fabric.name)  # the tray's port states change
    try:
        log = Path(fabric.env["FABRICLAB_STATE_DIR"]) / f"{fabric.name}.log"
        wait_for(
            lambda: f"{tree}/class: is a symbolic link: refusing to follow it" in log.read_text(),
            30,
            lambda: f"the refusal in the server's log; its tail: {log.read_text()[-1500:]}",
        )
        assert list(target.iterdir()) == []
        assert tools.tray_tree(fabric.name, TRAY) == tree
        assert not (tree / "class").is_symlink()
        assert (tree / "class/infiniband/mlx5_0/ports/1/state").read_text() == "1: DOWN\n"
    finally:
        fabric.ok("fault", "up", TRAY, "--name", fabric.name)
