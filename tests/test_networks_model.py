"""The other networks as the spec declares them: endpoints, interfaces, switch ports,
addresses and uplinks, and one-line errors for what does not fit."""

from __future__ import annotations

import json

import pytest
from helpers import fl

from fabriclab.errors import SpecError
from fabriclab.model.build import build
from fabriclab.spec.load import load_spec, parse_spec_text

BASE = """\
name: n
trays:
  - {hosts: "t[1-3]", hcas: 1}
services:
  - {name: ctl, role: controller}
fabric:
  fat_tree: {tiers: 1, switch: quantum-2, hosts_per_leaf: 3}
networks:
"""


def nets(text: str):
    return build(parse_spec_text(BASE + text, "s.yaml")).networks


def test_the_lab_presets_networks():
    doc = build(load_spec("lab")).networks.to_json()
    assert [(n["name"], n["kind"]) for n in doc["networks"]] == [
        ("frontend", "frontend"),
        ("storage", "storage"),
        ("oob", "oob"),
    ]
    ep = {e["name"]: e for e in doc["endpoints"]}
    assert {i["network"] for i in ep["sched-worker1"]["interfaces"]} == {"frontend", "storage"}
    assert [i["network"] for i in ep["sched-worker1-bmc"]["interfaces"]] == ["oob"]
    assert ep["sched-worker1-bmc"]["kind"] == "bmc"
    ctl = {i["network"]: i for i in ep["sched-controller"]["interfaces"]}
    assert ctl["frontend"]["address"] == "10.107.111.2/24"  # the gateway .1 left out
    assert ctl["oob"]["peer"] == "LAB-OOB-01[1]"
    sw = ep["LAB-OOB-01"]
    assert sw["kind"] == "switch" and sw["model"] == "NVIDIA SN2201"
    assert [(i["name"], i["peer"]) for i in sw["interfaces"]][:2] == [
        ("swp1", "sched-controller/eno3"),
        ("swp2", "sched-worker1-bmc/eth0"),
    ]


def test_uplinks_join_switches_of_one_network():
    n = nets(
        """\
  - name: fe
    kind: frontend
    subnet: 192.0.2.0/24
    switches: [{name: a, model: sn4600c}, {name: b, model: sn4600c}]
    attach: [{endpoints: "t[1-3]", switch: a}, {endpoints: "service:ctl", switch: b}]
    uplinks: [{ends: ["a[64]", "b[64]"]}]
"""
    )
    assert n.switches["a"].ports[64] == "b[64]" and n.switches["b"].ports[64] == "a[64]"
    assert (("a", "swp64"), ("b", "swp64")) in n.links
    assert n.endpoints["t3"].interfaces[0].peer == "a[3]"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '  - {name: fe, kind: frontend, subnet: 192.0.2.0/30, switches: [{name: a}], attach: [{endpoints: "t[1-3]", switch: a}]}\n',
            "networks[0].subnet: 192.0.2.0/30 has no address left for t3",
        ),
        (
            '  - {name: fe, kind: frontend, subnet: 192.0.2.0/24, switches: [{name: a}], attach: [{endpoints: "t9", switch: a}]}\n',
            "networks[0].attach[0].endpoints: no tray 't9'",
        ),
        (
            '  - {name: fe, kind: frontend, subnet: 192.0.2.0/24, switches: [{name: a}], attach: [{endpoints: "t1", switch: b}]}\n',
            "networks[0].attach[0].switch: no switch 'b' in network 'fe'",
        ),
        (
            '  - {name: fe, kind: frontend, subnet: 192.0.2.0/24, switches: [{name: a}], attach: [{endpoints: "t[1-3]", switch: a, first_port: 51}]}\n',
            "networks[0].attach[0].first_port: a has 52 ports; t3 would take port 53",
        ),
        (
            "  - {name: fe, kind: oob, subnet: 192.0.2.0/24, switches: [{name: t1}]}\n",
            "networks[0].switches[0].name: name 't1' is taken",
        ),
    ],
)
def test_what_does_not_fit_is_one_line(text, message):
    with pytest.raises(SpecError) as e:
        nets(text)
    assert str(e.value).endswith(message), str(e.value)


def test_the_networks_command_prints_the_contracts_shape():
    r = fl("networks", "lab", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert set(doc) >= {"networks", "endpoints"}
    assert all(set(n) >= {"name", "kind", "subnet"} for n in doc["networks"])
    for e in doc["endpoints"]:
        assert e["kind"] in ("tray", "bmc", "service", "switch")
        assert all(set(i) >= {"name", "network", "address", "peer"} for i in e["interfaces"])


def test_nvlink_switch_trays_on_the_management_network():
    doc = build(load_spec("gb200-su")).networks.to_json()
    trays = [e for e in doc["endpoints"] if e["kind"] == "nvswitch"]
    assert len(trays) == 8 * 9  # nine in each NVL72 rack's domain
    first = trays[0]
    assert first["name"] == "nvl72-r01-nvsw1"
    assert first["interfaces"] == [
        {"name": "eth0", "network": "oob", "address": "10.112.0.20/24", "peer": "SU1-OOB-R01[19]"}
    ]


@pytest.mark.parametrize(
    ("gpu", "endpoints", "message"),
    [
        ("gb200", "nvswitch:nvx", "no NVLink domain 'nvx'"),
        ("h100", "nvswitch:d1", "NVLink domain 'd1' has no NVLink switch trays"),
    ],
)
def test_switch_trays_of_what_has_none_are_one_line(gpu, endpoints, message):
    text = BASE.replace("hcas: 1}", f"hcas: 1, gpu: {gpu}}}").replace(
        "fabric:", "nvlink:\n  trays_per_domain: 3\n  name: d{n}\nfabric:"
    )
    text += (
        f"  - {{name: m, kind: oob, subnet: 192.0.2.0/24, switches: [{{name: a, model: sn2201}}],"
        f' attach: [{{endpoints: "{endpoints}", switch: a}}]}}\n'
    )
    with pytest.raises(SpecError) as e:
        build(parse_spec_text(text, "s.yaml"))
    assert message in str(e.value), str(e.value)
