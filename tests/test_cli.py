"""The CLI contract: command names, exit codes, one-line errors, the seed's listing."""

from __future__ import annotations

import os
import subprocess
import sys
from functools import partial
from importlib.metadata import version
from pathlib import Path

import helpers
import pytest
import yaml
from conftest import FIXTURES

from fabriclab import __version__

ENV = {**os.environ, "SOURCE_DATE_EPOCH": "1733000000", "COLUMNS": "160"}
fl = partial(helpers.fl, env=ENV)  # a fixed date, and help as wide as 160 columns


# The seed's listing (ai-lab part 7), every line it shows, tabs as the tool prints them.
SEED_LINES = [
    'Switch\t65 "S-2c5eab0306555424"\t\t# "MF0;LAB-IBSPINE-01:MQM9701/U1" enhanced port 0 lid 1 lmc 0',
    '[1]\t"S-2c5eab036832a42e"[9]\t\t# "MF0;LAB-IBLEAF-01:MQM9701/U1" lid 2 4xNDR',
    'Switch\t65 "S-2c5eab036832a42e"\t\t# "MF0;LAB-IBLEAF-01:MQM9701/U1" enhanced port 0 lid 2 lmc 0',
    '[1]\t"H-e09d7303b4f1abf5"[1](e09d7303b4f1abf5) \t\t# "sched-worker1 mlx5_0" lid 100 4xNDR',
    '[2]\t"H-e09d7303e640df18"[1](e09d7303e640df18) \t\t# "sched-worker1 mlx5_1" lid 101 4xNDR',
    '[8]\t"H-e09d730383c7a290"[1](e09d730383c7a290) \t\t# "sched-worker2 mlx5_3" lid 107 4xNDR',
    '[9]\t"S-2c5eab0306555424"[1]\t\t# "MF0;LAB-IBSPINE-01:MQM9701/U1" lid 1 4xNDR',
]


def test_render_lab_reproduces_the_seed_listing():
    r = fl("render", "lab", "ibnetdiscover")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    # the seed shows these in this order, with "…" for lines it leaves out
    pos = [lines.index(s) for s in SEED_LINES]
    assert pos == sorted(pos)
    assert lines[1].startswith("# Topology file: generated on ")
    assert lines[3] == "# Initiated from node e09d7303b4f1abf5 port e09d7303b4f1abf5"
    # spine before leaf, as libibnetdisc lists switches (last discovered first)
    assert lines.index(SEED_LINES[0]) < lines.index(SEED_LINES[2])
    assert sum("mlx5" in line for line in lines) == 16  # the seed lab's grep -c mlx5


def test_render_from_another_tray_changes_origin_and_order():
    a = fl("render", "lab", "ibnetdiscover", "--from", "sched-worker2:mlx5_3").stdout
    b = fl("render", "lab", "ibnetdiscover").stdout
    assert "# Initiated from node e09d730383c7a290 port e09d730383c7a290" in a
    cas_a = [line for line in a.splitlines() if line.startswith("Ca\t")]
    cas_b = [line for line in b.splitlines() if line.startswith("Ca\t")]
    assert sorted(cas_a) == sorted(cas_b) and cas_a != cas_b
    assert cas_a[-1].endswith('"sched-worker2 mlx5_3"')  # the origin is created first


def test_render_formats_and_output_file(tmp_path):
    out = tmp_path / "net"
    r = fl("render", "gb200-su", "ibsim-net", "-o", str(out))
    assert r.returncode == 0 and r.stdout == ""
    text = out.read_text()
    assert text.count("\nSwitch\t65 ") == 41 and text.count("\nCa\t1 ") == 576
    p = fl("render", "lab", "ibnetdiscover-ports").stdout.splitlines()
    assert len(p) == 65 + 65 + 8  # every switch port, every HCA port
    assert p[0].startswith("SW     1 65 0x2c5eab0306555424 4x SDR")
    m = fl("render", "lab", "ibnetdiscover", "-m").stdout
    assert "# Reported max hops discovered: 3\n# Total MADs used: " in m


def test_version_is_the_package_version():
    r = fl("--version")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert r.stdout == f"fabriclab {version('fabriclab')}\n" == f"fabriclab {__version__}\n"


