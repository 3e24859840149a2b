"""'up --sm' with OpenSM's options: --sm-config (an opensm.conf), --partitions (a
partitions.conf), --routing-engine, --sm-arg; each checked before anything starts, and
with the real OpenSM: the config's routing engine used, --routing-engine winning over
it, an argument passed through, and an OpenSM that exits at once told in one line.
(The partitions from the CLI isolating tenants: tests/test_partitions_real.py.)"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from fabric_server import fabric_up
from helpers import fl, one_error

from fabriclab.errors import InputError
from fabriclab.sim.run import launcher
from fabriclab.sim.run.opensm import OWN_SETTINGS, SmOptions, command_line, config_text

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
CONF = str(EXAMPLES / "opensm.conf")
PARTITIONS = str(EXAMPLES / "two-tenants.conf")


def _up(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/sbin:/usr/bin:/bin", "FABRICLAB_STATE_DIR": str(tmp_path / "state")}
    return fl("up", "lab", "--name", "opt", "--detach", *args, env=env, cwd=tmp_path)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--partitions", PARTITIONS], ["error: --partitions: OpenSM's options need --sm"]),
        (["--sm", "--sm-config", "nope.conf"], ["--sm-config nope.conf: cannot read"]),
        (["--sm", "--partitions", "/"], ["--partitions /: ", "directory"]),
        (["--sm", "--sm-config", "/bin/sh"], ["--sm-config /bin/sh: a binary file"]),
        (["--sm", "--routing-engine", "fattree"], ["--routing-engine: 'fattree': not one"]),
        (["--sm", "--routing-engine", "ftree,nope"], ["--routing-engine: 'nope'"]),
        (["--sm", "--sm-arg=-F", "--sm-arg=x.conf"], ["--sm-arg: '-F'", "--sm-config FILE"]),
        (["--sm", "--sm-arg=-Px"], ["--sm-arg: '-Px'", "--partitions FILE"]),
        (["--sm", "--sm-arg=--routing_engine=ftree"], ["--routing-engine NAME"]),
        (["--sm", "--sm-arg=-log_file"], ["--sm-arg: '-log_file'", "log"]),
        (["--sm", "--sm-arg=-B"], ["daemon"]),
    ],
)
def test_a_bad_opensm_option_is_one_error_before_anything_starts(tmp_path, args, words):
    r = _up(tmp_path, *args)
    one_error(r, *words)
    assert not (tmp_path / "state" / "opt.json").exists()  # no server was started


def test_options_reach_the_detached_server_with_absolute_paths(tmp_path, monkeypatch):
    """--detach runs 'up' again in the background: the options go with it, the files'
    paths absolute."""
    monkeypatch.chdir(EXAMPLES)
    opts = SmOptions("opensm.conf", "two-tenants.conf", "ftree,updn", ("-p", "7", "--console=off"))
    req = launcher.UpRequest("lab", sm=True, sm_options=opts.checked(True))
    argv = req.foreground_argv()
    tail = argv[argv.index("--sm-via") + 2 :]
    assert tail[:6] == [
        "--sm-config",
        CONF,
        "--partitions",
        PARTITIONS,
        "--routing-engine",
        "ftree,updn",
    ]
    assert tail[6:9] == ["--sm-arg=-p", "--sm-arg=7", "--sm-arg=--console=off"]


def test_the_users_config_comes_first_and_fabriclabs_settings_win(tmp_path):
    user = tmp_path / "my.conf"
    user.write_text(
        "routing_engine updn\nforce_log_flush FALSE\npartition_config_file parts.conf\n"
        "qos_policy_file /etc/opensm/qos.conf\n# node_name_map_name x\n"
    )
    text = config_text(SmOptions(str(user)).checked(True), "/home/me")
    lines = text.splitlines()
    assert lines.index("routing_engine updn") < lines.index("force_log_flush FALSE")
    assert lines[-len(OWN_SETTINGS) :] == list(OWN_SETTINGS)  # last: OpenSM takes the last
    assert "partition_config_file /home/me/parts.conf" in lines  # as from where 'up' ran
    assert "qos_policy_file /etc/opensm/qos.conf" in lines and "# node_name_map_name x" in lines
    argv = command_line("opensm", tmp_path, SmOptions(None, "/p.conf", "ftree", ("-p", "7")))
    assert argv == [
        "opensm",
        "-F",
        f"{tmp_path}/opensm.conf",
        "-f",
        f"{tmp_path}/opensm.log",
        "-e",
        "-P",
        "/p.conf",
        "-R",
        "ftree",
        "-p",
        "7",
    ]


def test_sm_options_given_to_the_python_api_are_checked_too():
    with pytest.raises(InputError, match="need --sm"):
        SmOptions(routing_engine="ftree").checked(False)


def _engine(log: str) -> str:
    m = re.search(r"osm_ucast_mgr_process: (\S+) tables configured on all switches", log)
    assert m, log[-3000:]
    return m.group(1)


@pytest.mark.realtools
def test_the_configs_routing_engine_is_the_one_opensm_uses(real_tools, tmp_path):
    with fabric_up("lab", tmp_path, sm=True, extra=["--sm-config", CONF]) as f:
        assert _engine(f.opensm_log()) == "updn"
        conf = Path(f.env["FABRICLAB_STATE_DIR"]) / f"{f.name}.opensm" / "opensm.conf"
        assert "routing_engine updn" in conf.read_text()


@pytest.mark.realtools
def test_routing_engine_wins_over_the_config(real_tools, tmp_path):
    """On a fat tree (gb200-su) OpenSM's ftree routes: the option wins over the
    config's updn."""
    extra = ["--sm-config", CONF, "--routing-engine", "ftree"]
    with fabric_up("gb200-su", tmp_path, sm=True, extra=extra) as f:
        assert _engine(f.opensm_log()) == "ftree"


@pytest.mark.realtools
def test_an_sm_arg_is_passed_through(real_tools, tmp_path):
    """--sm-arg=-p --sm-arg=9: OpenSM runs at priority 9, as the real sminfo reads it
    from the SM's SMInfo."""
    with fabric_up("lab", tmp_path, sm=True, extra=["--sm-arg=-p", "--sm-arg=9"]) as f:
        out = f.run("sched-worker2", "sminfo").stdout
        assert re.search(r"\bpriority 9\b", out), out


@pytest.mark.realtools
def test_an_opensm_that_exits_at_once_is_one_error(real_tools, tmp_path):
    """OpenSM refuses an argument: 'up' says what it said, at once (not after waiting
    for a SUBNET UP that never comes)."""
    r = _up(tmp_path, "--sm", "--sm-arg=-p", "--sm-arg=99")  # fl's timeout: 120 s, not 600
    try:
        # up's phases (timestamped lines: building, serving, OpenSM sweeping) aside
        lines = [ln for ln in r.stderr.strip().splitlines() if not re.match(r"\d\d:\d\d:", ln)]
        assert r.returncode == 2 and len(lines) == 2, r.stderr  # "fabric 'opt' up", the error
        assert lines[1].startswith(
            "error: --sm: OpenSM exited before the subnet was up: "
            "ERROR: priority must be between 0 and 15 (see "
        ), r.stderr
    finally:
        fl("down", "--name", "opt", env={"FABRICLAB_STATE_DIR": str(tmp_path / "state")})
