"""Spec validation: every bad input gets one clear line naming where and what."""

from __future__ import annotations

import textwrap

import pytest

from fabriclab.errors import SpecError
from fabriclab.model.build import build
from fabriclab.spec import hostlist
from fabriclab.spec.load import load_spec, locate, parse_spec_text, preset_names


def errors_for(text: str) -> list[str]:
    """The problems of a spec text, as the CLI shows them: parsing locates its own; a
    build's are located in the text afterwards (locate), as cli.common.load_cluster does."""
    try:
        spec = parse_spec_text(textwrap.dedent(text), "t.yaml")
    except SpecError as e:
        return [str(p) for p in e.problems]
    try:
        build(spec)
    except SpecError as e:
        return [str(p) for p in locate(spec, e).problems]
    return []


OK_TRAYS = "trays:\n  - hosts: n[1-4]\n    hcas: 2\n"

BAD = [
    (
        "unknown key",
        OK_TRAYS + "fabric: {fat_tree: {colour: red}}\n",
        "t.yaml:4: fabric.fat_tree.colour: unknown key",
    ),
    (
        "unknown top-level key",
        OK_TRAYS + "fabric: {fat_tree: {}}\nswitches: 3\n",
        "t.yaml:5: switches: unknown key",
    ),
    (
        "bad hostlist",
        "trays:\n  - hosts: node[1-x]\nfabric: {fat_tree: {}}\n",
        "t.yaml:2: trays[0].hosts: bad hostlist: bad range '1-x' in 'node[1-x]'",
    ),
    (
        "backwards range",
        "trays:\n  - hosts: node[9-1]\nfabric: {fat_tree: {}}\n",
        "t.yaml:2: trays[0].hosts: bad hostlist: range '9-1' runs backwards in 'node[9-1]'",
    ),
    (
        "more HCAs than leaf ports",
        "trays:\n  - hosts: n[1-40]\n    hcas: 2\nfabric:\n  fat_tree:\n    rail_optimized: false\n"
        "    hosts_per_leaf: 40\n",
        "t.yaml:7: fabric.fat_tree.hosts_per_leaf: more HCAs than leaf ports: 40 trays x 2 HCA "
        "ports = 80 host ports, but a quantum-2 leaf has 64",
    ),
    (
        "duplicate tray names",
        "trays:\n  - hosts: a[1-2]\n  - hosts: a[2-3]\nfabric: {fat_tree: {}}\n",
        "t.yaml:1: (top): tray 'a2' appears in trays[0] and trays[1]",
    ),
    (
        "duplicate switch names",
        OK_TRAYS + "fabric:\n  fat_tree:\n    hosts_per_leaf: 2\n    names: {leaf: LEAF}\n",
        "t.yaml:7: fabric.fat_tree.names: two leaf switches are both named 'LEAF'",
    ),
    (
        "duplicate switch in explicit",
        "fabric:\n  explicit:\n    switches:\n      - {name: s1}\n      - {name: s1}\n",
        "t.yaml:5: fabric.explicit.switches[1].name: name 's1' appears twice",
    ),
    (
        "uplinks that do not divide",
        "trays:\n  - hosts: n[1-64]\nfabric:\n  fat_tree:\n    hosts_per_leaf: 16\n    spines: 3\n",
        "t.yaml:6: fabric.fat_tree.spines: 16 uplinks per switch do not divide evenly over 3 "
        "switches above",
    ),
    (
        "unknown rate",
        OK_TRAYS + "fabric: {fat_tree: {rate: ZDR}}\n",
        "t.yaml:4: fabric.fat_tree.rate: unknown rate 'ZDR' (known: SDR, DDR, QDR, FDR10, FDR, "
        "EDR, HDR, NDR, XDR)",
    ),
    (
        "unknown width",
        OK_TRAYS + "fabric: {fat_tree: {width: 3x}}\n",
        "t.yaml:4: fabric.fat_tree.width: unknown width '3x' (known: 1x, 4x, 8x, 12x, 2x)",
    ),
    (
        "unknown switch model",
        OK_TRAYS + "fabric: {fat_tree: {switch: quantum-9}}\n",
        "t.yaml:4: fabric.fat_tree.switch: unknown switch model 'quantum-9' (known: quantum-2, "
        "quantum-2-unmanaged, quantum, quantum-3)",
    ),
    (
        "tiers out of range",
        OK_TRAYS + "fabric: {fat_tree: {tiers: 4}}\n",
        "t.yaml:4: fabric.fat_tree.tiers: tiers must be 1, 2, 3 or auto",
    ),
    (
        "one tier that cannot fit",
        "trays:\n  - hosts: n[1-40]\nfabric: {fat_tree: {tiers: 1}}\n",
        "t.yaml:3: fabric.fat_tree.tiers: 1 tier is a single switch, but these trays need 8 leaves",
    ),
    ("no fabric", OK_TRAYS, "t.yaml:1: fabric: required key is missing"),
    (
        "both fabric kinds",
        OK_TRAYS + "fabric: {fat_tree: {}, explicit: {}}\n",
        "t.yaml:4: fabric: give exactly one of fat_tree or explicit",
    ),
    (
        "bad link syntax",
        "fabric:\n  explicit:\n    switches: [{name: s1}]\n    links: ['s1[1] s1[2]']\n",
        "t.yaml:4: fabric.explicit.links: bad link 's1[1] s1[2]': expected 'NODE[PORT] -- NODE[PORT] [4xNDR]'",
    ),
    (
        "link to an unknown node",
        "fabric:\n  explicit:\n    switches: [{name: s1}]\n    links: ['s1[1] -- s2[1]']\n",
        "t.yaml:4: fabric.explicit.links[0]: no switch, tray HCA or CA named 's2'",
    ),
    (
        "port cabled twice",
        "fabric:\n  explicit:\n    switches: [{name: s1}, {name: s2}, {name: s3}]\n"
        "    links: ['s1[1] -- s2[1]', 's1[1] -- s3[1]']\n",
        "t.yaml:4: fabric.explicit.links[1]: S-",
    ),
    (
        "port out of range",
        "fabric:\n  explicit:\n    switches: [{name: s1}, {name: s2}]\n    links: ['s1[70] -- s2[1]']\n",
        "t.yaml:4: fabric.explicit.links[0]: s1 has ports 1-65, not 70",
    ),
    (
        "duplicate GUID",
        "fabric:\n  explicit:\n    switches: [{name: s1, guid: '0x10'}, {name: s2, guid: '0x10'}]\n",
        "t.yaml:3: fabric.explicit.switches[1].guid: GUID 0x0000000000000010 is already used by s1",
    ),
    (
        "bad GUID",
        "fabric:\n  explicit:\n    switches: [{name: s1, guid: zz}]\n",
        "t.yaml:3: fabric.explicit.switches[0].guid: not a number: 'zz'",
    ),
    (
        "bad UUID",
        OK_TRAYS + "nvlink:\n  domains: [{name: d, trays: 'n[1-4]', cluster_uuid: nope}]\n"
        "fabric: {fat_tree: {}}\n",
        "t.yaml:5: nvlink.domains[0].cluster_uuid: not a UUID: 'nope'",
    ),
    (
        "tray in two domains",
        OK_TRAYS
        + "nvlink:\n  domains:\n    - {name: a, trays: 'n[1-2]'}\n    - {name: b, trays: 'n[2-3]'}\n"
        "fabric: {fat_tree: {}}\n",
        "t.yaml:7: nvlink.domains[1].trays: tray 'n2' is already in domain 'a'",
    ),
    (
        "domain with unknown tray",
        OK_TRAYS + "nvlink:\n  domains: [{name: a, trays: 'm1'}]\nfabric: {fat_tree: {}}\n",
        "t.yaml:5: nvlink.domains[0].trays: tray 'm1' is not in trays",
    ),
    (
        "partition id equals default clique",
        OK_TRAYS
        + "nvlink:\n  domains:\n    - name: a\n      trays: n[1-4]\n      partitions: [{id: 1, gpus: n1}]\n"
        "fabric: {fat_tree: {}}\n",
        "t.yaml:8: nvlink.domains[0].partitions[0].id: partition id 1 is the default partition's "
        "clique; user partitions need another id",
    ),
    (
        "partition GPU out of range",
        OK_TRAYS
        + "nvlink:\n  domains:\n    - name: a\n      trays: n[1-4]\n      partitions: [{id: 7, gpus: 'n1:4-5'}]\n"
        "fabric: {fat_tree: {}}\n",
        "t.yaml:8: nvlink.domains[0].partitions[0].gpus: n1 has 4 GPUs, no GPU 4",
    ),
    (
        "GPU in two partitions",
        OK_TRAYS + "nvlink:\n  domains:\n    - name: a\n      trays: n[1-4]\n"
        "      partitions: [{id: 7, gpus: n1}, {id: 8, gpus: 'n1:0'}]\n"
        "fabric: {fat_tree: {}}\n",
        "t.yaml:8: nvlink.domains[0].partitions[1].gpus: n1 GPU 0 is already in partition 7",
    ),
    (
        "duplicate YAML key",
        OK_TRAYS + "fabric: {fat_tree: {}}\nfabric: {fat_tree: {}}\n",
        "t.yaml:5: duplicate key 'fabric'",
    ),
    ("not YAML", "trays: [\n", "t.yaml:2: not valid YAML"),
    ("not a mapping", "- a\n- b\n", "t.yaml:1: a spec is a mapping of keys"),
    (
        "bad name pattern",
        OK_TRAYS + "fabric: {fat_tree: {names: {leaf: 'L{nope}'}}}\n",
        "t.yaml:4: fabric.fat_tree.names: bad name pattern 'L{nope}': 'nope'",
    ),
]


