"""Problems that show only while a spec is built (trays, explicit fabrics, cables), each at
the spec path of what causes it; and the FDR10 rule for cables.  In process."""

from __future__ import annotations

import textwrap

import pytest

from fabriclab.errors import SpecError
from fabriclab.model.build import build
from fabriclab.spec.load import parse_spec_text


def build_text(text: str):
    return build(parse_spec_text(textwrap.dedent(text), "t.yaml"))


BAD = [
    (
        "description too long",
        """
     trays:
       - hosts: n1
         hcas: [{name: mlx5_0, desc: "%s"}]
     fabric: {fat_tree: {}}
     """
        % ("x" * 70),
        "trays[0].hcas[0]",
        f"description {'x' * 40!r}… is 70 bytes; a NodeDescription holds 64 (IBA 14.2.5.2)",
    ),
    (
        "tray HCA port GUIDs",
        """
     trays:
       - hosts: n[1-2]
         hcas: [{name: mlx5_0, ports: 2, port_guids: ['0x10', '0x11', '0x12']}]
     fabric: {fat_tree: {}}
     """,
        "trays[0].hcas[0].port_guids",
        "3 GUIDs for 2 ports",
    ),
    (
        "explicit CA port GUIDs",
        """
     fabric:
       explicit:
         switches: [{name: s1}]
         cas: [{name: c1, desc: x, ports: 2, port_guids: ['0x10']}]
     """,
        "fabric.explicit.cas[0].port_guids",
        "1 GUIDs for 2 ports",
    ),
    (
        "more links than ports",
        """
     fabric:
       explicit:
         switches: [{name: s1, ports: 1}]
         links: ["s1[1] -- s1[1]", "s1[1] -- s1[1]"]
     """,
        "fabric.explicit.links",
        "2 links need 4 ports, but the switches and CAs have 1",
    ),
    (
        "a port cabled to itself",
        """
     fabric:
       explicit:
         switches: [{name: s1, guid: '0x2c5eab0300000010'}]
         links: ["s1[1] -- s1[1]"]
     """,
        "fabric.explicit.links[0]",
        "S-2c5eab0300000010[1] cannot be cabled to itself",
    ),
    (
        "a CA named like a switch",
        """
     fabric:
       explicit:
         switches: [{name: s1}]
         cas: [{name: s1, desc: x}]
     """,
        "fabric.explicit.cas[0].name",
        "name 's1' appears twice",
    ),
    (
        "trays of different shapes",
        """
     trays:
       - hosts: n[1-2]
         hcas: 2
       - hosts: m[1-2]
         hcas: 3
     fabric: {fat_tree: {}}
     """,
        "trays",
        "every tray of a fat_tree needs the same number of HCA ports: n1 has 2, m1 has 3",
    ),
    (
        "a fat tree without trays",
        "fabric: {fat_tree: {}}\n",
        "trays",
        "a fat_tree needs at least one tray with HCAs",
    ),
]


@pytest.mark.parametrize("case,text,where,what", BAD, ids=[b[0] for b in BAD])
def test_build_problem_at_its_spec_path(case, text, where, what):
    with pytest.raises(SpecError) as e:
        build_text(text)
    assert [(p.where, p.what) for p in e.value.problems] == [(where, what)]


def test_fdr10_needs_mellanox_extended_port_info_at_both_ends():
    """A ConnectX-6 on a Quantum trains at FDR10; a ConnectX-7 (no ExtendedPortInfo)
    at QDR."""
    c = build_text("""
        trays:
          - hosts: old
            hca_model: connectx-6
            hcas: 1
          - hosts: new
            hcas: 1
        fabric: {fat_tree: {switch: quantum, rate: FDR10}}
        """)
    assert {t.host: t.hcas[0].port(1).speed.token for t in c.trays} == {
        "old": "FDR10",
        "new": "QDR",
    }
