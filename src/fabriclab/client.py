"""fabriclab's Python client: a running fabric driven from Python, as the ``fabriclab``
command drives it.

A :class:`Fabric` is a fabric that is up (``fabriclab up``, or :meth:`Fabric.up`), reached
by its name through its admin socket (the JSON lines of ``docs/protocol.md``), its
event log and its records in the state directory (``$FABRICLAB_STATE_DIR``, as the
command finds it)::

    from fabriclab.client import Fabric

    fabric = Fabric.up("lab", name="lab", sm=True, virtual_clock=True)
    try:
        fault = fabric.fault("down", "LAB-IBLEAF-01[5]")
        [event] = fabric.events()  # 9001 Link went down
        fabric.clear(fault["id"])
        print(fabric.exec("sched-worker1", ["ibstat"]).stdout)
    finally:
        fabric.down()

Every error is one of :mod:`fabriclab.errors`' family (:class:`~fabriclab.errors.FabriclabError`,
each problem ``where: what``); a fabric that goes away while it is used raises
:class:`FabricGone`.  ``fabriclab.pytest_plugin`` gives a test a fabric of its own.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from . import eventlog
from .errors import FabriclabError, InputError, Problem, SpecError
from .inputs import read_text
from .model.cluster import Cluster
from .sim.run import admin, apirecord, records, tools
from .sim.run.records import Instance, NotRunning
from .statedir import state_dir

__all__ = ["CommandFailed", "Fabric", "FabricGone", "NoEvent"]

REQUEST_TIMEOUT = 600.0  # seconds a request may take (a long advance, a big scenario)
UP_TIMEOUT = 900.0  # seconds ``up`` may take (the launcher waits up to 600 s for OpenSM)
POLL = 0.1  # seconds between looks at the event log while following it


class FabricGone(NotRunning):
    """The fabric stopped while this client was using it."""


class CommandFailed(FabriclabError):
    """A ``fabriclab`` command the client ran (``up``, ``down``) failed: its error lines."""


class NoEvent(FabriclabError):
    """No event like the one waited for came in time."""


class Fabric:
    """A running fabric, by name.  Get one with :meth:`connect` (a fabric that is up) or
    :meth:`up` (bring one up); :meth:`down` stops it.  As a context manager, a fabric
    this client brought up is taken down at the end of the block."""

    def __init__(self, name: str, *, timeout: float = REQUEST_TIMEOUT, owned: bool = False):
        self.name = name
        self.timeout = timeout
        self.owned = owned  # brought up by this client: the context manager takes it down
        self._cluster: tuple[tuple[str, int | None], Cluster] | None = None

    def __repr__(self) -> str:
        return f"Fabric({self.name!r})"

    def __enter__(self) -> Fabric:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.owned:
            self.down(missing_ok=True)

    # --- finding and running fabrics ------------------------------------------------

    @classmethod
    def connect(cls, name: str | None = None, *, timeout: float = REQUEST_TIMEOUT) -> Fabric:
        """The running fabric ``name``; with None, 'sim' if it is up, else the only
        fabric that is up (an error lists them when there are several, or says there is
        none), as the commands choose without ``--name``."""
        name = records.choose(name)
        Instance.load(name)  # NotRunning when it is not up
        return cls(name, timeout=timeout)

    @classmethod
    def up(
        cls,
        spec: str | os.PathLike[str],
        *,
        name: str = "sim",
        sm: bool = True,
        virtual_clock: bool = False,
        timeout: float = UP_TIMEOUT,
        **options: Any,
    ) -> Fabric:
        """Bring up fabric ``name`` of ``spec`` (a preset or a spec file), as
        ``fabriclab up SPEC --detach`` does, and connect to it; with ``sm``, back once
        OpenSM has brought the subnet up.  ``options`` are the command's other options by
        their Python names (``trays=4``, ``cold=True``, ``swap=["A,B"]``, ``verbose=2``):
        True is the flag, a list repeats it."""
        argv = ["up", os.fspath(spec), "--detach", "--name", name]
        argv += ["--sm"] if sm else []
        argv += ["--virtual-clock"] if virtual_clock else []
        for key, value in options.items():
            flag = "--" + key.replace("_", "-")
            if value is None or value is False:
                continue
            if key == "verbose":  # a count: verbose=2 is -vv
                argv += [f"-{'v' * int(value)}"] if value else []
            elif value is True:
                argv.append(flag)
            elif isinstance(value, list | tuple):
                argv += [a for v in value for a in (flag, str(v))]
            else:
                argv += [flag, str(value)]
        _command(argv, timeout)
        return cls(name, owned=True)

    def down(self, *, missing_ok: bool = False) -> None:
        """Stop the fabric and its OpenSM (``fabriclab down``); ``missing_ok``: a fabric
        that is not up is no error."""
        try:
            self._instance()
        except FabricGone:
            if missing_ok:
                return
            raise
        _command(["down", "--name", self.name], UP_TIMEOUT)

    @property
    def pid(self) -> int:
        """The fabric server's process id."""
        return self._instance().pid

    @property
    def api_url(self) -> str | None:
        """Where the fabric's API listens (``up --api``, ``fabriclab api``): its URL, or
        None when none runs."""
        doc = apirecord.load(self.name)
        return doc["url"] if doc else None

    @property
    def spec(self) -> str:
        """The spec the fabric serves (a preset name or a file), as ``up`` was given it."""
        return self._instance().spec

    # --- the admin socket -----------------------------------------------------------

    def request(self, op: str, **fields: Any) -> Any:
        """The result of one admin request ``{"op": op, **fields}`` (docs/protocol.md);
        the error it is answered with as an InputError."""
        path = admin.admin_path(state_dir(), self.name)
        try:
            return admin.call(path, {"op": op, **fields}, self.timeout)
        except InputError as e:
            if e.problems and e.problems[0].where == str(path):  # the socket, not the request
                self._instance()  # FabricGone when the fabric stopped
            raise

    def fault(self, kind: str, target: str, **options: Any) -> dict[str, Any]:
        """Inject a fault (``down``, ``flap``, ``degrade``, ``errors``, ``drop``,
        ``nvlink``; ``up`` clears what holds ``target`` down) with the options of
        ``fabriclab fault KIND`` (``period=2, count=5``, ``width="2x"``, ``ber=1e-10``,
        ``rate=50``, ``gpus="0,1"``); the fault (``id``, ``kind``, ``target``,
        ``options``, ``since``, ``progress``), or ``{"cleared": [ids]}`` for ``up``."""
        opts = {k: v for k, v in options.items() if v is not None}
        result: dict[str, Any] = self.request("fault", kind=kind, target=target, options=opts)
        return result

    def faults(self) -> list[dict[str, Any]]:
        """The faults in force, as :meth:`fault` returns each."""
        result: list[dict[str, Any]] = self.request("faults")
        return result

    def clear(self, id: int | None = None) -> list[int]:
        """Clear fault ``id``, or every fault; the ids cleared."""
        result: list[int] = self.request("clear", id=id)
        return result

    def traffic(self, verb: str, *args: str, **options: Any) -> dict[str, Any]:
        """Start flows: ``traffic("send", FROM, TO, ...)``, ``traffic("all-to-all",
        SET, ...)`` or ``traffic("ring", SET, ...)``, of ``bytes`` (``4096``, ``"64Mi"``)
        or at a ``rate`` (``"100Gb/s"``), with their queue pairs' ``timeout`` (0-31) and
        ``retry_count`` (0-7) (NCCL's 20 and 7 by default); ``{"verb", "ids",
        "count"}``."""
        opts = {k: v for k, v in options.items() if v is not None}
        result: dict[str, Any] = self.request("traffic", verb=verb, args=list(args), options=opts)
        return result

    def flows(self, limit: int | None = None, **pick: Any) -> list[dict[str, Any]]:
        """The flows (every one, or the first ``limit``), picked by ``state``
        (``"retrying"``; several comma-separated), ``src`` and ``dst`` (a tray or
        ``HOST/HCA``) and ``id``: each ``id``, ``from``, ``to``, ``state``, ``rate``,
        ``sent``, ``delivered``, ``size``, ``limit``, ``dropped``, ``reason``,
        ``timeout``, ``retry_count``."""
        return list(self._listing(limit, **pick)["flows"])

    def flow_summary(self, **pick: Any) -> dict[str, Any]:
        """The flows (picked as :meth:`flows` picks them) summed: ``flows``, ``states``
        (how many in each), ``sent``, ``delivered``, ``rate``."""
        return dict(self._listing(0, **pick)["summary"])

    def _listing(self, limit: int | None, **pick: Any) -> dict[str, Any]:
        names = {"src": "from", "dst": "to"}  # the rest as the request names them
        opts = {names.get(k, k): v for k, v in pick.items() if v is not None}
        opts.update({"limit": limit} if limit is not None else {})
        result: dict[str, Any] = self.request("traffic", verb="list", args=[], options=opts)
        return result

    def stop(self, id: int | None = None) -> dict[str, Any]:
        """Stop flow ``id``, or every running or retrying flow; ``{"verb", "ids",
        "count"}``: the flows it stopped (none for a flow that had already ended)."""
        args = [] if id is None else [str(id)]
        result: dict[str, Any] = self.request("traffic", verb="stop", args=args)
        return result

    def clock(self) -> dict[str, Any]:
        """The fabric's clock: ``{"now": seconds, "virtual": bool}``."""
        result: dict[str, Any] = self.request("clock")
        return result

    def advance(self, seconds: float) -> float:
        """Move a virtual clock on by ``seconds`` (every flap, step, error and byte due
        on the way carried out); the new time."""
        return float(self.request("advance", seconds=seconds)["now"])

    def scenario(self, path_or_text: str | os.PathLike[str]) -> dict[str, Any]:
        """Run a scenario: a file (a path: a ``Path``, or a string of one line) or its
        YAML text (a string of several lines); ``{"name", "steps", "start", "end",
        "virtual"}``.  The whole scenario is checked before any step runs."""
        if isinstance(path_or_text, str) and "\n" in path_or_text:
            text, source = path_or_text, "scenario"
        else:
            source = os.fspath(path_or_text)
            text = read_text(source, admin.LINE_MAX // 2, "a scenario")
        result: dict[str, Any] = self.request("scenario", text=text, source=source)
        return result

    def scenarios(self) -> list[dict[str, Any]]:
        """The scenarios still running: ``name``, ``start``, ``done`` (steps run),
        ``steps``."""
        result: list[dict[str, Any]] = self.request("scenarios")
        return result

    def nvidia_smi(self, tray: str, *args: str) -> str:
        """What ``nvidia-smi ARGS`` prints on ``tray`` now (NVLink faults and all)."""
        return str(self.request("nvidia-smi", tray=tray, args=list(args))["text"])

    def tray(self, host: str) -> dict[str, Any]:
        """Tray ``host``'s HCAs and their ports now, as its ``/sys/class/infiniband``
        shows them."""
        result: dict[str, Any] = self.request("tray", host=host)
        return result

    def locate(self, name: str) -> dict[str, Any]:
        """What ``fabriclab locate NAME --name`` shows: the nodes ``name`` names (a tray,
        HOST/HCA, switch, description, GUID, NODE[PORT] or LID), each with its GUIDs and
        the LIDs its SM has given now, and each port's far end."""
        result: dict[str, Any] = self.request("locate", name=name)
        return result

    def topology_inputs(self, from_tray: str | None = None) -> dict[str, str]:
        """What ``fabriclab topology --name`` reads now: ``ibnetdiscover`` (from
        ``from_tray``, default the first tray with a link up) and ``nvidia_smi``."""
        result: dict[str, str] = self.request("topology-inputs", **{"from": from_tray})
        return result

    def stats(self) -> dict[str, Any]:
        """What the server has counted: MADs, answers, forwards, timeouts, ..., and the
        MADs by management class and method (``classes``)."""
        result: dict[str, Any] = self.request("stats")
        return result

    # --- the event log --------------------------------------------------------------

    @property
    def events_path(self) -> Path:
        """The fabric's event log (one JSON object a line; rotated files beside it)."""
        return eventlog.events_path(state_dir(), self.name)

    def events(self, since: int = 0) -> list[dict[str, Any]]:
        """The events logged so far with an ``id`` above ``since``, oldest first (UFM's
        fields, and ``sim_time``: see docs/live.md); the log is read a line at a time."""
        self._instance()
        return [e for e in eventlog.stream(self.events_path) if _event_id(e) > since]

    def follow(self, since: int = 0) -> Iterator[dict[str, Any]]:
        """Each event with an ``id`` above ``since``, those logged already and then each
        as it is logged (through the log's rotations); it ends only by the caller
        stopping, or with FabricGone when the fabric stops."""
        for e in eventlog.stream(self.events_path):
            if _event_id(e) > since:
                since = _event_id(e)
                yield e
        yield from eventlog.follow(self.events_path, since, POLL, idle=self._instance)

    def wait_event(self, timeout: float = 30.0, since: int = 0, **fields: Any) -> dict[str, Any]:
        """The first event above ``since`` whose fields are ``fields`` (compared as
        text: ``event_type=9001``, ``name="Link went down"``), waiting up to
        ``timeout`` seconds for it (NoEvent then)."""
        deadline = time.monotonic() + timeout
        while True:
            for e in self.events(since):
                since = _event_id(e)
                if all(str(e.get(k)) == str(v) for k, v in fields.items()):
                    return e
            if time.monotonic() > deadline:
                want = " ".join(f"{k}={v}" for k, v in fields.items()) or "any"
                raise NoEvent([Problem(self.name, f"no event {want} within {timeout:g} s")])
            time.sleep(POLL)

    # --- real tools on a tray -------------------------------------------------------

    def exec(
        self,
        tray: str,
        argv: Sequence[str],
        *,
        via: str = "auto",
        input: str | None = None,
        timeout: float | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run the real tool ``argv`` as if on ``tray`` (or a HOST:HCA, CA or switch),
        attached as ``fabriclab exec`` attaches it (``via``: auto, hostlib or
        umad2sim); its exit status and output (as text).  ``nvidia-smi`` is answered by
        the fabric."""
        argv = [str(a) for a in argv]
        if not argv:
            raise InputError([Problem("exec", "no command given")])
        if argv[0] == "nvidia-smi":
            out = self.nvidia_smi(tray, *argv[1:])
            return subprocess.CompletedProcess(argv, 0, out, "")
        inst = self._instance()
        tools.check_serving(inst)
        way, env = tools.attach_env(inst, self._cluster_of(inst), tray, via)
        exe = shutil.which(argv[0], path=env.get("PATH", "") + ":/usr/sbin:/sbin")
        if exe is None:
            raise InputError([Problem(argv[0], "command not found")])
        # libumad2sim writes ./sys-<pid> where the tool runs: a directory of its own
        with tempfile.TemporaryDirectory(prefix="fabriclab-exec-") as cwd:
            try:
                return subprocess.run(
                    [exe, *argv[1:]],
                    env=env,
                    cwd=cwd if way == "umad2sim" else None,
                    input=input,
                    capture_output=True,
                    text=True,
                    timeout=timeout,
                )
            except subprocess.TimeoutExpired:
                raise InputError([Problem(argv[0], f"no end in {timeout:g} s")]) from None

    # --- helpers --------------------------------------------------------------------

    def _instance(self) -> Instance:
        """The fabric's record while it is up; FabricGone once it is not."""
        try:
            return Instance.load(self.name)
        except NotRunning:
            raise FabricGone(
                [Problem(self.name, f"fabric {self.name!r} is no longer up")]
            ) from None

    def _cluster_of(self, inst: Instance) -> Cluster:
        """The cluster the fabric serves (built once per spec)."""
        key = (inst.spec, inst.trays)
        if self._cluster is None or self._cluster[0] != key:
            from .model.build import build
            from .spec.load import load_spec, locate

            s = load_spec(inst.spec, trays=inst.trays)
            try:
                self._cluster = (key, build(s))
            except SpecError as e:
                raise locate(s, e) from None
        return self._cluster[1]


def _command(argv: list[str], timeout: float) -> None:
    """Run ``fabriclab ARGV`` with this interpreter; its ``error:`` lines as
    CommandFailed."""
    cmd = [*tools.python_argv(), *argv]
    try:
        r = subprocess.run(
            cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        raise CommandFailed([Problem(f"fabriclab {argv[0]}", f"no end in {timeout:g} s")]) from None
    if r.returncode == 0:
        return
    problems = []
    for line in r.stderr.splitlines():
        if line.startswith("error: "):
            where, sep, what = line[len("error: ") :].partition(": ")
            problems.append(Problem(where, what) if sep else Problem("", where))
    if not problems:
        tail = r.stderr.strip().splitlines()[-1:] or [f"exit status {r.returncode}"]
        problems = [Problem(f"fabriclab {argv[0]}", tail[0])]
    raise CommandFailed(problems)


def _event_id(e: dict[str, Any]) -> int:
    i = e.get("id")
    return i if isinstance(i, int) else 0
