"""From a spec to a cluster: the build driver.

The steps, each in its own module: count what the spec asks for (every end port needs a
LID) and reserve the GUIDs it gives; make the trays (:mod:`.trays`); make and cable the
switches, generated (:mod:`.fat_tree`) or listed (:mod:`.explicit`); give switches
without one a tier (:mod:`.tiers`); check the addresses the spec gives, fill in the rest
from the LID plan (:mod:`.lid_plan`) and check again; lay out the NVLink domains
(:mod:`.nvlink`).  Everything is deterministic: the same spec builds the same cluster.
"""

from __future__ import annotations

from ..errors import Problem, SpecError
from ..ib import devices
from ..spec import hostlist
from ..spec.schema import Spec
from . import addressing
from .assembly import Assembly, spec_error
from .cluster import Cluster
from .explicit import build_explicit
from .fabric import FabricError
from .fat_tree import build_fat_tree
from .guids import GuidAllocator
from .lid_plan import assign_lids, check_lid_budget
from .name_patterns import outgrown
from .networks import build_networks
from .nvlink import nvlink_domains
from .tiers import assign_tiers
from .trays import hca_specs, make_trays


def build(spec: Spec) -> Cluster:
    """Build the cluster a spec describes, or raise SpecError listing what is wrong."""
    assembly = Assembly(spec)
    assembly.ca_ports = _check_size(spec)
    _reserve_given_guids(spec, assembly.guids)
    make_trays(assembly)
    try:
        if spec.fabric.fat_tree is not None:
            build_fat_tree(assembly, spec.fabric.fat_tree)
        else:
            build_explicit(assembly, spec.fabric.explicit)  # type: ignore[arg-type]
    except FabricError as e:
        raise spec_error("fabric", str(e)) from None
    assign_tiers(assembly.fabric)
    _check_addresses(assembly)  # what the spec gives, before the plan fills in the rest
    assign_lids(assembly.fabric, spec.lids, assembly.trays)
    _check_addresses(assembly)
    domains = nvlink_domains(spec, assembly.trays)
    cluster = Cluster(
        spec.name,
        assembly.fabric,
        assembly.trays,
        domains,
        spec.description,
        cold_start=spec.lids.power_on == "cold",
    )
    cluster.warnings = outgrown(spec, cluster)
    cluster.networks = build_networks(spec, assembly.trays, domains)
    return cluster


def _check_size(spec: Spec) -> int:
    """Count end ports before building anything: every CA port and every switch needs
    one of the 49,151 unicast LIDs, and explicit links need ports.  Returns the CA ports."""
    ports = 0
    for gi, group in enumerate(spec.trays):
        try:
            hosts = hostlist.count(group.hosts)
        except hostlist.HostlistError as e:
            raise spec_error(f"trays[{gi}].hosts", f"bad hostlist: {e}") from None
        per_tray = sum(h.ports for h in hca_specs(group))
        ports += hosts * per_tray
    ex = spec.fabric.explicit
    switches = 0
    if ex is not None:
        ports += sum(c.ports for c in ex.cas)
        switches = len(ex.switches)
    check_lid_budget(ports, switches, "trays" if spec.trays else "fabric")
    if ex is not None:
        room = sum((s.ports or devices.switch_model(s.model).nports) for s in ex.switches) + ports
        if 2 * len(ex.links) > room:
            raise spec_error(
                "fabric.explicit.links",
                f"{len(ex.links)} links need {2 * len(ex.links)} "
                f"ports, but the switches and CAs have {room}",
            )
    return ports


def _reserve_given_guids(spec: Spec, guids: GuidAllocator) -> None:
    """The GUIDs the spec gives, reserved before any is made up."""
    for gi, group in enumerate(spec.trays):
        if isinstance(group.hcas, list):
            for hi, h in enumerate(group.hcas):
                if h.guid is not None:
                    guids.reserve(h.guid, h.name, f"trays[{gi}].hcas[{hi}].guid")
    ex = spec.fabric.explicit
    if ex is not None:
        for i, s in enumerate(ex.switches):
            if s.guid is not None:
                guids.reserve(s.guid, s.name, f"fabric.explicit.switches[{i}].guid")
        for i, c in enumerate(ex.cas):
            if c.guid is not None:
                guids.reserve(c.guid, c.name, f"fabric.explicit.cas[{i}].guid")


def _check_addresses(assembly: Assembly) -> None:
    """Refuse LIDs and GUIDs InfiniBand does not allow (:mod:`.addressing`), each problem
    at the spec path of the node it belongs to."""
    found = addressing.problems(assembly.fabric)
    if found:
        out = []
        for a in found:
            where = assembly.where.get(id(a.node), "fabric")
            if a.kind == "lid":
                where += ".lids" if a.port is not None else ".lid"
            elif a.kind == "guid":
                where += ".port_guids" if a.port is not None else ".guid"
            out.append(Problem(where, a.what))
        raise SpecError(out)
