"""NVLink domains and partitions from the spec: domains listed by hostlist or laid out
``trays_per_domain`` at a time, and user partitions of their GPUs (``HOST:0-1``)."""

from __future__ import annotations

import uuid

from ..spec import hostlist
from ..spec.schema import Spec
from .assembly import spec_error
from .cluster import Domain, Gpu, Tray
from .name_patterns import name_from_pattern

# Domain UUIDs made up for laid-out NVLink domains are name-based (uuid5) in this space.
NVLINK_UUID_NAMESPACE = uuid.UUID("6b1f0c52-0d7e-4f0e-9d58-3f8a4c7e2b10")


def nvlink_domains(spec: Spec, trays: list[Tray]) -> list[Domain]:
    """The spec's NVLink domains over ``trays``, each GPU linked to its domain."""
    nv = spec.nvlink
    if nv is None:
        return []
    by_host = {t.host: t for t in trays}
    domains: list[Domain] = []
    if nv.trays_per_domain:
        for index, start in enumerate(range(0, len(trays), nv.trays_per_domain)):
            name = name_from_pattern(nv.name, "nvlink.name", n=index + 1, i=index)
            dom = Domain(
                name,
                str(uuid.uuid5(NVLINK_UUID_NAMESPACE, f"{spec.name}/{name}")),
                nv.clique,
                True,
                trays[start : start + nv.trays_per_domain],
            )
            domains.append(dom)
    owner: dict[str, str] = {}
    for di, ds in enumerate(nv.domains):
        where = f"nvlink.domains[{di}]"
        members_in_order = []
        try:
            names = hostlist.expand(ds.trays)
        except hostlist.HostlistError as e:
            raise spec_error(f"{where}.trays", f"bad hostlist: {e}") from None
        for h in names:
            if h not in by_host:
                raise spec_error(f"{where}.trays", f"tray {h!r} is not in trays")
            if h in owner:
                raise spec_error(f"{where}.trays", f"tray {h!r} is already in domain {owner[h]!r}")
            owner[h] = ds.name
            members_in_order.append(by_host[h])
        members = {id(t) for t in members_in_order}
        cluster_uuid = ds.cluster_uuid or str(
            uuid.uuid5(NVLINK_UUID_NAMESPACE, f"{spec.name}/{ds.name}")
        )
        dom = Domain(ds.name, cluster_uuid, ds.clique, ds.default_partition, members_in_order)
        domains.append(dom)
        for pi, part in enumerate(ds.partitions):
            part_where = f"{where}.partitions[{pi}]"
            if ds.default_partition and part.id == ds.clique:
                raise spec_error(
                    f"{part_where}.id",
                    f"partition id {part.id} is the default "
                    f"partition's clique; user partitions need another id",
                )
            if part.id in dom.partitions:
                raise spec_error(f"{part_where}.id", f"partition id {part.id} appears twice")
            dom.partitions[part.id] = []
            for gpu in _partition_gpus(part.gpus, by_host, f"{part_where}.gpus"):
                if id(gpu.tray) not in members:
                    raise spec_error(
                        f"{part_where}.gpus",
                        f"{gpu.tray.host} GPU {gpu.index} is not in domain {ds.name!r}",
                    )
                if gpu.partition is not None:
                    raise spec_error(
                        f"{part_where}.gpus",
                        f"{gpu.tray.host} GPU {gpu.index} is already in partition {gpu.partition}",
                    )
                gpu.partition = part.id
                dom.partitions[part.id].append(gpu)
    for dom in domains:
        for t in dom.trays:
            for g in t.gpus:
                g.domain = dom
    return domains


def partition_names(domains: list[Domain]) -> dict[str, str]:
    """``<ClusterUUID>.<CliqueId>`` (a partition as nvidia-smi shows it) -> the spec's name
    for it: the domain's name for its default partition, ``<domain>-p<id>`` for a user
    partition.  A spec's topology and a running fabric's both name blocks by it."""
    out = {}
    for domain in domains:
        if domain.default_partition:
            out[f"{domain.cluster_uuid}.{domain.clique}"] = domain.name
        for partition in domain.partitions:
            out[f"{domain.cluster_uuid}.{partition}"] = f"{domain.name}-p{partition}"
    return out


def _partition_gpus(text: str, by_host: dict[str, Tray], where: str) -> list[Gpu]:
    """The GPUs a partition's ``gpus`` names: hostlist terms, each all of its trays' GPUs
    or ``HOSTS:INDICES``."""
    out: list[Gpu] = []
    try:
        terms = hostlist.split_terms(text)
    except hostlist.HostlistError as e:
        raise spec_error(where, f"bad GPU list: {e}") from None
    for term in terms:
        hosts_part, _, gpus_part = term.partition(":")
        try:
            hosts = hostlist.expand(hosts_part)
        except hostlist.HostlistError as e:
            raise spec_error(where, f"bad GPU list {text!r}: {e}") from None
        for h in hosts:
            tray = by_host.get(h)
            if tray is None:
                raise spec_error(where, f"tray {h!r} is not in trays")
            if gpus_part:
                for i in _gpu_indices(gpus_part, where, h, len(tray.gpus)):
                    if i >= len(tray.gpus):
                        raise spec_error(where, f"{h} has {len(tray.gpus)} GPUs, no GPU {i}")
                    out.append(tray.gpus[i])
            else:
                out.extend(tray.gpus)
    return out


def _gpu_indices(text: str, where: str, host: str, gpus: int) -> list[int]:
    """GPU indices ``0-1,3``: each checked against the tray's ``gpus`` before any range
    is expanded."""
    out: list[int] = []
    for part in text.strip("[]").split(","):
        lo, _, hi = part.partition("-")
        lo, hi = lo.strip(), (hi or lo).strip()
        if not (lo.isdigit() and hi.isdigit() and len(lo) <= 4 and len(hi) <= 4):
            raise spec_error(where, f"bad GPU index {part[:40]!r}")
        lo_i, hi_i = int(lo), int(hi)
        if lo_i > hi_i:
            raise spec_error(where, f"GPU range {part!r} runs backwards")
        if hi_i >= gpus:
            raise spec_error(where, f"{host} has {gpus} GPUs, no GPU {max(lo_i, gpus)}")
        out.extend(range(lo_i, hi_i + 1))
    return out
