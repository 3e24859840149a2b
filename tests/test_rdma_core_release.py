"""The renderer follows one rdma-core release or the other (44: Debian 12, 56: Debian
13): they differ on an XDR link only, and ``fabriclab render --rdma-core`` picks the
release, by default the installed one's.  In process; tests/test_fabric_server.py
compares both with the real tools."""

from __future__ import annotations

import re
import subprocess

import pytest
from conftest import SPECS
from helpers import fl
from versions import rdma_core as installed_rdma_core

from fabriclab.formats import ibnetdiscover, rdma_core
from fabriclab.ib.rates import SPEEDS
from fabriclab.model.build import build
from fabriclab.spec.load import load_spec

XDR = str(SPECS / "xdr-lab.yaml")


def _rates(text: str) -> set[str]:
    return set(re.findall(r" (\d+x[A-Z0-9?]+)$", text, re.M))


@pytest.fixture(scope="module")
def xdr():
    c = build(load_spec(XDR))
    start, _ = c.locate("xw1")
    return c.fabric, start


def test_an_xdr_link_is_qdr_to_44_and_xdr_to_56(xdr):
    fabric, start = xdr
    v44 = ibnetdiscover.render(fabric, start, now=0, rdma_core=44)
    v56 = ibnetdiscover.render(fabric, start, now=0, rdma_core=56)
    assert _rates(v44) == {"4xQDR"} and _rates(v56) == {"4xXDR"}
    assert v44 == v56.replace("4xXDR", "4xQDR")  # the only difference
    p44 = ibnetdiscover.render_ports(fabric, start, rdma_core=44)
    p56 = ibnetdiscover.render_ports(fabric, start, rdma_core=56)
    assert "4x XDR" not in p44 and "4x XDR" in p56
    assert p44 == p56.replace("4x XDR", "4x QDR")
    assert ibnetdiscover.render(fabric, start, now=0) == v56  # the library's default: latest


def test_other_speeds_are_the_same_to_both():
    for s in SPEEDS.values():
        if s.token != "XDR":
            assert rdma_core.speed_shown(s, 44) is s is rdma_core.speed_shown(s, 56)
    assert rdma_core.speed_shown(SPEEDS["XDR"], 44).token == "QDR"


@pytest.mark.parametrize(
    "version, release", [(30, 44), (44, 44), (50, 44), (55, 44), (56, 56), (60, 56)]
)
def test_a_release_in_between_prints_as_the_known_one_below_it(version, release):
    assert rdma_core.release(version) == release


def test_the_installed_release_is_read_from_its_package():
    assert rdma_core.installed() == installed_rdma_core()
    assert rdma_core.release() == rdma_core.release(installed_rdma_core())


def _render(*args: str) -> subprocess.CompletedProcess:
    return fl("render", XDR, *args)


def test_render_rdma_core_switch_and_its_default():
    assert _rates(_render("ibnetdiscover", "--rdma-core", "44").stdout) == {"4xQDR"}
    assert _rates(_render("ibnetdiscover", "--rdma-core", "56").stdout) == {"4xXDR"}
    assert "4x XDR" in _render("ibnetdiscover-ports", "--rdma-core", "56").stdout
    default = {44: "4xQDR", 56: "4xXDR"}[rdma_core.release(installed_rdma_core())]
    assert _rates(_render("ibnetdiscover").stdout) == {default}
    r = _render("ibnetdiscover", "--rdma-core", "57")
    assert r.returncode == 2
    assert r.stderr.startswith("error: --rdma-core: ") and len(r.stderr.splitlines()) == 1
