"""fabriclab locate: a switch, tray, HCA, node description, GUID or LID turned into the
GUIDs and LIDs the real tools want, from a spec's LID plan or a running fabric's SM (the
real OpenSM's LIDs answer the real smpquery), and a name naming nothing one error line
with the nearest names."""

from __future__ import annotations

import json
import re

import pytest
from fabric_server import fabric_up
from helpers import fl, one_error
from tables import plain_rows

from fabriclab.errors import InputError
from fabriclab.model.build import build
from fabriclab.model.lookup import lookup
from fabriclab.spec.load import load_spec

LAB = build(load_spec("lab"))
LEAF, SPINE = LAB.fabric.find("LAB-IBLEAF-01"), LAB.fabric.find("LAB-IBSPINE-01")


def _node(text: str) -> dict:
    [node] = lookup(LAB, text)["nodes"]
    return node


def _ports(node: dict) -> list[tuple[int, str, int, int]]:
    return [(p["port"], p["guid"], p["lid"], p["lmc"]) for p in node["ports"]]


def test_a_tray_is_every_hca_with_its_lids_and_guids():
    found = lookup(LAB, "sched-worker1")
    assert (found["query"], found["source"]) == ("sched-worker1", "spec")
    tray = LAB.tray("sched-worker1")
    assert [n["description"] for n in found["nodes"]] == [h.desc for h in tray.hcas]
    for node, hca in zip(found["nodes"], tray.hcas, strict=True):
        assert (node["type"], node["host"], node["hca"]) == ("ca", "sched-worker1", hca.hca)
        assert node["guid"] == f"0x{hca.guid:016x}"
        assert _ports(node) == [(1, f"0x{hca.ports[1].guid:016x}", hca.ports[1].lid, 0)]
    assert [n["ports"][0]["lid"] for n in found["nodes"]] == [100, 101, 102, 103]
    assert found["nodes"][0]["ports"][0]["peer"] == "LAB-IBLEAF-01[1]"


@pytest.mark.parametrize(
    "text",
    [
        "sched-worker2/mlx5_1",
        "sched-worker2:mlx5_1",
        "sched-worker2:mlx5_1:1",
        "sched-worker2 mlx5_1",  # its description
        "0xe09d7303e2707d41",  # its GUID
        "H-e09d7303e2707d41",  # its node id
        "105",  # its LID
        "0x69",  # its LID in hexadecimal
    ],
)
def test_every_way_of_naming_an_hca(text):
    node = _node(text)
    assert (node["description"], node["guid"]) == ("sched-worker2 mlx5_1", "0xe09d7303e2707d41")
    assert _ports(node) == [(1, "0xe09d7303e2707d41", 105, 0)]


def test_a_switch_is_its_port_0_and_cabled_ports_at_its_lid():
    for text in ("LAB-IBLEAF-01", LEAF.desc, f"0x{LEAF.guid:016x}", LEAF.label, "2"):
        node = _node(text)
        assert (node["type"], node["name"], node["description"]) == ("switch", LEAF.name, LEAF.desc)
        ports = _ports(node)
        assert [p[0] for p in ports] == list(range(13))  # port 0, and the 12 cabled
        assert {p[1:] for p in ports} == {(f"0x{LEAF.port_guid:016x}", 2, 0)}
    assert [p["peer"] for p in _node("LAB-IBSPINE-01")["ports"]][:2] == [
        None,
        "LAB-IBLEAF-01[9]",
    ]
    # NODE[PORT], as faults name a port: that port alone
    [port] = _node("LAB-IBLEAF-01[6]")["ports"]
    assert (port["port"], port["lid"], port["peer"]) == (6, 2, "sched-worker2/mlx5_1[1]")
    assert SPINE.lid == 1 and _node("1")["name"] == "LAB-IBSPINE-01"


