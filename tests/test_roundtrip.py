"""Round trips on generated fabrics: parse(render(f)) == f, for both ibnetdiscover formats
and for import (dump -> explicit spec -> fabric)."""

from __future__ import annotations

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from fabriclab.errors import SpecError
from fabriclab.formats import ibnetdiscover
from fabriclab.model.build import build
from fabriclab.model.fabric import diff_signatures
from fabriclab.model.to_spec import spec_from_fabric
from fabriclab.spec.schema import Spec

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def fat_tree_specs(draw):
    trays = draw(st.integers(1, 40))
    hcas = draw(st.integers(1, 4))
    ports = draw(st.integers(1, 2))
    rail = draw(st.booleans())
    ft: dict = {
        "switch": draw(st.sampled_from(["quantum-2", "quantum"])),
        "rail_optimized": rail,
        "tiers": draw(st.sampled_from(["auto", 1, 2, 3])),
        "hosts_per_leaf": draw(st.integers(1, 8)),
        "sharp": draw(st.booleans()),
    }
    if draw(st.booleans()):
        ft["rate"] = draw(st.sampled_from(["EDR", "HDR", "NDR"]))
    if ft["tiers"] == 3:
        ft["leaves_per_pod"] = draw(st.integers(1, 4))
    spec = {
        "name": "random",
        "trays": [
            {"hosts": f"h[1-{trays}]" if trays > 1 else "h1", "hcas": hcas, "hca_ports": ports}
        ],
        "guids": {"scheme": draw(st.sampled_from(["hash", "sequential"]))},
        "fabric": {"fat_tree": ft},
    }
    return spec


@st.composite
def explicit_specs(draw):
    """Random connected fabrics of switches and single/dual-port CAs, some ports down."""
    nsw = draw(st.integers(1, 5))
    switches = [
        {
            "name": f"sw{i}",
            "model": draw(st.sampled_from(["quantum-2", "quantum"])),
            "ports": draw(st.integers(8, 20)),
        }
        for i in range(nsw)
    ]
    ncas = draw(st.integers(1, 8))
    cas = [
        {"name": f"ca{i}", "desc": f"host{i} HCA-1", "ports": draw(st.integers(1, 2))}
        for i in range(ncas)
    ]
    free = {s["name"]: list(range(1, s["ports"] + 1)) for s in switches}
    links = []
    # spanning tree over switches
    for i in range(1, nsw):
        j = draw(st.integers(0, i - 1))
        a, b = f"sw{i}", f"sw{j}"
        if free[a] and free[b]:
            links.append(f"{a}[{free[a].pop(0)}] -- {b}[{free[b].pop(0)}] 4xHDR")
    for c in cas:
        for p in range(1, c["ports"] + 1):
            if p > 1 and draw(st.booleans()):
                continue  # leave port 2 down
            s = f"sw{draw(st.integers(0, nsw - 1))}"
            if free[s]:
                links.append(
                    f"{c['name']}[{p}] -- {s}[{free[s].pop(0)}] "
                    f"{draw(st.sampled_from(['4xNDR', '2xNDR', '4xEDR', '1xSDR']))}"
                )
    # a few parallel switch links
    for _ in range(draw(st.integers(0, 3))):
        a, b = f"sw{draw(st.integers(0, nsw - 1))}", f"sw{draw(st.integers(0, nsw - 1))}"
        if a != b and free[a] and free[b]:
            links.append(f"{a}[{free[a].pop()}] -- {b}[{free[b].pop()}] 4xHDR")
    return {
        "name": "explicit",
        "fabric": {"explicit": {"switches": switches, "cas": cas, "links": links}},
    }


def _built(data):
    try:
        return build(Spec.model_validate(data))
    except SpecError:
        assume(False)


def _reachable_cas(fabric):
    return [n for n in fabric.cas() if any(p.peer is not None for p in n.iter_ports())]


def _check_round_trips(cluster, pick):
    f = cluster.fabric
    starts = [p for n in _reachable_cas(f) for p in n.iter_ports() if p.peer is not None]
    assume(starts)
    start = starts[pick % len(starts)]
    text = ibnetdiscover.render(f, start, now=0)
    dump = ibnetdiscover.parse(text)
    assert dump.warnings == []
    # everything reachable from start is the whole fabric in these strategies
    from fabriclab.formats.libibnetdisc import scan

    if len(scan(f, start).created) == len(f.nodes):
        assert dump.fabric.same_as(f), "\n".join(diff_signatures(dump.fabric, f))
    assert ibnetdiscover.render(dump.fabric, dump.from_port, now=0) == text
    ports = ibnetdiscover.render_ports(f, start)
    pdump = ibnetdiscover.parse(ports)
    assert pdump.kind == "ports"
    # -p names ports, not nodes: find the start by its port GUID
    pstart = next(
        p
        for n in pdump.fabric.cas()
        for p in n.iter_ports()
        if p.guid == start.guid and p.num == start.num
    )
    assert ibnetdiscover.render_ports(pdump.fabric, pstart) == ports
    imported = build(Spec.model_validate(spec_from_fabric(dump.fabric, "x"))).fabric
    assert imported.same_as(dump.fabric), "\n".join(diff_signatures(imported, dump.fabric))


@SETTINGS
@given(fat_tree_specs(), st.integers(0, 10_000))
def test_fat_tree_round_trip(data, pick):
    _check_round_trips(_built(data), pick)


@SETTINGS
@given(explicit_specs(), st.integers(0, 10_000))
def test_explicit_round_trip(data, pick):
    _check_round_trips(_built(data), pick)
