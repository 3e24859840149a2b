"""nccl-tests' output rendered as its binaries print it: a real H100 all_reduce_perf log's
table, header and trailer come out byte for byte from its own figures; the bus
bandwidth factors and the sizes and counts each binary shows; public parsers' patterns
read what is rendered."""

from __future__ import annotations

import re

import pytest
from conftest import FIXTURES
from nccl_parsers import read_like_public_parsers

from fabriclab.formats import nccl_tests as nt

LOG = FIXTURES / "real" / "lessizzmore__create-a3mega-ztan-fork__ztan-NCCL-test-result"


def _real() -> str:
    text = LOG.read_text()
    return text[text.index("# nThread") :]


def _devices(text: str) -> list[nt.Device]:
    pat = re.compile(
        r"#  Rank +(\d+) Group +(\d+) Pid +(\d+) on +(\S+) device +(\d+) "
        r"\[([0-9a-f]{4}):([0-9a-f]{2}):([0-9a-f]{2})\] (.*)"
    )
    out = []
    for m in pat.finditer(text):
        r, g, pid, host, dev, dom, bus, d, name = m.groups()
        out.append(
            nt.Device(
                int(r),
                int(pid),
                host,
                int(dev),
                (int(dom, 16), int(bus, 16), int(d, 16)),
                name,
                int(g),
            )
        )
    return out


def test_a_real_all_reduce_log_renders_byte_for_byte():
    real = _real()
    rows = nt.parse_rows(real)
    assert len(rows) == 31 and rows[-1].size == 8589934592
    header = nt.Header(1, 1, 8, 8589934592, factor=2, warmup=5, iters=20)
    got = nt.render(header, _devices(real), rows, avg_busbw=70.742)
    # the log stops after the bandwidth line (the two closing lines were not pasted)
    assert got == real + "#\n\n"
    # the average of the printed figures is what nccl-tests printed, to its precision
    mean = sum(r.out_of_place.busbw + r.in_place.busbw for r in rows) / (2 * len(rows))
    assert abs(mean - 70.742) < 0.01


@pytest.mark.parametrize(
    "binary, n, factor",
    [
        ("all_reduce_perf", 16, 2 * 15 / 16),
        ("all_gather_perf", 8, 7 / 8),
        ("reduce_scatter_perf", 8, 7 / 8),
        ("alltoall_perf", 4, 3 / 4),
        ("broadcast_perf", 8, 1.0),
        ("reduce_perf", 8, 1.0),
        ("sendrecv_perf", 2, 1.0),
    ],
)
def test_bus_bandwidth_factors(binary, n, factor):
    assert nt.bus_factor(binary, n) == pytest.approx(factor)
    t = nt.timing(binary, 1 << 30, n, 1e4)
    assert t.algbw == pytest.approx((1 << 30) / 1e9 / 1e-2)
    assert t.busbw == pytest.approx(t.algbw * factor)


def test_sizes_and_counts_as_each_binary_shows_them():
    # all_gather, reduce_scatter, alltoall: the per-rank count, a multiple of 16 bytes
    assert nt.size_and_count("all_gather_perf", 8, 8) == (0, 0)
    assert nt.size_and_count("all_gather_perf", 134217728, 8) == (134217728, 4194304)
    assert nt.size_and_count("alltoall_perf", 1000, 3, "double") == (960, 40)  # 41 & ~1
    assert nt.size_and_count("all_reduce_perf", 8, 16) == (8, 2)
    assert list(nt.sizes(8, 128, factor=2)) == [8, 16, 32, 64, 128]
    assert list(nt.sizes(0, 3, step=1)) == [0, 1, 2, 3]


def test_what_is_rendered_reads_with_public_parsers_patterns():
    n = 8
    rows = [
        nt.row("all_gather_perf", s, n, 10 + s / 1e4, 11 + s / 1e4) for s in nt.sizes(8, 1 << 30, 4)
    ]
    devices = [
        nt.Device(r, 1000 + r, "gb-r01-t01", r, (0, 4 + r, 0), "NVIDIA GB200") for r in range(n)
    ]
    text = nt.render(nt.Header(1, n, 8, 1 << 30, factor=4), devices, rows)
    data, _ = read_like_public_parsers(text)
    assert len(data) == len(rows)
    assert nt.parse_rows(text)[-1].size == rows[-1].size
    assert all(r.redop == "none" and r.root == -1 for r in nt.parse_rows(text))
