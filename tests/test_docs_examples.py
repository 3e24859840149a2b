"""Every runnable example of the docs runs as written (see tests/docs_blocks.py for how a
block is marked).

Each marked block of README.md and docs/*.md runs in a fresh working directory (holding
the page's ``data-file`` blocks, and ``examples/``, the repository's), with ``fabriclab`` from this interpreter's environment
first on PATH and a state directory of its own.  A block that reaches a running fabric
runs, as root, inside a network namespace of its own (fresh abstract socket names, its
own loopback), so it can neither see nor disturb another fabric on the machine; at its
end, failed or not, every fabric it brought up gets ``fabriclab down`` and every
process left in the namespace is killed.  Each command is bounded in time.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from docs_blocks import ROOT, Block, Command, blocks, pages

EXAMPLES = ROOT / "examples"
COMMAND_TIMEOUT = 180.0  # seconds: the slowest example brings up gb200-su under OpenSM
DOWN_TIMEOUT = 60.0


def _runnable() -> list:
    params = []
    for page in pages():
        for b in blocks(page):
            if not b.runnable:
                continue
            marks = [pytest.mark.realtools] if b.uses_real_tools() else []
            params.append(pytest.param(b, id=b.where, marks=marks))
    return params


def _env(state: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["FABRICLAB_STATE_DIR"] = str(state)
    env.pop("FABRICLAB_DEBUG", None)
    return env


def _data_files(block: Block, workdir: Path) -> None:
    """The page's data files written into ``workdir``, and ``examples/`` there: the
    repository's, as a user in its root has it (a data file shown from examples/ is
    that file, not written: see test_shown_examples_are_the_shipped_files)."""
    (workdir / "examples").symlink_to(EXAMPLES, target_is_directory=True)
    for other in blocks(block.path):
        name = other.attrs.get("data-file")
        if name and not name.startswith("examples/"):
            (workdir / name).write_text("\n".join(other.body) + "\n")


class Namespace:
    """A network namespace of its own, held open by a sleeping process."""

    def __init__(self) -> None:
        self.holder = subprocess.Popen(
            [
                "unshare",
                "--net",
                "--",
                "sh",
                "-c",
                "ip link set lo up && echo ready && exec sleep 900",
            ],
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        assert self.holder.stdout is not None
        readable, _, _ = select.select([self.holder.stdout], [], [], 30)
        ready = self.holder.stdout.readline() if readable else b""  # EOF if a step failed
        if ready.strip() != b"ready":
            self.holder.kill()
            self.holder.wait(10)
            pytest.fail("unshare --net, or 'ip link set lo up' in it, failed within 30 s")
        self.link = os.readlink(f"/proc/{self.holder.pid}/ns/net")

    def prefix(self) -> list[str]:
        return ["nsenter", f"--net=/proc/{self.holder.pid}/ns/net", "--"]

    def members(self) -> list[int]:
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == self.holder.pid:
                continue
            try:
                if os.readlink(entry / "ns" / "net") == self.link:
                    pids.append(int(entry.name))
            except OSError:
                continue  # gone, or not ours to read
        return pids

    def close(self) -> None:
        """Kill whatever is left in the namespace (TERM, then KILL), then its holder."""
        for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
            left = self.members()
            for pid in left:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + grace
            while left and time.monotonic() < deadline:
                time.sleep(0.05)
                left = self.members()
            if not left:
                break
        self.holder.kill()
        self.holder.wait(10)
        assert not self.members(), f"processes left in the namespace: {self.members()}"


def _run(argv: list[str], cwd: Path, env: dict[str, str], log: Path, timeout: float) -> int | None:
    """Run ``argv``, its output to ``log``; its exit status, or None when it timed out
    (its whole process group is killed then)."""
    with log.open("wb") as out:
        p = subprocess.Popen(
            argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            return p.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)
            return None


def _failure(block: Block, cmd: Command, got: int | None, log: Path) -> str:
    where = f"{block.path.relative_to(ROOT)}:{cmd.line}"
    what = f"timed out after {COMMAND_TIMEOUT:g} s" if got is None else f"exited {got}"
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
    return f"{where}: `{cmd.text}` {what}, expected {cmd.status}\n--- its output:\n{tail}"


@pytest.mark.parametrize("block", _runnable())
def test_example_runs_as_written(block: Block, tmp_path: Path) -> None:
    cmds = block.commands()
    assert cmds, f"{block.where}: a block marked .run with no command in it"
    workdir, state = tmp_path / "work", tmp_path / "state"
    workdir.mkdir()
    _data_files(block, workdir)
    env = _env(state)
    ns = None
    if block.isolated():
        if os.geteuid() != 0:
            pytest.skip(
                "a running fabric's example runs in a network namespace of its own: root only"
            )
        ns = Namespace()
    prefix = ns.prefix() if ns else []
    failure = None
    try:
        for i, cmd in enumerate(cmds):
            log = tmp_path / f"cmd{i}.log"
            argv = [*prefix, "bash", "-c", f"set -o pipefail\n{cmd.text}"]
            got = _run(argv, workdir, env, log, COMMAND_TIMEOUT)
            if got != cmd.status:
                failure = _failure(block, cmd, got, log)
                break
    finally:
        if ns is not None:
            for name in block.fabric_names():
                down = [*prefix, "fabriclab", "down", "--name", name]
                _run(down, workdir, env, tmp_path / f"down-{name}.log", DOWN_TIMEOUT)
            ns.close()
    if failure:
        pytest.fail(failure, pytrace=False)


def test_the_runnable_examples_are_found() -> None:
    """The marker is recognised: the README's tour and the docs' examples are collected."""
    readme = [b for b in blocks(ROOT / "README.md") if b.runnable]
    assert readme, "README.md: no block marked {.sh .run}: the tour is not run"
    tour = " ".join(c.text for b in readme for c in b.commands())
    for step in ("fabriclab up lab --detach --sm", "fabriclab events", "fabriclab down"):
        assert step in tour, f"README.md: the tour has no `{step}`"
    docs = [b for p in pages()[1:] for b in blocks(p) if b.runnable]
    assert len(docs) >= 10, f"only {len(docs)} runnable blocks in docs/"


def test_every_fence_attribute_is_known() -> None:
    """A misspelt marker (.rnu, data-fle=) is an error, not an example left unrun."""
    problems = [f"{b.where}: {p}" for page in pages() for b in blocks(page) for p in b.problems]
    assert not problems, "\n".join(problems)


def test_shown_examples_are_the_shipped_files() -> None:
    """A block shown as ``data-file="examples/NAME"`` is examples/NAME as shipped, byte
    for byte, and every file in examples/ is shown or run somewhere in the docs."""
    shown, problems = set(), []
    for page in pages():
        for b in blocks(page):
            name = b.attrs.get("data-file", "")
            if not name.startswith("examples/"):
                continue
            shown.add(name)
            path = ROOT / name
            if not path.is_file():
                problems.append(f"{b.where}: {name} is not in the repository")
            elif path.read_text() != "\n".join(b.body) + "\n":
                problems.append(f"{b.where}: differs from {name}")
    text = "\n".join(page.read_text() for page in pages())
    for path in sorted(EXAMPLES.iterdir()):
        name = f"examples/{path.name}"
        if name not in shown and name not in text:
            problems.append(f"{name}: the docs neither show nor use it")
    assert not problems, "\n".join(problems)
