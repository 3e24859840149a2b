"""A cluster in numbers (fabriclab.model.summary), in process: what ``inspect``, ``presets``
and ``validate`` print."""

from __future__ import annotations

from pathlib import Path

from fabriclab.model.build import build
from fabriclab.model.summary import DomainSummary, summarize
from fabriclab.spec.load import load_spec, parse_spec_text

SPECS = Path(__file__).parent / "specs"


def numbers(spec: str, trays: int | None = None):
    return summarize(build(load_spec(spec, trays=trays)))


def counts(s) -> tuple:
    return (s.trays, s.gpus, s.hcas, s.other_cas, s.cas, s.switches, s.links, len(s.domains))


def tiers(s) -> list[tuple]:
    return [(t.tier, t.role, t.switches, t.down, t.up, t.oversubscription) for t in s.tiers]


def test_lab():
    s = numbers("lab")
    assert (s.name, s.description) == (
        "lab",
        "Two GB200 trays, one NVLink domain, one leaf and one spine (the seed lab)",
    )
    assert counts(s) == (2, 8, 8, 0, 8, 2, 12, 1)
    assert tiers(s) == [(1, "leaf", 1, 8, 4, 2.0), (2, "spine", 1, 4, 0, None)]
    assert s.link_rates == {"4xNDR": 12}
    assert s.domains == [DomainSummary("nvl8", "7f3c2a10-5b4e-4d6a-9c1e-2b8f0e6d4a91", 2, 8, 1, {})]


def test_gb200_su():
    s = numbers("gb200-su")
    assert counts(s) == (144, 576, 576, 0, 576, 41, 1152, 8)
    assert tiers(s) == [(1, "leaf", 32, 576, 576, 1.0), (2, "spine", 9, 576, 0, None)]
    assert s.link_rates == {"4xNDR": 1152}
    assert [d.name for d in s.domains] == [f"nvl72-r{i:02d}" for i in range(1, 9)]
    assert {(d.trays, d.gpus, d.clique) for d in s.domains} == {(18, 72, 1)}
    assert s.domains[0].cluster_uuid == "fb7328dc-391e-5b0c-9c63-652f49f82b22"


def test_h100_su_has_no_nvlink_domains():
    s = numbers("h100-su")
    assert counts(s) == (32, 256, 256, 0, 256, 12, 512, 0)
    assert tiers(s) == [(1, "leaf", 8, 256, 256, 1.0), (2, "spine", 4, 256, 0, None)]
    assert s.link_rates == {"4xNDR": 512}


def test_scaled_to_three_tiers():
    s = numbers("gb200-su", trays=1200)
    assert counts(s) == (1200, 4800, 4800, 0, 4800, 574, 14808, 67)
    assert [(t.tier, t.role, t.switches, t.down, t.up) for t in s.tiers] == [
        (1, "leaf", 268, 4800, 4824),
        (2, "spine", 162, 4824, 5184),
        (3, "core", 144, 5184, 0),
    ]
    assert round(s.tiers[0].oversubscription, 6) == 0.995025
    assert s.links == sum(s.link_rates.values()) == 14808
    assert (s.domains[-1].trays, s.domains[-1].gpus) == (12, 48)  # 1200 = 66 x 18 + 12


def test_three_tier_spec_of_hdr():
    s = numbers(str(SPECS / "three-tier-hdr.yaml"))
    assert counts(s) == (48, 384, 96, 0, 96, 32, 288, 0)
    assert [t.switches for t in s.tiers] == [12, 12, 8]
    assert s.link_rates == {"4xHDR": 288}


def test_other_cas_and_mixed_rates():
    s = numbers(str(SPECS / "quirks.yaml"))
    assert counts(s) == (4, 7, 7, 3, 10, 3, 14, 0)
    assert tiers(s) == [(1, "leaf", 3, 10, 0, None)]
    assert s.link_rates == {"2xHDR": 1, "4xEDR": 2, "4xFDR10": 1, "4xHDR": 9, "4xQDR": 1}
    assert list(s.link_rates) == sorted(s.link_rates)


def test_partitions_counted_by_gpus():
    spec = parse_spec_text(
        "name: p\ntrays:\n  - hosts: n[1-2]\n    gpus: 4\nfabric: {fat_tree: {}}\n"
        "nvlink:\n  domains:\n    - name: d\n      trays: n[1-2]\n"
        "      cluster_uuid: 7f3c2a10-5b4e-4d6a-9c1e-2b8f0e6d4a91\n      clique: 3\n"
        "      partitions:\n        - {id: 7, gpus: n2}\n",
        "p.yaml",
    )
    (d,) = summarize(build(spec)).domains
    assert (d.trays, d.gpus, d.clique, d.partitions) == (2, 8, 3, {7: 4})