@pytest.mark.parametrize("case,text,expected", BAD, ids=[b[0] for b in BAD])
def test_bad_spec_gets_one_clear_line(case, text, expected):
    problems = errors_for(text)
    assert problems, f"{case}: no error"
    assert len(problems) == 1, problems
    assert "\n" not in problems[0]
    assert problems[0].startswith(expected), problems[0]


def test_all_problems_reported_together():
    text = "trays:\n  - hosts: x[1-]\n    colour: red\nfabric: {fat_tree: {rate: ZDR, tiers: 9}}\n"
    problems = errors_for(text)
    assert len(problems) == 4
    assert [p.split(":")[1] for p in problems] == ["2", "3", "4", "4"]


def test_presets_are_valid():
    assert set(preset_names()) >= {"lab", "gb200-su", "h100-su"}
    for name in preset_names():
        build(load_spec(name))


def test_same_spec_same_guids_and_lids():
    a, b = build(load_spec("gb200-su")), build(load_spec("gb200-su"))
    assert [(n.guid, n.lid, [p.lid for p in n.iter_ports()]) for n in a.fabric.nodes] == [
        (n.guid, n.lid, [p.lid for p in n.iter_ports()]) for n in b.fabric.nodes
    ]
    assert a.fabric.same_as(b.fabric)


