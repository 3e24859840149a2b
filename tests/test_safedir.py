"""In-process, as any uid: the tree writer never follows a symbolic link (its mark, a
directory of the tree, one planted between two refreshes), stops when its directory is
swapped; a file written replaces a link, never its target; the one reader of files a
user names refuses FIFOs and devices before reading."""

from __future__ import annotations

import os
import stat
import threading

import pytest

from fabriclab import inputs
from fabriclab.errors import InputError
from fabriclab.sim.host import sysfs

FILES = {
    "class/infiniband/mlx5_0/ports/1/state": "4: ACTIVE\n",
    "class/infiniband/mlx5_0/ports/1/counters/symbol_error": "0\n",
    "class/infiniband_mad/abi_version": "5\n",
}


@pytest.fixture
def target(tmp_path):
    """A file and a directory no writer may reach, as they are now."""
    f = tmp_path / "target-file"
    f.write_text("keep\n")
    d = tmp_path / "target-dir"
    d.mkdir()
    yield f, d
    assert f.read_text() == "keep\n" and list(d.iterdir()) == []


def test_a_mark_that_is_a_link_is_not_followed(tmp_path, target):
    root = tmp_path / "sys"
    root.mkdir()
    (root / sysfs.MARK).symlink_to(target[0])
    with pytest.raises(InputError, match="not a tree fabriclab wrote"):
        sysfs.Tree(root).claim()


def test_a_class_link_in_an_old_tree_goes_its_target_untouched(tmp_path, target):
    root = tmp_path / "sys"
    sysfs.Tree(root).claim()
    (root / "class").symlink_to(target[1])
    tree = sysfs.Tree(root)
    tree.claim()
    assert not (root / "class").exists()
    assert tree.update(FILES) == 3
    assert (root / "class").is_dir() and not (root / "class").is_symlink()
    assert (root / "class/infiniband/mlx5_0/ports/1/state").read_text() == "4: ACTIVE\n"


def test_a_link_planted_between_refreshes_is_refused(tmp_path, target):
    root = tmp_path / "sys"
    tree = sysfs.Tree(root)
    tree.claim()
    tree.update(FILES)
    ports = root / "class/infiniband/mlx5_0/ports"
    os.rename(ports, tmp_path / "moved")
    ports.symlink_to(target[1])
    with pytest.raises(InputError, match="ports: is a symbolic link: refusing to follow"):
        tree.update({**FILES, "class/infiniband/mlx5_0/ports/1/state": "1: DOWN\n"})


def test_a_swapped_directory_stops_the_writer(tmp_path):
    root = tmp_path / "sys"
    tree = sysfs.Tree(root)
    tree.claim()
    tree.update(FILES)
    os.rename(root, tmp_path / "old")
    root.mkdir()
    with pytest.raises(InputError, match="was replaced since it was written"):
        tree.update({**FILES, "class/infiniband_mad/abi_version": "6\n"})
    assert list(root.iterdir()) == []


def test_a_file_written_replaces_a_link_not_its_target(tmp_path, target):
    d = tmp_path / "bin"
    d.mkdir()
    (d / "ibstat").symlink_to(target[0])
    from fabriclab import safedir

    old = os.umask(0o077)
    try:
        with safedir.open_dir(d) as out:
            out.check_entries()
            out.write("ibstat", b"#!/bin/sh\n", 0o755)
    finally:
        os.umask(old)
    st = os.lstat(d / "ibstat")
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o755
    assert sorted(p.name for p in d.iterdir()) == ["ibstat"]  # nothing left aside


def test_the_caller_may_name_their_own_link_to_a_directory(tmp_path):
    from fabriclab import safedir

    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "via").symlink_to(real)
    with safedir.open_dir(tmp_path / "via") as d:
        d.write("f", b"x\n")
    assert (real / "f").read_text() == "x\n"


def test_a_file_where_the_directory_should_be_is_one_line(tmp_path):
    from fabriclab import safedir

    (tmp_path / "f").write_text("x")
    with pytest.raises(InputError, match="is not a directory"):
        safedir.open_dir(tmp_path / "f")


def _read_within(path: str, seconds: float = 5.0) -> Exception | bytes:
    """read_bytes on another thread, which must end within ``seconds``: a FIFO it blocks
    on is opened for writing, to free it, and the test fails."""
    out: list = []

    def run() -> None:
        try:
            out.append(inputs.read_bytes(path, 1 << 20, "a spec"))
        except Exception as e:
            out.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        if stat.S_ISFIFO(os.stat(path).st_mode):
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        t.join(5)
        pytest.fail(f"reading {path} did not end within {seconds} s")
    return out[0]


def test_the_reader_refuses_what_is_not_a_regular_file(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, what in (
        (str(fifo), "is a FIFO, not a regular file"),
        ("/dev/zero", "is a character device, not a regular file"),
        (str(tmp_path), "is a directory, not a regular file"),
    ):
        got = _read_within(path)
        assert isinstance(got, InputError), got
        assert str(got) == f"{path}: {what}"


def test_the_reader_names_the_bound(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_bytes(b"a" * 3000)
    got = inputs.read_bytes(str(big), 4096, "a spec")
    assert got == b"a" * 3000
    with pytest.raises(
        InputError, match=r"big.yaml: 3000 bytes is too large for a spec \(at most 2048"
    ):
        inputs.read_bytes(str(big), 2048, "a spec")
