"""The real OpenSM beside a fabric (``up --sm``): its options (an opensm.conf, a
partitions.conf, a routing engine, arguments passed through) checked before it starts,
its command line and config file, starting it, and whether it has brought the subnet up.

OpenSM reads ``-F FILE`` and then its command line, a later setting winning.  fabriclab
writes ``<state dir>/<name>.opensm/opensm.conf``: the user's ``--sm-config`` copied as
it is (a relative path in it made absolute from where ``up`` ran), then fabriclab's own
settings, last so that they win (the log flushed line by line, where ``up`` looks for
SUBNET UP; no daemon, so ``down`` stops it).  The command line then gives the log file
(``-f``, a fresh one: ``-e``), ``-P`` (``--partitions``), ``-R`` (``--routing-engine``),
and the ``--sm-arg`` arguments last.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import InputError, Problem
from ...inputs import read_bytes
from ...model.cluster import Cluster
from ...statedir import state_dir
from .records import Instance, signal_recorded
from .tools import attach_env

SM_GRACE = 3.0  # seconds OpenSM has to leave after SIGTERM before it is killed
CONF_MAX = 1 << 20  # bytes of an opensm.conf or partitions.conf
# OpenSM's routing engines (opensm -h, 3.3.23 and 3.3.24), and the words its -R list takes
ROUTING_ENGINES = (
    "minhop",
    "updn",
    "dnup",
    "file",
    "ftree",
    "lash",
    "dor",
    "torus-2QoS",
    "nue",
    "dfsssp",
    "sssp",
    "no_fallback",
)
# OpenSM's options fabriclab gives itself, or that would take OpenSM from under it, and
# why (what to give instead)
_CONFIG = "fabriclab gives OpenSM its own config: use --sm-config FILE"
_PARTITIONS = "use --partitions FILE (checked before OpenSM starts)"
_ENGINE = "use --routing-engine NAME (checked before OpenSM starts)"
_LOG = "fabriclab keeps OpenSM's log itself (<state dir>/NAME.opensm/opensm.log)"
_DAEMON = "a daemon would outlive 'fabriclab down'"
_TEMPLATE = "OpenSM would write a config file and exit"
_KEPT = {
    "-F": _CONFIG,
    "--config": _CONFIG,
    "-P": _PARTITIONS,
    "--Pconfig": _PARTITIONS,
    "-R": _ENGINE,
    "--routing_engine": _ENGINE,
    "-f": _LOG,
    "--log_file": _LOG,
    "-B": _DAEMON,
    "--daemon": _DAEMON,
    "-c": _TEMPLATE,
    "--create-config": _TEMPLATE,
}
# what OpenSM prints when it gives up: getopt's "opensm: unrecognized option", its own
# "ERROR: ..." and "Error from osm_opensm_init: ..."
_SAID = re.compile(r"^(?:\S*opensm: |ERROR|Error )")
# what fabriclab's OpenSM needs, written after the user's config so that it wins
OWN_SETTINGS = (
    "force_log_flush TRUE",  # SUBNET UP reaches the log at once, where 'up' waits for it
    "daemon FALSE",  # the process 'up' started is OpenSM, which 'down' stops
)


@dataclass(frozen=True)
class SmOptions:
    """What ``up`` was given for OpenSM: ``--sm-config``, ``--partitions``,
    ``--routing-engine``, ``--sm-arg`` (paths absolute once checked)."""

    config: str | None = None
    partitions: str | None = None
    routing_engine: str | None = None
    args: tuple[str, ...] = field(default_factory=tuple)

    def given(self) -> list[str]:
        """The options given, as their flags."""
        flags = ("--sm-config", "--partitions", "--routing-engine", "--sm-arg")
        values = (self.config, self.partitions, self.routing_engine, self.args)
        return [f for f, v in zip(flags, values, strict=True) if v]

    def argv(self) -> list[str]:
        """These options again, for the ``up`` command line (``--detach`` runs it)."""
        out = ["--sm-config", self.config] if self.config else []
        out += ["--partitions", self.partitions] if self.partitions else []
        out += ["--routing-engine", self.routing_engine] if self.routing_engine else []
        return out + [f"--sm-arg={a}" for a in self.args]

    def checked(self, with_sm: bool) -> SmOptions:
        """These options checked before anything starts (each file a readable text file,
        the engines OpenSM's, no argument fabriclab gives itself), their paths made
        absolute; a one-line error otherwise."""
        if not with_sm and self.given():
            raise InputError([Problem(self.given()[0], "OpenSM's options need --sm (or --sm-at)")])
        for flag, path in (("--sm-config", self.config), ("--partitions", self.partitions)):
            if path is not None:
                read_text(path, flag)
        for name in (self.routing_engine or "").split(","):
            if self.routing_engine is not None and name not in ROUTING_ENGINES:
                raise InputError(
                    [
                        Problem(
                            "--routing-engine",
                            f"{name!r}: not one of OpenSM's ({', '.join(ROUTING_ENGINES)}; "
                            "a list: ftree,updn)",
                        )
                    ]
                )
        for a in self.args:
            why = _kept(a)
            if why:
                raise InputError([Problem("--sm-arg", f"{a!r}: {why}")])
        return SmOptions(
            _absolute(self.config), _absolute(self.partitions), self.routing_engine, self.args
        )


def _kept(arg: str) -> str | None:
    """Why ``arg`` is refused when it is an option fabriclab keeps (OpenSM
    takes long options after one dash too, and a short option's value joined)."""
    if not arg.startswith("-") or arg == "-":
        return None
    if arg.startswith("--"):
        return _KEPT.get(arg.split("=", 1)[0])
    name = arg[1:].split("=", 1)[0]
    if "--" + name in _KEPT:  # -config, -log_file ...
        return _KEPT["--" + name]
    if arg[1] == "c" and len(name) > 1:  # -console, -cn_guid_file ...: long options
        return None
    return _KEPT.get(arg[:2])  # -F, -Ffile


def _absolute(path: str | None) -> str | None:
    return None if path is None else os.path.abspath(path)


def read_text(path: str, flag: str) -> str:
    """The text of a config file a flag names, or a one-line error naming both."""
    try:
        data = read_bytes(path, CONF_MAX, f"an OpenSM file ({flag})", prefix=f"{flag}: ")
    except InputError as e:
        p = e.problems[0]
        raise InputError([Problem(f"{flag} {p.where}", p.what.removeprefix(f"{flag}: "))]) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError([Problem(f"{flag} {path}", "not UTF-8 text")]) from None


def config_text(options: SmOptions, cwd: str) -> str:
    """The opensm.conf fabriclab gives OpenSM: the user's (its relative paths made
    absolute from ``cwd``), then fabriclab's own settings."""
    out = ["# written by fabriclab"]
    if options.config:
        out.append(f"# from {options.config}")
        out += [
            _absolute_paths(line, cwd)
            for line in read_text(options.config, "--sm-config").splitlines()
        ]
    out.append("# fabriclab's own settings, last: they win")
    out += OWN_SETTINGS
    return "\n".join(out) + "\n"


def _absolute_paths(line: str, cwd: str) -> str:
    """A config line, a file or directory it names made absolute from ``cwd`` (OpenSM
    runs in the state directory)."""
    words = line.split(None, 1)
    if len(words) != 2 or line.lstrip().startswith("#"):
        return line
    key, value = words[0], words[1].strip()
    is_path = key.endswith(("_file", "_dir")) or key in ("node_name_map_name", "torus_config")
    if not is_path or value.startswith("/") or value in ("(null)", "NULL", ""):
        return line
    return f"{key} {os.path.join(cwd, value)}"


def command_line(opensm: str, cache: Path, options: SmOptions) -> list[str]:
    """OpenSM's argv: the config fabriclab wrote, its log, then the user's options."""
    argv = [opensm, "-F", str(cache / "opensm.conf"), "-f", str(cache / "opensm.log"), "-e"]
    argv += ["-P", options.partitions] if options.partitions else []
    argv += ["-R", options.routing_engine] if options.routing_engine else []
    return argv + list(options.args)


def start_sm(
    inst: Instance,
    cluster: Cluster,
    where: str,
    log_dir: Path,
    via: str = "auto",
    options: SmOptions | None = None,
) -> subprocess.Popen:
    """Start the real OpenSM attached at ``where`` (``via`` the host library or umad2sim:
    :func:`.tools.attach_env`), logging under ``log_dir``, with ``options``."""
    options = options or SmOptions()
    opensm = shutil.which("opensm") or "/usr/sbin/opensm"
    if not os.path.exists(opensm):
        raise InputError(
            [Problem("--sm", "opensm not found (scripts/install-system-deps.sh installs it)")]
        )
    _way, env = attach_env(inst, cluster, where, via)
    cache = log_dir / f"{inst.name}.opensm"
    if cache.is_symlink():
        cache.unlink()
    shutil.rmtree(cache, ignore_errors=True)  # a fresh SM: no LIDs cached from another fabric
    cache.mkdir(mode=0o700, parents=True, exist_ok=True)
    env["OSM_CACHE_DIR"] = env["OSM_TMP_DIR"] = str(cache)
    (cache / "opensm.conf").write_text(config_text(options, os.getcwd()))
    with open(cache / "opensm.stdout", "ab") as out:
        return subprocess.Popen(
            command_line(opensm, cache, options),
            env=env,
            cwd=cache,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM it if the server dies, however it dies."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class SmLog:
    """OpenSM's state as its log tells it, read on from where it was last read: the last
    state it entered (DISCOVERING, STANDBY, MASTER), then SUBNET UP."""

    def __init__(self, inst: Instance):
        self.path = state_dir() / f"{inst.name}.opensm" / "opensm.log"
        self.offset = 0
        self.state = "starting"

    def poll(self) -> str:
        """The state now (read at most a few MB of new log a call)."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read(_LOG_READ)
        except OSError:
            return self.state
        end = data.rfind(b"\n") + 1
        self.offset += end
        for m in _STATES.finditer(data[:end]):
            self.state = "SUBNET UP" if m.group(0) == b"SUBNET UP" else m.group(1).decode()
        return self.state


_LOG_READ = 4 << 20
# OpenSM's log lines "Entering MASTER state" and "SUBNET UP" (osm_state_mgr.c)
_STATES = re.compile(rb"Entering (\w+) state|SUBNET UP")


def subnet_up(inst: Instance) -> bool:
    """Whether the fabric's OpenSM (``--sm``) has logged SUBNET UP."""
    log = state_dir() / f"{inst.name}.opensm" / "opensm.log"
    try:
        with open(log, "rb") as f:
            return b"SUBNET UP" in f.read()
    except OSError:
        return False


def sm_gone(inst: Instance) -> str | None:
    """Why the fabric's OpenSM is no longer running (what it said, from its output), or
    None while it runs."""
    if not inst.sm_pid or signal_recorded(inst.sm_pid, inst.sm_start, inst.sm_cmdline, 0):
        return None
    out = state_dir() / f"{inst.name}.opensm" / "opensm.stdout"
    try:
        lines = [ln.strip() for ln in out.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        lines = []
    said = [ln for ln in lines if _SAID.match(ln)]
    what = (said or lines[-1:] or ["no output"])[0]
    return f"OpenSM exited before the subnet was up: {what[:300]} (see {out})"


def stop_sm(proc: subprocess.Popen, srv, grace: float = SM_GRACE) -> None:
    """Stop OpenSM (``proc``) promptly: SIGTERM, ``srv`` (the fabric server, its loop
    ended) serving meanwhile (OpenSM sends its last MADs on the way out and waits for
    their answers) until OpenSM has gone, SIGKILL after ``grace`` seconds."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        fd = os.pidfd_open(proc.pid)  # readable once OpenSM has exited (Linux 5.3+)
    except (OSError, AttributeError):
        fd = None
    if fd is not None:
        transport = srv.transport
        deadline = time.monotonic() + grace
        wake = transport.on_wake

        def until_gone() -> float:
            left = deadline - time.monotonic()
            if left <= 0:
                srv.stop()
            return min(wake(), max(left, 0.0))

        transport.on_wake = until_gone
        transport.watch(fd, srv.stop)
        try:
            srv.serve_forever()
        finally:
            transport.unwatch(fd)
            os.close(fd)
            transport.on_wake = wake
    try:
        proc.wait(0 if fd is not None else grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
