"""NVLink domains and partitions from a spec (fabriclab.model.nvlink), in process."""

from __future__ import annotations

import textwrap
import uuid

import pytest

from fabriclab.errors import SpecError
from fabriclab.model.build import build
from fabriclab.model.nvlink import NVLINK_UUID_NAMESPACE
from fabriclab.spec.load import parse_spec_text

TRAYS = "name: nv\ntrays:\n  - hosts: n[1-9]\n    gpus: 4\nfabric: {fat_tree: {}}\n"


def cluster(nvlink: str):
    return build(
        parse_spec_text(
            TRAYS + "nvlink:\n" + textwrap.indent(textwrap.dedent(nvlink), "  "), "t.yaml"
        )
    )


def problems(nvlink: str) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as e:
        cluster(nvlink)
    return [(p.where, p.what) for p in e.value.problems]


def test_laid_out_domains():
    c = cluster("trays_per_domain: 4\nname: 'rack{i:02d}-{n}'\nclique: 5\n")
    assert [(d.name, [t.host for t in d.trays]) for d in c.domains] == [
        ("rack00-1", ["n1", "n2", "n3", "n4"]),
        ("rack01-2", ["n5", "n6", "n7", "n8"]),
        ("rack02-3", ["n9"]),
    ]
    assert [d.cluster_uuid for d in c.domains] == [
        str(uuid.uuid5(NVLINK_UUID_NAMESPACE, f"nv/{d.name}")) for d in c.domains
    ]
    gpu = c.tray("n6").gpus[3]
    assert (gpu.domain.name, gpu.cluster_uuid, gpu.clique) == (
        "rack01-2",
        c.domains[1].cluster_uuid,
        5,
    )


def test_listed_domains_and_partitions():
    c = cluster("""\
        domains:
          - name: a
            trays: n[1-3]
            clique: 3
            partitions:
              - {id: 7, gpus: 'n1:0-1,n2'}
              - {id: 9, gpus: 'n3:[2,3]'}
          - name: b
            trays: n[4-5]
            default_partition: false
            partitions: [{id: 2, gpus: 'n[4-5]:1'}]
        """)
    a, _b = c.domains
    assert {pid: [(g.tray.host, g.index) for g in gpus] for pid, gpus in a.partitions.items()} == {
        7: [("n1", 0), ("n1", 1), ("n2", 0), ("n2", 1), ("n2", 2), ("n2", 3)],
        9: [("n3", 2), ("n3", 3)],
    }
    assert [g.clique for g in c.tray("n1").gpus] == [7, 7, 3, 3]
    assert [g.clique for g in c.tray("n4").gpus] == [0, 2, 0, 0]  # no default partition
    assert c.tray("n9").gpus[0].domain is None and c.tray("n9").gpus[0].clique == 0


PART = "domains:\n  - name: a\n    trays: n[1-2]\n    partitions: [{{id: 7, gpus: '{}'}}]\n"
W = "nvlink.domains[0].partitions[0].gpus"


@pytest.mark.parametrize(
    "gpus,what",
    [
        ("n1:x", "bad GPU index 'x'"),
        ("n1:3-1", "GPU range '3-1' runs backwards"),
        ("n1:2-5", "n1 has 4 GPUs, no GPU 4"),
        ("n1:12345", "bad GPU index '12345'"),
        ("n[1-2", "bad GPU list: unclosed '[' in 'n[1-2'"),
        ("m1", "tray 'm1' is not in trays"),
        ("n3", "n3 GPU 0 is not in domain 'a'"),
    ],
)
def test_partition_gpu_lists(gpus, what):
    assert problems(PART.format(gpus)) == [(W, what)]


def test_a_name_pattern_longer_than_a_name():
    assert problems("trays_per_domain: 4\nname: 'rack-{n:060d}'\n") == [
        (
            "nvlink.name",
            "pattern 'rack-{n:060d}' makes the 65-character name "
            "'rack-0000000000000000000000000'…; a name has at most 64",
        )
    ]
