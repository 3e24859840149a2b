"""Generated fabrics: folded Clos networks ("fat trees") of one, two or three switch tiers.

- Leaves (tier 1).  Trays are cut into groups of ``hosts_per_leaf``.  Rail-optimized,
  HCA port r of every tray in a group goes to the group's rail-r leaf; otherwise one
  leaf takes every HCA of its group.  Host ports are 1..leaf_down in tray order, uplinks
  follow at leaf_down+1..leaf_down+leaf_up.
- Spines (tier 2).  Two tiers: every leaf cables ``leaf_up / spines`` links to each spine.
  Three tiers: leaves form pods of ``leaves_per_pod``; each pod has its own spines.  Leaf
  uplink j goes to spine j // links_per_leaf_spine, so a leaf's uplinks to one spine are
  adjacent, and spine ports run leaf by leaf.
- Cores (tier 3).  Spine s of every pod cables to core group s; each spine spreads its
  uplinks over the cores of its group, core ports running pod by pod.

``fat_tree_shape`` does the arithmetic (every count, checked against the switch radix)
before ``build_fat_tree`` makes a single switch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import SpecError
from ..ib import devices, rates
from ..ib.enums import NodeType
from ..spec.schema import FatTree
from .assembly import Assembly, spec_error
from .fabric import Node
from .lid_plan import check_lid_budget
from .name_patterns import name_from_pattern

WHERE = "fabric.fat_tree"


@dataclass(frozen=True)
class FatTreeShape:
    """How many switches of each tier a fat tree has, and how many ports and cables join
    them.  A fabric of two tiers is a single pod; one of one tier has no spines."""

    tiers: int
    rails: int  # HCA ports per tray
    trays_per_leaf: int  # trays in a group, the trays one leaf serves
    leaf_down: int  # host ports per leaf
    tray_groups: int
    leaves: int
    leaf_up: int  # uplinks per leaf
    leaves_per_pod: int
    pods: int
    spines_per_pod: int
    links_per_leaf_spine: int  # cables between a leaf and each spine of its pod
    spine_down: int  # ports per spine toward the leaves
    spine_up: int  # uplinks per spine (three tiers)
    cores_per_group: int  # cores that spine s of every pod cables to (three tiers)
    links_per_spine_core: int  # cables between a spine and each core of its group

    @property
    def switches(self) -> int:
        """Switches in all tiers."""
        return (
            self.leaves
            + self.pods * self.spines_per_pod
            + self.spines_per_pod * self.cores_per_group
        )


def fat_tree_shape(
    ft: FatTree, switch: devices.SwitchModel, trays: int, rails: int
) -> FatTreeShape:
    """The shape of the fat tree ``ft`` asks for over ``trays`` trays of ``rails`` HCA
    ports each, or a SpecError saying which setting cannot be met."""
    radix = switch.radix
    if rails == 0:
        raise spec_error("trays", "the trays have no HCAs")
    ports_per_tray = 1 if ft.rail_optimized else rails  # a tray's host ports on one leaf
    if ft.hosts_per_leaf is not None:
        trays_per_leaf = ft.hosts_per_leaf
    else:
        if ft.leaf_uplinks is not None:
            host_port_room = radix - ft.leaf_uplinks
        elif ft.oversubscription is not None:
            host_port_room = int(radix * ft.oversubscription / (ft.oversubscription + 1))
        else:
            host_port_room = radix // 2
        trays_per_leaf = max(1, min(trays, host_port_room // ports_per_tray))
    leaf_down = trays_per_leaf * ports_per_tray
    if leaf_down > radix:
        raise spec_error(
            f"{WHERE}.hosts_per_leaf",
            f"more HCAs than leaf ports: {trays_per_leaf} trays x {ports_per_tray} HCA "
            f"ports = {leaf_down} host ports, but a {switch.key} leaf has {radix}",
        )
    tray_groups = math.ceil(trays / trays_per_leaf)
    leaves = tray_groups * (rails if ft.rail_optimized else 1)

    tiers = ft.tiers
    if tiers == "auto":
        tiers = 1 if leaves == 1 else (2 if _fits_two_tiers(ft, leaves, leaf_down, radix) else 3)
    if tiers == 1:
        if leaves != 1:
            raise spec_error(
                f"{WHERE}.tiers", f"1 tier is a single switch, but these trays need {leaves} leaves"
            )
        leaf_up = 0
    else:
        leaf_up = _leaf_uplinks(ft, leaf_down, radix, WHERE)

    leaves_per_pod, pods = leaves, 1
    spines_per_pod = links_per_leaf_spine = spine_down = spine_up = 0
    cores_per_group = links_per_spine_core = 0
    if tiers == 2:
        spines_per_pod = _switches_above(ft.spines, leaf_up, leaves, radix, f"{WHERE}.spines")
        links_per_leaf_spine = leaf_up // spines_per_pod
        spine_down = leaves * links_per_leaf_spine
    elif tiers == 3:
        leaves_per_pod = ft.leaves_per_pod or _default_leaves_per_pod(ft, rails, radix)
        pods = math.ceil(leaves / leaves_per_pod)
        spine_port_room = radix // 2 if ft.spine_uplinks is None else radix - ft.spine_uplinks
        spines_per_pod = _switches_above(
            ft.spines, leaf_up, leaves_per_pod, spine_port_room, f"{WHERE}.spines"
        )
        links_per_leaf_spine = leaf_up // spines_per_pod
        spine_down = leaves_per_pod * links_per_leaf_spine
        # spine_down fits spine_port_room, so spine_down + spine_up never exceeds the radix
        spine_up = ft.spine_uplinks if ft.spine_uplinks is not None else spine_down
        cores_per_group = _switches_above(
            ft.cores_per_group, spine_up, pods, radix, f"{WHERE}.cores_per_group"
        )
        links_per_spine_core = spine_up // cores_per_group
    return FatTreeShape(
        tiers=tiers,
        rails=rails,
        trays_per_leaf=trays_per_leaf,
        leaf_down=leaf_down,
        tray_groups=tray_groups,
        leaves=leaves,
        leaf_up=leaf_up,
        leaves_per_pod=leaves_per_pod,
        pods=pods,
        spines_per_pod=spines_per_pod,
        links_per_leaf_spine=links_per_leaf_spine,
        spine_down=spine_down,
        spine_up=spine_up,
        cores_per_group=cores_per_group,
        links_per_spine_core=links_per_spine_core,
    )


def _fits_two_tiers(ft: FatTree, leaves: int, leaf_down: int, radix: int) -> bool:
    try:
        leaf_up = _leaf_uplinks(ft, leaf_down, radix, "")
        _switches_above(ft.spines, leaf_up, leaves, radix, "")
        return True
    except SpecError:
        return False


def _leaf_uplinks(ft: FatTree, leaf_down: int, radix: int, where: str) -> int:
    """Uplinks per leaf: as given, from the oversubscription, or one per host port."""
    if ft.leaf_uplinks is not None:
        leaf_up = ft.leaf_uplinks
    elif ft.oversubscription is not None:
        leaf_up = math.ceil(leaf_down / ft.oversubscription)
    else:
        leaf_up = leaf_down
    if leaf_up < 1:
        raise spec_error(f"{where}.leaf_uplinks", "a multi-tier fabric needs leaf uplinks")
    if leaf_down + leaf_up > radix:
        hint = "" if ft.leaf_uplinks is not None else " (set oversubscription or leaf_uplinks)"
        raise spec_error(
            f"{where}.leaf_uplinks",
            f"leaves need {leaf_down} host + {leaf_up} uplink ports, but the switch has {radix}{hint}",
        )
    return leaf_up


def _switches_above(given: int | None, uplinks: int, lower: int, port_room: int, where: str) -> int:
    """Switches of the tier above (spines of a pod, or cores of a group) such that the
    ``uplinks`` of each of the ``lower`` switches divide evenly over them, and each has
    ``port_room`` ports for them: as given, else the fewest that fit."""
    if given is not None:
        if uplinks % given:
            raise spec_error(
                where,
                f"{uplinks} uplinks per switch do not divide evenly over {given} switches above",
            )
        if lower * (uplinks // given) > port_room:
            raise spec_error(
                where,
                f"{given} switches above would each need "
                f"{lower * (uplinks // given)} ports, more than {port_room}",
            )
        return given
    for above in range(1, uplinks + 1):
        if uplinks % above == 0 and lower * (uplinks // above) <= port_room:
            return above
    raise spec_error(
        where,
        f"{lower} switches with {uplinks} uplinks each cannot fit under switches "
        f"of {port_room} ports; add a tier",
    )


def _default_leaves_per_pod(ft: FatTree, rails: int, radix: int) -> int:
    """Half a radix of leaves per pod, whole rail sets when rail-optimized."""
    half = radix // 2
    if ft.rail_optimized and rails <= half:
        return (half // rails) * rails
    return half


def build_fat_tree(assembly: Assembly, ft: FatTree) -> None:
    """Make the switches of the fat tree ``ft`` and cable them and the trays' HCAs."""
    model = devices.switch_model(ft.switch)
    tray_ports = [[p for h in t.hcas for p in h.iter_ports()] for t in assembly.trays]  # rail order
    if not tray_ports:
        raise spec_error("trays", "a fat_tree needs at least one tray with HCAs")
    rails = len(tray_ports[0])
    for tray, ports in zip(assembly.trays, tray_ports, strict=False):
        if len(ports) != rails:
            raise spec_error(
                "trays",
                f"every tray of a fat_tree needs the same number of HCA "
                f"ports: {assembly.trays[0].host} has {rails}, {tray.host} has {len(ports)}",
            )
    shape = fat_tree_shape(ft, model, len(assembly.trays), rails)
    speed = rates.speed(ft.rate) if ft.rate else rates.speed(model.rate)
    width = rates.width(ft.width)
    # every count first, so that the LIDs are counted before any switch is made
    check_lid_budget(
        assembly.ca_ports,
        shape.switches,
        WHERE,
        extra_cas=shape.switches if ft.sharp and model.an_port else 0,
    )
    names = ft.names
    names_where = f"{WHERE}.names"
    assembly.fabric.adaptive_routing = ft.adaptive_routing

    leaves: list[Node] = []
    for group in range(shape.tray_groups):
        for rail in range(rails if ft.rail_optimized else 1):
            index = len(leaves)
            name = name_from_pattern(
                names.leaf, names_where, n=index + 1, i=index, rail=rail + 1, group=group + 1, pod=1
            )
            leaves.append(_new_switch(assembly, model, name, "leaf", 1, sharp=ft.sharp))
    trays_per_leaf = shape.trays_per_leaf
    for tray_index, ports in enumerate(tray_ports):
        group, slot = divmod(tray_index, trays_per_leaf)
        for rail, hca_port in enumerate(ports):
            if ft.rail_optimized:
                leaf, leaf_port = leaves[group * rails + rail], slot + 1
            else:
                leaf, leaf_port = leaves[group], slot * rails + rail + 1
            native = hca_port.node.hardware
            link_speed = (
                speed
                if native is None or ft.rate
                else rates.slower(speed, rates.speed(native.rate))
            )
            assembly.cable(leaf.port(leaf_port), hca_port, width, link_speed)
    if shape.tiers == 1:
        return

    spines_per_pod, leaves_per_pod = shape.spines_per_pod, shape.leaves_per_pod
    spines_by_pod: list[list[Node]] = []
    for pod in range(shape.pods):
        pod_spines = []
        for spine in range(spines_per_pod):
            index = pod * spines_per_pod + spine
            name = name_from_pattern(
                names.spine, names_where, n=index + 1, i=index, pod=pod + 1, group=spine + 1, rail=0
            )
            pod_spines.append(_new_switch(assembly, model, name, "spine", 2, sharp=ft.sharp))
        spines_by_pod.append(pod_spines)
        _cable_up(
            assembly,
            leaves[pod * leaves_per_pod : (pod + 1) * leaves_per_pod],
            pod_spines,
            shape.leaf_down,
            shape.links_per_leaf_spine,
            width,
            speed,
        )
    if shape.tiers == 2:
        return

    for group in range(spines_per_pod):
        cores = []
        for core in range(shape.cores_per_group):
            index = group * shape.cores_per_group + core
            name = name_from_pattern(
                names.core, names_where, n=index + 1, i=index, group=group + 1, pod=0, rail=0
            )
            cores.append(_new_switch(assembly, model, name, "core", 3, sharp=ft.sharp))
        _cable_up(
            assembly,
            [pod_spines[group] for pod_spines in spines_by_pod],
            cores,
            shape.spine_down,
            shape.links_per_spine_core,
            width,
            speed,
        )


