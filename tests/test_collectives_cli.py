"""'fabriclab collective' and 'fabriclab nccl-tests' on specs, as scripts use them: the
JSON contract, nccl-tests' table read back by the patterns public parsers use, the
launcher's environment, NCCL_* variables, and one-line errors."""

from __future__ import annotations

import json
import os
import re

import pytest
from helpers import fl
from nccl_parsers import read_like_public_parsers

from fabriclab.formats import nccl_tests as nt

GB200 = ("gb200-su", "--nodes", "gb-r0[1-2]-t01")


def _env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("NCCL_", "SLURM_", "OMPI_", "PMI_"))
    }
    env.update(extra)
    return env


def test_collective_json_has_the_contracts_keys():
    r = fl("collective", *GB200, "--op", "all-reduce", "--size", "1G", "--json", env=_env())
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    for key in ("time_s", "algbw_GBps", "busbw_GBps", "algorithm", "protocol", "links"):
        assert key in d
    assert d["algorithm"] == "Ring" and d["protocol"] == "Simple" and d["ranks"] == 8
    assert d["links"] and all(set(x) >= {"from", "to", "bytes"} for x in d["links"])
    # ring edges out of each tray's 4 HCAs: 16 channels, 2(n-1)/n of 1 GiB in all
    hcas = [x for x in d["links"] if x["from"].startswith("gb-r01-t01/")]
    assert len(hcas) == 4
    assert sum(x["bytes"] for x in hcas) == pytest.approx((1 << 30) * 2 * 7 / 8, rel=1e-6)


def test_collective_prints_a_table_that_cuts_nothing():
    r = fl("collective", *GB200, "--op", "all-gather", "--size", "64M", env=_env())
    assert r.returncode == 0, r.stderr
    assert "all-gather of 67108864 B on 8 ranks in 2 NVLink group(s)" in r.stdout
    assert "gb-r01-t01/mlx5_0[1]" in r.stdout and "SU1-IBLEAF-R1-01[1]" in r.stdout


def test_nccl_knobs_from_the_environment_act_on_it():
    def busbw(**env: str) -> float:
        r = fl(
            "collective", *GB200, "--op", "all-reduce", "--size", "8G", "--json", env=_env(**env)
        )
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)["busbw_GBps"]

    assert busbw(NCCL_IB_HCA="=mlx5_0,mlx5_1") == pytest.approx(busbw() / 2, rel=0.01)


def _table(*args: str, env=None) -> str:
    r = fl("nccl-tests", *args, env=env or _env())
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_nccl_tests_table_reads_with_public_parsers():
    text = _table(*GB200, "--", "all_reduce_perf", "-b", "8", "-e", "8G", "-f", "2", "-g", "4")
    rows, avg = read_like_public_parsers(text)
    assert len(rows) == 31  # 8 B to 8 GiB by factors of 2
    ranks = [line for line in text.splitlines() if "Rank" in line and "device" in line]
    assert len(ranks) == 8 and all("NVIDIA GB200" in line for line in ranks)
    assert re.search(r"on\s+([\w\d\-.]+)\s+device\s+(\d+)", ranks[4])[1] == "gb-r02-t01"
    # nccl-tests' mean of every busbw printed, in place and out of place
    parsed = nt.parse_rows(text)
    mean = sum(r.out_of_place.busbw + r.in_place.busbw for r in parsed) / (2 * len(parsed))
    assert avg == pytest.approx(mean, rel=1e-5)
    big = parsed[-1]
    assert big.size == 8 << 30 and big.out_of_place.busbw > 150  # 4 HCAs per tray


@pytest.mark.parametrize("binary", list(nt.BINARIES))
def test_every_binary_prints_its_table(binary):
    text = _table(*GB200, "--", binary, "-b", "1M", "-e", "4M", "-f", "2", "-g", "4", "-c", "0")
    rows = nt.parse_rows(text)
    assert [r.size for r in rows] == [
        nt.size_and_count(binary, s, 8)[0] for s in (1 << 20, 2 << 20, 4 << 20)
    ]
    assert all(r.out_of_place.wrong is None for r in rows)  # -c 0: N/A
    factor = nt.bus_factor(binary, 8)
    for r in rows:
        assert r.out_of_place.busbw == pytest.approx(
            r.out_of_place.algbw * factor, abs=0.02
        )  # both rounded


def test_the_launchers_environment_sets_the_ranks_and_who_prints():
    env = _env(SLURM_JOB_NODELIST="gb-r0[1-2]-t01", SLURM_NTASKS="8", SLURM_PROCID="0")
    text = _table("gb200-su", "--", "all_reduce_perf", "-b", "1M", "-e", "1M", env=env)
    assert text.startswith(
        "# nThread 1 nGpus 1 minBytes 1048576 maxBytes 1048576 step: 1048576(bytes)"
    )
    pids = {int(m) for m in re.findall(r"Pid +(\d+)", text)}
    assert len(re.findall(r"#  Rank", text)) == 8 and len(pids) == 8  # a process per GPU
    env["SLURM_PROCID"] = "3"
    assert _table("gb200-su", "--", "all_reduce_perf", "-b", "1M", "-e", "1M", env=env) == ""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("collective", *GB200, "--op", "allreduce", "--size", "1G"),
            "error: --op: unknown operation 'allreduce'",
        ),
        (
            ("collective", *GB200, "--op", "all-reduce", "--size", "1T"),
            "error: --size: invalid size '1T'",
        ),
        (
            ("collective", *GB200, "--op", "all-reduce", "--size", "1G", "--algo", "pat"),
            "error: --algo: unknown algorithm 'pat'",
        ),
        (
            ("collective", *GB200, "--op", "all-reduce", "--size", "1G", "--apply"),
            "error: --apply: needs a running fabric",
        ),
        (
            ("nccl-tests", *GB200, "--", "allreduce_perf"),
            "error: nccl-tests: unknown binary 'allreduce_perf'",
        ),
        (
            ("nccl-tests", *GB200, "--", "all_reduce_perf", "-x", "1"),
            "error: all_reduce_perf: unknown option or argument '-x'",
        ),
        (
            ("nccl-tests", *GB200, "--", "all_reduce_perf", "-d", "float7"),
            "error: all_reduce_perf -d: unknown value 'float7'",
        ),
        (("nccl-tests", "gb200-su", "--", "all_reduce_perf"), "error: --nodes: no nodes"),
    ],
)
def test_bad_input_is_one_line(args, message):
    r = fl(*args, env=_env())
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.startswith(message), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    env = _env(NCCL_ALGO="Ring,Pat7")
    r = fl("collective", *GB200, "--op", "all-reduce", "--size", "1G", env=env)
    assert r.returncode == 2 and r.stderr.startswith("error: NCCL_ALGO: unknown name 'Pat7'")