def test_hash_collisions_are_resolved_deterministically():
    from fabriclab.model.guids import GuidAllocator, hash_guid

    alloc = GuidAllocator("hash")
    taken = hash_guid(0xE09D7303, "x mlx5_0")
    alloc.reserve(taken, "someone")
    g = alloc.allocate(0xE09D7303, "x mlx5_0")
    assert g == hash_guid(0xE09D7303, "x mlx5_0#1")


# --- hostlists ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,expected",
    [
        ("sched-worker[1-2]", ["sched-worker1", "sched-worker2"]),
        ("gb-r[01-02]-t[01-02]", ["gb-r01-t01", "gb-r01-t02", "gb-r02-t01", "gb-r02-t02"]),
        ("a1,b[3,5-6]", ["a1", "b3", "b5", "b6"]),
        ("n[8-11]", ["n8", "n9", "n10", "n11"]),
        ("n[098-100]", ["n098", "n099", "n100"]),
        ("single", ["single"]),
    ],
)
def test_hostlist_expand(text, expected):
    assert hostlist.expand(text) == expected


@pytest.mark.parametrize("text", ["", "n[1-", "n1-2]", "n[[1]]", "n[a]", "n[1,1]", "a b", "n[2-1]"])
def test_hostlist_errors(text):
    with pytest.raises(hostlist.HostlistError):
        hostlist.expand(text)


def test_hostlist_scale():
    # the bracket keeps its padding: the names that fit never change, wider ones are as
    # wide as they need to be (Slurm reads gb-r[01-455] so too)
    s = hostlist.scale("gb-r[01-08]-t[01-18]", 8192)
    assert s == "gb-r[01-455]-t[01-18],gb-r456-t[01-02]"
    names = hostlist.expand(s)
    assert len(names) == 8192 and names[0] == "gb-r01-t01" and names[-1] == "gb-r456-t02"
    assert names[99 * 18 - 1 : 99 * 18 + 1] == ["gb-r99-t18", "gb-r100-t01"]
    assert hostlist.scale("gb-r[01-08]-t[01-18]", 144) == "gb-r[01-08]-t[01-18]"
    assert hostlist.scale("n[1-4]", 12) == "n[1-12]"
    assert hostlist.scale("n[001-004]x", 3) == "n[001-003]x"
    assert hostlist.scale("r[1-2]-s[1-2]-t[1-2]", 5) == "r1-s[1-2]-t[1-2],r2-s1-t1"
    assert hostlist.scale("sched-worker[1-2]", 1) == "sched-worker1"


def test_scale_trays_grows_a_preset_to_three_tiers():
    c = build(load_spec("gb200-su", trays=8192))
    assert len(c.trays) == 8192 and sum(len(t.hcas) for t in c.trays) == 32768
    assert [t.role for t in c.tiers()] == ["leaf", "spine", "core"]
    assert len(c.domains) == -(-8192 // 18)