def _new_switch(
    assembly: Assembly,
    model: devices.SwitchModel,
    name: str,
    role: str,
    tier: int,
    *,
    sharp: bool = False,
) -> Node:
    """A switch of the fat tree, with its SHARP Aggregation Node when ``sharp``."""
    if name in assembly.switch_by_name:
        raise spec_error(f"{WHERE}.names", f"two {role} switches are both named {name!r}")
    offsets = (devices.AN_GUID_OFFSET,) if sharp else ()
    guid = assembly.guids.allocate(assembly.spec.guids.switch_prefix, name, offsets=offsets)
    node = Node(
        NodeType.SWITCH,
        guid,
        model.nports,
        model.desc.format(name=name),
        vendid=model.vendid,
        devid=model.devid,
        revision=model.revision,
        name=name,
        role=role,
        tier=tier,
        hardware=model,
    )
    node.enhanced_port0 = model.enhanced_port0
    assembly.add(node, f"switch {name}")
    assembly.switch_by_name[name] = node
    if sharp and model.an_port:
        an = Node(
            NodeType.CA,
            guid + devices.AN_GUID_OFFSET,
            1,
            devices.AGGREGATION_NODE_DESC,
            vendid=devices.AGGREGATION_NODE.vendid,
            devid=devices.AGGREGATION_NODE.devid,
            sysimgguid=guid,
            name=f"{name}/AN",
            role="aggregation",
        )
        assembly.add(an, f"switch {name}")
        assembly.cable(
            node.port(model.an_port), an.port(1), rates.width(model.width), rates.speed(model.rate)
        )
    return node


def _cable_up(
    assembly: Assembly,
    lower: list[Node],
    upper: list[Node],
    first_up: int,
    links_per_pair: int,
    width: rates.Width,
    speed: rates.Speed,
) -> None:
    """Cable each lower switch's uplinks (ports first_up+1 …) ``links_per_pair`` at a time
    to each upper switch, upper ports running lower switch by lower switch."""
    for lower_index, low in enumerate(lower):
        uplink = 0
        for up in upper:
            for link in range(links_per_pair):
                assembly.cable(
                    low.port(first_up + uplink + 1),
                    up.port(lower_index * links_per_pair + link + 1),
                    width,
                    speed,
                )
                uplink += 1