@pytest.mark.parametrize(
    "text,problem",
    [
        (
            "LAB-IBLEAF-1",
            "no tray, switch, HCA, GUID or LID 'LAB-IBLEAF-1' in this fabric "
            "(did you mean 'LAB-IBLEAF-01', 'LAB-IBSPINE-01'?)",
        ),
        (
            "sched-wroker1",
            "no tray, switch, HCA, GUID or LID 'sched-wroker1' in this fabric "
            "(did you mean 'sched-worker1', 'sched-worker2'",
        ),
        ("LAB-IBLEAF-01[99]", "has no port 99"),
        ("NOPE[3]", "no tray, switch, HCA, GUID or LID 'NOPE' in this fabric"),
        ("sched-worker1/mlx5_9", "tray 'sched-worker1' has no HCA 'mlx5_9'"),
        ("999", "no port has LID 999 in this fabric"),
        ("zzzzzzzz", "no tray, switch, HCA, GUID or LID 'zzzzzzzz' in this fabric"),
    ],
)
def test_what_names_nothing(text, problem):
    with pytest.raises(InputError) as e:
        lookup(LAB, text)
    [p] = e.value.problems
    assert p.where == text and problem in p.what, p.what
    if text == "zzzzzzzz":  # nothing near it: no suggestion
        assert p.what.endswith("in this fabric"), p.what


def test_the_command_offline():
    r = fl("locate", "sched-worker2/mlx5_1", "lab", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == lookup(LAB, "sched-worker2/mlx5_1")
    r = fl("locate", "LAB-IBLEAF-01", "lab")
    assert r.returncode == 0, r.stderr
    title, table = r.stdout.split("\n", 1)
    assert title == (
        f'switch LAB-IBLEAF-01: "{LEAF.desc}", node GUID 0x{LEAF.guid:016x} (the spec\'s LID plan)'
    )
    rows = plain_rows(table)
    assert rows[6] == {
        "port": "6",
        "GUID": f"0x{LEAF.port_guid:016x}",
        "LID": "2",
        "LMC": "0",
        "cabled to": "sched-worker2/mlx5_1[1]",
    }
    one_error(fl("locate", "LAB-IBLEAF-1", "lab"), "error: LAB-IBLEAF-1: ", "'LAB-IBLEAF-01'")
    one_error(fl("locate", "x", "lab", "--name", "lab"), "error: --name: ", "not both")


def test_a_cold_fabric_has_lid_0_until_an_sm_gives_them(tmp_path):
    with fabric_up("lab", tmp_path, extra=["--cold"]) as f:
        found = json.loads(f.ok("locate", "sched-worker1", "--name", f.name, "--json"))
        assert found["source"] == "fabric" and len(found["nodes"]) == 4
        assert {p["lid"] for n in found["nodes"] for p in n["ports"]} == {0}
        switch = json.loads(f.ok("locate", "LAB-IBLEAF-01", "--name", f.name, "--json"))
        assert {p["lid"] for p in switch["nodes"][0]["ports"]} == {0}
        one_error(f.fabriclab("locate", "100", "--name", f.name), "error: 100: no port has LID 100")
        one_error(
            f.fabriclab("locate", "sched-worker3", "--name", f.name),
            "error: sched-worker3: ",
            "(did you mean 'sched-worker2', 'sched-worker1'",
        )


@pytest.mark.realtools
def test_the_lids_opensm_gave_are_those_smpquery_answers_at(real_tools, tmp_path):
    """A cold fabric under the real OpenSM: the LIDs are OpenSM's, not the plan's; at the
    LID locate gives, the real smpquery (through fabriclab exec) reads the node's GUID,
    and locate turns that LID back into the node."""
    with fabric_up("lab", tmp_path, sm=True, extra=["--cold"]) as f:
        for name in ("LAB-IBLEAF-01", "LAB-IBSPINE-01", "sched-worker2/mlx5_1", "sched-worker1"):
            found = json.loads(f.ok("locate", name, "--name", f.name, "--json"))
            for node in found["nodes"]:
                lid = node["ports"][0]["lid"]
                assert lid > 0, found
                r = f.fabriclab(
                    "exec",
                    "--name",
                    f.name,
                    "sched-worker1",
                    "--",
                    "smpquery",
                    "nodeinfo",
                    str(lid),
                )
                assert r.returncode == 0, r.stderr
                m = re.search(r"^Guid:\.+(0x[0-9a-f]+)$", r.stdout, re.M)
                assert m and int(m.group(1), 16) == int(node["guid"], 16), (name, lid, r.stdout)
                back = json.loads(f.ok("locate", str(lid), "--name", f.name, "--json"))
                assert [n["guid"] for n in back["nodes"]] == [node["guid"]]
        one_error(
            f.fabriclab("locate", "LAB-IBLEAF-1", "--name", f.name),
            "error: LAB-IBLEAF-1: ",
            "did you mean 'LAB-IBLEAF-01'",
        )
