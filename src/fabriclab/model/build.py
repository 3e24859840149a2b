"""From a spec to a cluster: trays, GPUs, HCAs, switches, cables, GUIDs, LIDs, NVLink.

Generated fabrics are folded Clos networks ("fat trees"):

- Leaves (tier 1).  Trays are cut into groups of ``hosts_per_leaf``.  Rail-optimized,
  HCA port r of every tray in a group goes to the group's rail-r leaf; otherwise one
  leaf takes every HCA of its group.  Host ports are 1..D in tray order, uplinks follow
  at D+1..D+U.
- Spines (tier 2).  Two tiers: every leaf cables ``U/S`` links to each of S spines.
  Three tiers: leaves form pods of ``leaves_per_pod``; each pod has its own S spines.
  Leaf uplink j goes to spine j // k (k = links per leaf-spine pair), so a leaf's
  uplinks to one spine are adjacent, and spine ports run leaf by leaf.
- Cores (tier 3).  Spine s of every pod cables to core group s; each spine spreads its
  uplinks over the C cores of its group, core ports running pod by pod.

Everything is deterministic: the same spec builds the same cluster.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass

from ..errors import Problem, SpecError
from ..ib.ids import LID_MAX, LID_MIN, MAX_PORTS, NODE_DESC_BYTES, UNICAST_LIDS
from ..limits import NAME_MAX
from ..spec import hostlist
from ..spec.schema import CaSpec, Explicit, FatTree, HcaSpec, Spec, SwitchSpec, TrayGroup
from . import addressing
from ..ib import devices, rates
from .cluster import Cluster, Domain, Gpu, Tray
from .fabric import Fabric, FabricError, Node, Port
from ..ib.enums import NodeType
from ..ib.devices import mlnx_ext_port_info_supported
from .guids import GuidAllocator

# Domain UUIDs made up for laid-out NVLink domains are name-based (uuid5) in this space.
NVLINK_UUID_NAMESPACE = uuid.UUID("6b1f0c52-0d7e-4f0e-9d58-3f8a4c7e2b10")


def build(spec: Spec) -> Cluster:
    """Build the cluster a spec describes, or raise SpecError listing what is wrong."""
    b = _Builder(spec)
    return b.run()


@dataclass
class _Endpoint:
    tray: Tray
    port: Port


class _Builder:
    def __init__(self, spec: Spec):
        self.spec = spec
        self.fabric = Fabric()
        self.guids = GuidAllocator(spec.guids.scheme)
        self.trays: list[Tray] = []
        self.switch_by_name: dict[str, Node] = {}
        self.ca_by_name: dict[str, Node] = {}
        self.problems: list[Problem] = []
        self.where: dict[int, str] = {}  # id(node) -> the spec path it comes from
        self.ca_ports = 0  # end ports of CAs, counted before anything is built
        self.tray_by_host: dict[str, Tray] | None = None

    def fail(self, where: str, what: str) -> SpecError:
        return SpecError([Problem(where, what)])

    # --- driver ---------------------------------------------------------------------
    def run(self) -> Cluster:
        spec = self.spec
        self._check_size()
        self._reserve_explicit_guids()
        self._make_trays()
        try:
            if spec.fabric.fat_tree is not None:
                self._fat_tree(spec.fabric.fat_tree)
            else:
                self._explicit(spec.fabric.explicit)  # type: ignore[arg-type]
        except FabricError as e:
            raise self.fail("fabric", str(e)) from None
        assign_tiers(self.fabric)
        self._check_addresses()  # what the spec gives, before the plan fills in the rest
        self._assign_lids()
        self._check_addresses()
        domains = self._nvlink()
        return Cluster(spec.name, self.fabric, self.trays, domains, spec.description)

    # --- size -----------------------------------------------------------------------
    def _check_size(self) -> None:
        """Count end ports before building anything: every CA port and every switch needs
        one of the 49,151 unicast LIDs."""
        ports = 0
        for gi, group in enumerate(self.spec.trays):
            try:
                hosts = hostlist.count(group.hosts)
            except hostlist.HostlistError as e:
                raise self.fail(f"trays[{gi}].hosts", f"bad hostlist: {e}") from None
            per_tray = sum(h.ports for h in _hca_specs(group))
            ports += hosts * per_tray
        ex = self.spec.fabric.explicit
        switches = 0
        if ex is not None:
            ports += sum(c.ports for c in ex.cas)
            switches = len(ex.switches)
        self.ca_ports = ports
        self._check_lid_budget(switches, "trays" if self.spec.trays else "fabric")
        if ex is not None:
            room = sum((s.ports or devices.switch_model(s.model).nports) for s in ex.switches) + ports
            if 2 * len(ex.links) > room:
                raise self.fail("fabric.explicit.links", f"{len(ex.links)} links need {2 * len(ex.links)} "
                                f"ports, but the switches and CAs have {room}")

    def _check_lid_budget(self, switches: int, where: str, extra_cas: int = 0) -> None:
        need = self.ca_ports + extra_cas + switches
        if need > UNICAST_LIDS:
            parts = f"{self.ca_ports + extra_cas} CA ports" + (f" and {switches} switches" if switches else "")
            raise self.fail(where, f"{parts} need {need} LIDs, one each; a subnet has {UNICAST_LIDS} "
                            f"unicast LIDs (0x0001-0x{LID_MAX:04X}, IBA 4.1.3)")

    # --- GUIDs ----------------------------------------------------------------------
    def _reserve_explicit_guids(self) -> None:
        for gi, group in enumerate(self.spec.trays):
            if isinstance(group.hcas, list):
                for hi, h in enumerate(group.hcas):
                    if h.guid is not None:
                        self.guids.reserve(h.guid, h.name, f"trays[{gi}].hcas[{hi}].guid")
        ex = self.spec.fabric.explicit
        if ex is not None:
            for i, s in enumerate(ex.switches):
                if s.guid is not None:
                    self.guids.reserve(s.guid, s.name, f"fabric.explicit.switches[{i}].guid")
            for i, c in enumerate(ex.cas):
                if c.guid is not None:
                    self.guids.reserve(c.guid, c.name, f"fabric.explicit.cas[{i}].guid")

    # --- trays and HCAs -----------------------------------------------------------------
    def _make_trays(self) -> None:
        prefix = self.spec.guids.ca_prefix
        for gi, group in enumerate(self.spec.trays):
            hcas = _hca_specs(group)
            for host in group.host_names():
                tray = Tray(host)
                for hi, h in enumerate(hcas):
                    model = devices.ca_model(h.model)
                    desc = h.desc if h.desc is not None else f"{host} {h.name}"
                    if h.guid is not None:
                        guid = h.guid
                    else:
                        span = 1 if h.ports == 1 else h.ports + 1
                        guid = self.guids.allocate(prefix, f"{host} {h.name}", span=span)
                    node = Node(
                        NodeType.CA, guid, h.ports, desc,
                        vendid=h.vendid if h.vendid is not None else model.vendid,
                        devid=h.devid if h.devid is not None else model.devid,
                        sysimgguid=h.sysimgguid,
                        port_guid=h.port_guids[0] if h.port_guids else None,
                        name=f"{host}/{h.name}", role="hca", host=host, hca=h.name,
                        hardware=model,
                    )
                    if h.port_guids:
                        if len(h.port_guids) != h.ports:
                            raise self.fail(f"trays[{gi}].hcas[{hi}].port_guids",
                                            f"{len(h.port_guids)} GUIDs for {h.ports} ports")
                        for p, g in zip(node.iter_ports(), h.port_guids):
                            p.guid = g
                    if h.lids:
                        for p, lid in zip(node.iter_ports(), h.lids):
                            p.lid = lid
                    self._add(node, f"trays[{gi}].hcas[{hi}]" if isinstance(group.hcas, list)
                              else f"trays[{gi}]")
                    tray.hcas.append(node)
                for g in range(group.gpus):
                    tray.gpus.append(Gpu(tray, g))
                self.trays.append(tray)

    def _add(self, node: Node, where: str) -> Node:
        size = len(node.desc.encode())
        if size > NODE_DESC_BYTES:
            raise self.fail(where, f"description {node.desc[:40]!r}… is {size} bytes; a NodeDescription "
                            f"holds {NODE_DESC_BYTES} (IBA 14.2.5.2)")
        if not 1 <= node.nports <= MAX_PORTS:
            raise self.fail(where, f"{node.nports} ports; a node has 1-{MAX_PORTS}")
        try:
            self.fabric.add(node)
        except FabricError as e:
            raise self.fail(where, str(e)) from None
        self.where[id(node)] = where
        return node

    def _endpoints(self) -> list[list[Port]]:
        """Per tray, its HCA ports in rail order (HCA-major, then port)."""
        return [[p for h in t.hcas for p in h.iter_ports()] for t in self.trays]

    def _cable(self, a: Port, b: Port, width: rates.Width, speed: rates.Speed) -> None:
        """Cable two ports.  FDR10 is Mellanox's own rate, switched on through Mellanox
        ExtendedPortInfo: a link trains at FDR10 only when both ends speak it (the list
        libibnetdisc and opensm use), otherwise at QDR."""
        if speed.fdr10 and not (mlnx_ext_port_info_supported(a.node.vendid, a.node.devid)
                                and mlnx_ext_port_info_supported(b.node.vendid, b.node.devid)):
            speed = rates.SPEEDS["QDR"]
        self.fabric.connect(a, b, width, speed)

    # --- switches ---------------------------------------------------------------------
    def _new_switch(self, model: devices.SwitchModel, name: str, role: str, tier: int,
                    *, sharp: bool = False) -> Node:
        if name in self.switch_by_name:
            raise self.fail("fabric.fat_tree.names", f"two {role} switches are both named {name!r}")
        offsets = (devices.AN_GUID_OFFSET,) if sharp else ()
        guid = self.guids.allocate(self.spec.guids.switch_prefix, name, offsets=offsets)
        node = Node(NodeType.SWITCH, guid, model.nports, model.desc.format(name=name),
                    vendid=model.vendid, devid=model.devid, revision=model.revision,
                    name=name, role=role, tier=tier, hardware=model)
        node.enhanced_port0 = model.enhanced_port0
        self._add(node, f"switch {name}")
        self.switch_by_name[name] = node
        if sharp and model.an_port:
            an = Node(NodeType.CA, guid + devices.AN_GUID_OFFSET, 1, devices.AGGREGATION_NODE_DESC,
                      vendid=devices.AGGREGATION_NODE.vendid, devid=devices.AGGREGATION_NODE.devid,
                      sysimgguid=guid, name=f"{name}/AN", role="aggregation")
            self._add(an, f"switch {name}")
            self._cable(node.port(model.an_port), an.port(1),
                                rates.width(model.width), rates.speed(model.rate))
        return node

    # --- fat tree ---------------------------------------------------------------------
    def _fat_tree(self, ft: FatTree) -> None:
        where = "fabric.fat_tree"
        model = devices.switch_model(ft.switch)
        radix = model.radix
        eps = self._endpoints()
        if not eps:
            raise self.fail("trays", "a fat_tree needs at least one tray with HCAs")
        rails = len(eps[0])
        for t, e in zip(self.trays, eps):
            if len(e) != rails:
                raise self.fail("trays", f"every tray of a fat_tree needs the same number of HCA "
                                f"ports: {self.trays[0].host} has {rails}, {t.host} has {len(e)}")
        if rails == 0:
            raise self.fail("trays", "the trays have no HCAs")
        T = len(self.trays)

        # Host ports per leaf and leaf uplinks.
        per_host = 1 if ft.rail_optimized else rails
        if ft.hosts_per_leaf is not None:
            H = ft.hosts_per_leaf
        else:
            if ft.leaf_uplinks is not None:
                cap = radix - ft.leaf_uplinks
            elif ft.oversubscription is not None:
                cap = int(radix * ft.oversubscription / (ft.oversubscription + 1))
            else:
                cap = radix // 2
            H = max(1, min(T, cap // per_host))
        D = H * per_host
        if D > radix:
            raise self.fail(f"{where}.hosts_per_leaf",
                            f"more HCAs than leaf ports: {H} trays x {per_host} HCA ports = {D} "
                            f"host ports, but a {model.key} leaf has {radix}")
        groups = math.ceil(T / H)
        leaves_n = groups * (rails if ft.rail_optimized else 1)

        tiers = ft.tiers
        if tiers == "auto":
            tiers = 1 if leaves_n == 1 else (2 if self._fits_two(ft, leaves_n, D, radix) else 3)
        if tiers == 1:
            if leaves_n != 1:
                raise self.fail(f"{where}.tiers", f"1 tier is a single switch, but these trays "
                                f"need {leaves_n} leaves")
            U = 0
        else:
            U = self._leaf_uplinks(ft, D, radix, where)

        speed = self._link_speed(ft, model)
        width = rates.width(ft.width)

        # Every count first, so that the LIDs are counted before any switch is made.
        S = Lp = pods = C = k = k2 = spine_down = 0
        if tiers == 2:
            S = self._spine_count(ft.spines, U, leaves_n, radix, f"{where}.spines")
            k = U // S
            switches = leaves_n + S
        elif tiers == 3:
            Lp = ft.leaves_per_pod or self._default_leaves_per_pod(ft, rails, radix)
            pods = math.ceil(leaves_n / Lp)
            S = self._spine_count(ft.spines, U, Lp, radix // 2 if ft.spine_uplinks is None else
                                  radix - ft.spine_uplinks, f"{where}.spines")
            k = U // S
            spine_down = Lp * k
            U2 = ft.spine_uplinks if ft.spine_uplinks is not None else spine_down
            if spine_down + U2 > radix:
                raise self.fail(f"{where}.spine_uplinks", f"spines need {spine_down} down + {U2} up "
                                f"ports, but a {model.key} has {radix}")
            C = self._core_count(ft.cores_per_group, U2, pods, radix, f"{where}.cores_per_group")
            k2 = U2 // C
            switches = leaves_n + pods * S + S * C
        else:
            switches = leaves_n
        self._check_lid_budget(switches, where, extra_cas=switches if ft.sharp and model.an_port else 0)

        # Leaves.
        leaves: list[Node] = []
        for g in range(groups):
            for r in range(rails if ft.rail_optimized else 1):
                n = len(leaves)
                name = self._name(ft.names.leaf, where, n=n + 1, i=n, rail=r + 1, group=g + 1,
                                  pod=1)
                leaves.append(self._new_switch(model, name, "leaf", 1, sharp=ft.sharp))
        # Host cables.
        for t, ports in enumerate(eps):
            g, slot = divmod(t, H)
            for r, hp in enumerate(ports):
                if ft.rail_optimized:
                    leaf, lp = leaves[g * rails + r], slot + 1
                else:
                    leaf, lp = leaves[g], slot * rails + r + 1
                native = hp.node.hardware
                s = speed if native is None or ft.rate else rates.slower(speed, rates.speed(native.rate))
                self._cable(leaf.port(lp), hp, width, s)

        if tiers == 1:
            return
        if tiers == 2:
            spines = [self._new_switch(model, self._name(ft.names.spine, where, n=s + 1, i=s,
                                                         pod=1, group=s + 1, rail=0),
                                       "spine", 2, sharp=ft.sharp) for s in range(S)]
            self._cable_up(leaves, spines, D, k, width, speed)
            return

        # Three tiers: pods.
        spines_by_pod: list[list[Node]] = []
        for p in range(pods):
            pod_spines = []
            for s in range(S):
                n = p * S + s
                name = self._name(ft.names.spine, where, n=n + 1, i=n, pod=p + 1, group=s + 1, rail=0)
                pod_spines.append(self._new_switch(model, name, "spine", 2, sharp=ft.sharp))
            spines_by_pod.append(pod_spines)
            self._cable_up(leaves[p * Lp:(p + 1) * Lp], pod_spines, D, k, width, speed)
        for g in range(S):
            cores = []
            for c in range(C):
                n = g * C + c
                name = self._name(ft.names.core, where, n=n + 1, i=n, group=g + 1, pod=0, rail=0)
                cores.append(self._new_switch(model, name, "core", 3, sharp=ft.sharp))
            self._cable_up([spines_by_pod[p][g] for p in range(pods)], cores, spine_down, k2,
                           width, speed)

    def _cable_up(self, lower: list[Node], upper: list[Node], first_up: int, k: int,
                  width, speed) -> None:
        """Cable each lower switch's uplinks (ports first_up+1 …) k at a time to each upper
        switch, upper ports running lower switch by lower switch."""
        for li, low in enumerate(lower):
            j = 0
            for ui, up in enumerate(upper):
                for x in range(k):
                    self._cable(low.port(first_up + j + 1), up.port(li * k + x + 1),
                                        width, speed)
                    j += 1

    def _fits_two(self, ft: FatTree, leaves_n: int, D: int, radix: int) -> bool:
        try:
            U = self._leaf_uplinks(ft, D, radix, "")
            self._spine_count(ft.spines, U, leaves_n, radix, "")
            return True
        except SpecError:
            return False

    def _leaf_uplinks(self, ft: FatTree, D: int, radix: int, where: str) -> int:
        if ft.leaf_uplinks is not None:
            U = ft.leaf_uplinks
        elif ft.oversubscription is not None:
            U = math.ceil(D / ft.oversubscription)
        else:
            U = D
        if U < 1:
            raise self.fail(f"{where}.leaf_uplinks", "a multi-tier fabric needs leaf uplinks")
        if D + U > radix:
            hint = "" if ft.leaf_uplinks is not None else " (set oversubscription or leaf_uplinks)"
            raise self.fail(f"{where}.leaf_uplinks",
                            f"leaves need {D} host + {U} uplink ports, but the switch has {radix}{hint}")
        return U

    def _spine_count(self, given: int | None, U: int, lower: int, cap: int, where: str) -> int:
        """Spines (or cores) such that U uplinks divide evenly and each fits ``cap`` ports."""
        if given is not None:
            if U % given:
                raise self.fail(where, f"{U} uplinks per switch do not divide evenly over {given} "
                                f"switches above")
            if lower * (U // given) > cap:
                raise self.fail(where, f"{given} switches above would each need "
                                f"{lower * (U // given)} ports, more than {cap}")
            return given
        for s in range(1, U + 1):
            if U % s == 0 and lower * (U // s) <= cap:
                return s
        raise self.fail(where, f"{lower} switches with {U} uplinks each cannot fit under switches "
                        f"of {cap} ports; add a tier")

    def _core_count(self, given, U2, pods, radix, where) -> int:
        return self._spine_count(given, U2, pods, radix, where)

    def _default_leaves_per_pod(self, ft: FatTree, rails: int, radix: int) -> int:
        per = radix // 2
        if ft.rail_optimized and rails <= per:
            return (per // rails) * rails
        return per

    def _link_speed(self, ft: FatTree, model: devices.SwitchModel) -> rates.Speed:
        return rates.speed(ft.rate) if ft.rate else rates.speed(model.rate)

    def _name(self, pattern: str, where: str, **fields) -> str:
        # the schema has bounded every width and precision in the pattern (check_pattern)
        try:
            name = pattern.format(**fields)
        except (KeyError, IndexError, ValueError, TypeError, OverflowError, AttributeError) as e:
            raise self.fail(f"{where}.names" if where != "nvlink" else "nvlink.name",
                            f"bad name pattern {pattern!r}: {e}") from None
        if len(name) > NAME_MAX:
            raise self.fail(f"{where}.names" if where != "nvlink" else "nvlink.name",
                            f"pattern {pattern!r} makes the {len(name)}-character name {name[:30]!r}…; "
                            f"a name has at most {NAME_MAX}")
        return name

    # --- explicit ---------------------------------------------------------------------
    def _explicit(self, ex: Explicit) -> None:
        base = "fabric.explicit"
        for i, s in enumerate(ex.switches):
            self._explicit_switch(s, f"{base}.switches[{i}]")
        for i, c in enumerate(ex.cas):
            self._explicit_ca(c, f"{base}.cas[{i}]")
        default_w, default_s = rates.width(ex.width), rates.speed(ex.rate)
        for i, link in enumerate(ex.links):
            where = f"{base}.links[{i}]"
            a = self._endpoint(link.a, link.a_port, where)
            b = self._endpoint(link.b, link.b_port, where)
            w = rates.width_or_unknown(link.width) if link.width else default_w
            s = rates.speed_or_unknown(link.speed) if link.speed else default_s
            try:
                self._cable(a, b, w, s)
            except FabricError as e:
                raise self.fail(where, str(e)) from None

    def _explicit_switch(self, s: SwitchSpec, where: str) -> None:
        if s.name in self.switch_by_name or s.name in self.ca_by_name:
            raise self.fail(f"{where}.name", f"name {s.name!r} appears twice")
        model = devices.switch_model(s.model)
        guid = s.guid if s.guid is not None else self.guids.allocate(self.spec.guids.switch_prefix, s.name)
        node = Node(NodeType.SWITCH, guid, s.ports or model.nports,
                    s.desc if s.desc is not None else model.desc.format(name=s.name),
                    vendid=s.vendid if s.vendid is not None else model.vendid,
                    devid=s.devid if s.devid is not None else model.devid,
                    revision=model.revision, sysimgguid=s.sysimgguid, port_guid=s.port_guid,
                    name=s.name,
                    role="switch", tier=s.tier or 0)
        node.enhanced_port0 = model.enhanced_port0 if s.enhanced_port0 is None else s.enhanced_port0
        node.lid = s.lid or 0
        node.lmc = s.lmc
        self._add(node, where)
        self.switch_by_name[s.name] = node

    def _explicit_ca(self, c: CaSpec, where: str) -> None:
        if c.name in self.switch_by_name or c.name in self.ca_by_name:
            raise self.fail(f"{where}.name", f"name {c.name!r} appears twice")
        guid = c.guid if c.guid is not None else self.guids.allocate(
            self.spec.guids.ca_prefix, c.name, span=1 if c.ports == 1 else c.ports + 1)
        ntype = NodeType.ROUTER if c.type == "router" else NodeType.CA
        node = Node(ntype, guid, c.ports, c.desc, vendid=c.vendid, devid=c.devid,
                    sysimgguid=c.sysimgguid,
                    port_guid=c.port_guids[0] if c.port_guids else None,
                    name=c.name, role="aggregation" if c.desc == devices.AGGREGATION_NODE_DESC else "ca")
        if c.port_guids:
            if len(c.port_guids) != c.ports:
                raise self.fail(f"{where}.port_guids", f"{len(c.port_guids)} GUIDs for {c.ports} ports")
            for p, g in zip(node.iter_ports(), c.port_guids):
                p.guid = g
        if c.lids:
            for p, lid in zip(node.iter_ports(), c.lids):
                p.lid = lid
        self._add(node, where)
        self.ca_by_name[c.name] = node

    def _endpoint(self, name: str, port: int, where: str) -> Port:
        node = self.switch_by_name.get(name) or self.ca_by_name.get(name)
        if node is None and "/" in name:
            host, hca = name.split("/", 1)
            if self.tray_by_host is None or len(self.tray_by_host) != len(self.trays):
                self.tray_by_host = {t.host: t for t in self.trays}
            tray = self.tray_by_host.get(host)
            node = tray.hca(hca) if tray else None
        if node is None:
            raise self.fail(where, f"no switch, tray HCA or CA named {name!r}")
        if not (1 <= port <= node.nports):
            raise self.fail(where, f"{name} has ports 1-{node.nports}, not {port}")
        return node.port(port)

    # --- LIDs -------------------------------------------------------------------------
    def _check_addresses(self) -> None:
        found = addressing.problems(self.fabric)
        if found:
            out = []
            for a in found:
                where = self.where.get(id(a.node), "fabric")
                if a.kind == "lid":
                    where += ".lids" if a.port is not None else ".lid"
                elif a.kind == "guid":
                    where += ".port_guids" if a.port is not None else ".guid"
                out.append(Problem(where, a.what))
            raise SpecError(out)

    def _assign_lids(self) -> None:
        plan = self.spec.lids
        used: dict[int, str] = {}
        for n in self.fabric.nodes:
            if n.is_switch and n.lid:
                for lid in range(n.lid, n.lid + (1 << n.lmc)):
                    used[lid] = n.desc
            elif not n.is_switch:
                for p in n.iter_ports():
                    if p.lid:
                        for lid in range(p.lid, p.lid + (1 << p.lmc)):
                            used[lid] = n.desc
        switches = sorted((n for n in self.fabric.nodes if n.is_switch and not n.lid),
                          key=lambda n: -n.tier)  # stable: top tier first, then build order
        lid = plan.switch_base
        for n in switches:
            while lid in used:
                lid += 1
            if lid > LID_MAX:
                raise self.fail("lids.switch_base", f"from LID {plan.switch_base}, the switches run "
                                f"past the last unicast LID {LID_MAX} (0x{LID_MAX:X})")
            n.lid = lid
            used[lid] = n.desc
            lid += 1
        nsw = len(self.fabric.switches())
        base = plan.ca_base if plan.ca_base is not None else max(100, (plan.switch_base + nsw + 99) // 100 * 100)
        lid = base
        # tray HCAs in tray order, then the other CAs in build order
        order = [h for t in self.trays for h in t.hcas]
        seen = {id(h) for h in order}
        order += [n for n in self.fabric.nodes if not n.is_switch and id(n) not in seen]
        wrapped = False
        for n in order:
            for p in n.iter_ports():
                if p.lid:
                    continue
                while lid in used:
                    lid += 1
                if lid > LID_MAX and plan.ca_base is None and not wrapped:
                    # the default base left LIDs below it free; a fabric that fits the
                    # unicast range (counted before building) fits there
                    lid, wrapped = LID_MIN, True
                    while lid in used:
                        lid += 1
                if lid > LID_MAX:
                    raise self.fail("lids", f"from LID {base}, the CA ports run past the last unicast "
                                    f"LID {LID_MAX} (0x{LID_MAX:X})")
                p.lid = lid
                used[lid] = n.desc
                lid += 1

    # --- NVLink -------------------------------------------------------------------------
    def _nvlink(self) -> list[Domain]:
        nv = self.spec.nvlink
        if nv is None:
            return []
        by_host = {t.host: t for t in self.trays}
        domains: list[Domain] = []
        if nv.trays_per_domain:
            for d, start in enumerate(range(0, len(self.trays), nv.trays_per_domain)):
                name = self._name(nv.name, "nvlink", n=d + 1, i=d)
                dom = Domain(name, str(uuid.uuid5(NVLINK_UUID_NAMESPACE, f"{self.spec.name}/{name}")),
                             nv.clique, True, self.trays[start:start + nv.trays_per_domain])
                domains.append(dom)
        owner: dict[str, str] = {}
        for di, ds in enumerate(nv.domains):
            where = f"nvlink.domains[{di}]"
            trays = []
            try:
                names = hostlist.expand(ds.trays)
            except hostlist.HostlistError as e:
                raise self.fail(f"{where}.trays", f"bad hostlist: {e}") from None
            for h in names:
                if h not in by_host:
                    raise self.fail(f"{where}.trays", f"tray {h!r} is not in trays")
                if h in owner:
                    raise self.fail(f"{where}.trays", f"tray {h!r} is already in domain {owner[h]!r}")
                owner[h] = ds.name
                trays.append(by_host[h])
            members = {id(t) for t in trays}
            cu = ds.cluster_uuid or str(uuid.uuid5(NVLINK_UUID_NAMESPACE, f"{self.spec.name}/{ds.name}"))
            dom = Domain(ds.name, cu, ds.clique, ds.default_partition, trays)
            domains.append(dom)
            for pi, part in enumerate(ds.partitions):
                pw = f"{where}.partitions[{pi}]"
                if ds.default_partition and part.id == ds.clique:
                    raise self.fail(f"{pw}.id", f"partition id {part.id} is the default "
                                    f"partition's clique; user partitions need another id")
                if part.id in dom.partitions:
                    raise self.fail(f"{pw}.id", f"partition id {part.id} appears twice")
                dom.partitions[part.id] = []
                for gpu in self._partition_gpus(part.gpus, by_host, f"{pw}.gpus"):
                    if id(gpu.tray) not in members:
                        raise self.fail(f"{pw}.gpus", f"{gpu.tray.host} GPU {gpu.index} is not in "
                                        f"domain {ds.name!r}")
                    if gpu.partition is not None:
                        raise self.fail(f"{pw}.gpus", f"{gpu.tray.host} GPU {gpu.index} is already "
                                        f"in partition {gpu.partition}")
                    gpu.partition = part.id
                    dom.partitions[part.id].append(gpu)
        for dom in domains:
            for t in dom.trays:
                for g in t.gpus:
                    g.domain = dom
        return domains

    def _partition_gpus(self, text: str, by_host: dict[str, Tray], where: str) -> list[Gpu]:
        out: list[Gpu] = []
        try:
            terms = hostlist.split_terms(text)
        except hostlist.HostlistError as e:
            raise self.fail(where, f"bad GPU list: {e}") from None
        for term in terms:
            hosts_part, _, gpus_part = term.partition(":")
            try:
                hosts = hostlist.expand(hosts_part)
            except hostlist.HostlistError as e:
                raise self.fail(where, f"bad GPU list {text!r}: {e}") from None
            for h in hosts:
                tray = by_host.get(h)
                if tray is None:
                    raise self.fail(where, f"tray {h!r} is not in trays")
                if gpus_part:
                    idx = _index_set(gpus_part, where, self, h, len(tray.gpus))
                    for i in idx:
                        if i >= len(tray.gpus):
                            raise self.fail(where, f"{h} has {len(tray.gpus)} GPUs, no GPU {i}")
                        out.append(tray.gpus[i])
                else:
                    out.extend(tray.gpus)
        return out


def _index_set(text: str, where: str, b: _Builder, host: str, gpus: int) -> list[int]:
    """GPU indices ``0-1,3``: each checked against the tray's ``gpus`` before any range
    is expanded."""
    out = []
    for part in text.strip("[]").split(","):
        lo, _, hi = part.partition("-")
        lo, hi = lo.strip(), (hi or lo).strip()
        if not (lo.isdigit() and hi.isdigit() and len(lo) <= 4 and len(hi) <= 4):
            raise b.fail(where, f"bad GPU index {part[:40]!r}")
        lo_i, hi_i = int(lo), int(hi)
        if lo_i > hi_i:
            raise b.fail(where, f"GPU range {part!r} runs backwards")
        if hi_i >= gpus:
            raise b.fail(where, f"{host} has {gpus} GPUs, no GPU {max(lo_i, gpus)}")
        out.extend(range(lo_i, hi_i + 1))
    return out


def _hca_specs(group: TrayGroup) -> list[HcaSpec]:
    if isinstance(group.hcas, list):
        return group.hcas
    return [HcaSpec(name=f"mlx5_{i}", model=group.hca_model, ports=group.hca_ports)
            for i in range(group.hcas)]


def assign_tiers(fabric: Fabric) -> None:
    """Give switches without a tier one by distance from the end nodes: a switch cabled to
    a (non-aggregation) CA is tier 1, its other neighbours tier 2, and so on."""
    pending = [n for n in fabric.nodes if n.is_switch and not n.tier]
    if not pending:
        return
    frontier = []
    for n in pending:
        if any(p.peer is not None and not p.peer.node.is_switch and p.peer.node.role != "aggregation"
               for p in n.iter_ports()):
            n.tier = 1
            frontier.append(n)
    level = 1
    while frontier:
        level += 1
        nxt = []
        for n in frontier:
            for p in n.iter_ports():
                q = p.peer
                if q is not None and q.node.is_switch and not q.node.tier:
                    q.node.tier = level
                    nxt.append(q.node)
        frontier = nxt
    for n in pending:
        if not n.tier:
            n.tier = 1
        if n.role in ("", "switch"):
            n.role = {1: "leaf", 2: "spine", 3: "core"}.get(n.tier, f"tier-{n.tier}")
