"""A cluster in numbers: the counts, switch tiers, link rates and NVLink domains that
``fabriclab inspect`` shows (and ``presets`` and ``validate`` in part)."""

from __future__ import annotations

from dataclasses import dataclass

from .cluster import Cluster, TierInfo


@dataclass(frozen=True)
class DomainSummary:
    """One NVLink domain: its name, cluster UUID, trays and GPUs, the default partition's
    clique (0 when it has none) and the GPUs of each user partition."""

    name: str
    cluster_uuid: str
    trays: int
    gpus: int
    clique: int
    partitions: dict[int, int]  # partition id -> GPUs in it


@dataclass(frozen=True)
class Summary:
    """A cluster's numbers.  ``cas`` counts every CA and router of the fabric; ``hcas``
    the trays' HCAs among them, ``other_cas`` the rest (SHARP nodes, storage, routers)."""

    name: str
    description: str
    trays: int
    gpus: int
    hcas: int
    other_cas: int
    cas: int
    switches: int
    links: int
    tiers: list[TierInfo]
    link_rates: dict[str, int]  # width+speed ("4xNDR") -> links at it, in name order
    domains: list[DomainSummary]

    def to_json(self) -> dict:
        """The numbers as ``inspect --json`` prints them (every domain; a tier's links
        down and up, and its oversubscription, None for the top tier)."""
        return {
            "name": self.name,
            "description": self.description,
            "trays": self.trays,
            "gpus": self.gpus,
            "hcas": self.hcas,
            "other_cas": self.other_cas,
            "cas": self.cas,
            "switches": self.switches,
            "links": self.links,
            "tiers": [
                {
                    "tier": t.tier,
                    "role": t.role,
                    "switches": t.switches,
                    "links_down": t.down,
                    "links_up": t.up,
                    "oversubscription": t.oversubscription,
                }
                for t in self.tiers
            ],
            "link_rates": dict(self.link_rates),
            "domains": [
                {
                    "name": d.name,
                    "cluster_uuid": d.cluster_uuid,
                    "trays": d.trays,
                    "gpus": d.gpus,
                    "clique": d.clique,
                    "partitions": {str(pid): n for pid, n in d.partitions.items()},
                }
                for d in self.domains
            ],
        }


def summarize(cluster: Cluster) -> Summary:
    """The numbers of ``cluster``."""
    fabric = cluster.fabric
    rates: dict[str, int] = {}
    for a, _ in fabric.links():
        rate = f"{a.width.token}{a.speed.token}"
        rates[rate] = rates.get(rate, 0) + 1
    hcas = sum(len(t.hcas) for t in cluster.trays)
    cas = len(fabric.cas())
    return Summary(
        name=cluster.name,
        description=cluster.description,
        trays=len(cluster.trays),
        gpus=sum(len(t.gpus) for t in cluster.trays),
        hcas=hcas,
        other_cas=cas - hcas,
        cas=cas,
        switches=len(fabric.switches()),
        links=sum(rates.values()),
        tiers=cluster.tiers(),
        link_rates=dict(sorted(rates.items())),
        domains=[
            DomainSummary(
                name=d.name,
                cluster_uuid=d.cluster_uuid,
                trays=len(d.trays),
                gpus=d.gpu_count,
                clique=d.clique if d.default_partition else 0,
                partitions={pid: len(gpus) for pid, gpus in d.partitions.items()},
            )
            for d in cluster.domains
        ],
    )