def test_shell_completion_is_installable_and_completes(tmp_path):
    """typer's completion: --show-completion prints the script, --install-completion
    writes it under HOME, and the script's request completes commands and subcommands."""
    exe = [str(Path(sys.executable).parent / "fabriclab")]
    env = {**ENV, "HOME": str(tmp_path), "SHELL": "/bin/bash"}
    shown = subprocess.run(
        [*exe, "--show-completion", "bash"], env=env, capture_output=True, text=True
    )
    assert shown.returncode == 0, shown.stderr
    assert "complete -o default -F _fabriclab_completion fabriclab" in shown.stdout
    done = subprocess.run(
        [*exe, "--install-completion", "bash"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    script = tmp_path / ".bash_completions" / "fabriclab.sh"
    assert script.read_text().strip() == shown.stdout.strip()
    assert str(script) in (tmp_path / ".bashrc").read_text()

    def complete(words: str) -> list[str]:
        asked = {"_FABRICLAB_COMPLETE": "complete_bash", "COMP_WORDS": words}
        asked["COMP_CWORD"] = str(len(words.split()) - 1)
        r = subprocess.run(exe, env={**env, **asked}, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        return r.stdout.split()

    assert complete("fabriclab fa") == ["fault"]
    assert complete("fabriclab fault cl") == ["clear"]
    assert complete("fabriclab lo") == ["locate"]


def test_presets_lists_the_three():
    r = fl("presets")
    assert r.returncode == 0
    for name in ("lab", "gb200-su", "h100-su"):
        assert name in r.stdout


def test_inspect_shows_tiers_and_domains():
    r = fl("inspect", "gb200-su")
    assert r.returncode == 0, r.stderr
    for text in ("576", "leaf", "spine", "1:1", "nvl72-r08", "4xNDR", "1152"):
        assert text in r.stdout
    big = fl("inspect", "gb200-su", "--trays", "8192")
    assert "core" in big.stdout and "32768" in big.stdout


def test_validate_ok_and_bad(tmp_path):
    assert fl("validate", "lab").returncode == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text("trays:\n  - hosts: n[1-x]\n    colour: red\nfabric: {fat_tree: {rate: ZDR}}\n")
    r = fl("validate", str(bad))
    assert r.returncode == 2
    lines = r.stderr.splitlines()
    assert lines == [
        f"error: {bad}:2: trays[0].hosts: bad hostlist: bad range '1-x' in 'n[1-x]'",
        f"error: {bad}:3: trays[0].colour: unknown key",
        f"error: {bad}:4: fabric.fat_tree.rate: unknown rate 'ZDR' (known: SDR, DDR, QDR, "
        "FDR10, FDR, EDR, HDR, NDR, XDR)",
    ]
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize(
    "args,needle",
    [
        (["validate", "no-such-spec"], "error: no-such-spec: no such file, and not a preset"),
        (
            ["render", "lab", "ibnetdiscover", "--from", "nobody"],
            "error: --from: no tray, CA or node",
        ),
        (
            ["render", "lab", "ibnetdiscover", "--from", "sched-worker1:mlx5_9"],
            "has no HCA 'mlx5_9'",
        ),
        (["render", "lab", "ibnetdiscover", "--from", "LAB-IBLEAF-01"], "is a switch"),
        (["render", "lab", "ibnetdiscover", "-o", "/nonexistent/dir/x"], "cannot write"),
        (["import", "/nonexistent", "-o", "-"], "error: /nonexistent: cannot read"),
        (["validate", "lab", "--trays", "0"], "error: --trays: "),
    ],
)
def test_user_errors_are_one_line_never_a_traceback(args, needle):
    r = fl(*args)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout
    assert r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error: ") and needle in lines[0]


def test_import_real_dump_then_render(tmp_path):
    dump = (
        FIXTURES
        / "real"
        / "gary-minghuili__infiniband-exporter__data__ibdiagnet2__ibdiagnet2.ibnetdiscover"
    )
    spec = tmp_path / "seq.yaml"
    r = fl("import", str(dump), "-o", str(spec))
    assert r.returncode == 0, r.stderr
    assert "32 trays, 9 switches, 263 CAs, 271 links" in r.stderr
    data = yaml.safe_load(spec.read_text())
    assert len(data["trays"]) == 32 and len(data["trays"][0]["hcas"]) == 8
    assert fl("validate", str(spec)).returncode == 0
    text = fl("render", str(spec), "ibnetdiscover", "--from", "is-north-7-compute-9:mlx5_8").stdout
    assert 'Ca\t1 "H-5c25730300c09c60"\t\t# "is-north-7-compute-9 mlx5_8"' in text
    assert '\t\t# "Mellanox Technologies Aggregation Node" lid 26 4xNDR' in text


def test_import_reports_what_it_could_not_read(tmp_path):
    src = tmp_path / "dump.txt"
    src.write_text(
        'Switch\t8 "S-0000000000000001"\t\t# "sw" base port 0 lid 1 lmc 0\n'
        '[1]\t"S-0000000000000002"[1]\t\t# "sw2" lid 2 4xHDR\n'
        "garbage here\n\n"
    )
    r = fl("import", str(src), "-o", str(tmp_path / "out.yaml"))
    assert r.returncode == 1  # written, but something was left out
    assert f"warning: {src}:3: not an ibnetdiscover line: 'garbage here'" in r.stderr
    assert (tmp_path / "out.yaml").exists()


def test_no_traceback_on_garbage_input(tmp_path):
    src = tmp_path / "x"
    src.write_bytes(b"\x00\xff\xfe random")
    r = fl("import", str(src), "-o", "-")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "no nodes found" in r.stderr


def test_render_is_deterministic():
    a = fl("render", "h100-su", "ibnetdiscover").stdout
    b = fl("render", "h100-su", "ibnetdiscover").stdout
    assert a == b and len(a) > 1000


def test_entry_point_installed():
    exe = Path(sys.executable).parent / "fabriclab"
    assert exe.exists()
    r = subprocess.run([str(exe), "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "render" in r.stdout
