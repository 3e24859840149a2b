"""The InfiniBand providers: the inputs (ibnetdiscover dumps and nvidia-smi answers, or
the fabric parsed from them) turned into a topology graph.

Two ways to read them:

``compat_graph`` is topograph's ``infiniband-bm`` provider, quirks included: its regex
parser (switch-side cables only, a switch block ends at a blank line, factory-described
HCAs dropped), its tree building (a leaf whose nodes were not requested climbs to the
top), its merge of switches with identical children, and its NVLink domain rule (a host
whose GPUs disagree, or answer N/A, fails the whole request).

``fabric_graph`` is fabriclab's own reading, from a parsed fabric:
- nodes are grouped by the *set* of leaves their HCAs reach, and groups by the set of
  switches one tier up, and so on: rail-optimized nodes whose rails reach different
  leaves still form a tree (topograph reports "topology must be a tree");
- a CA whose description is not "<host> <hca>" is reported with its GUID and the port
  it hangs on instead of being dropped silently;
- leaves with no requested node are not walked, so they never become a phantom tier;
- ``names=True`` uses switch names (``LAB-IBLEAF-01``) where they are unique;
- a host whose GPUs disagree is reported per GPU and left out of the domains only;
- the graph asks engines for blocks in fabric-proximity order (``blocks_by_proximity``).
"""

from __future__ import annotations

import re

from ...formats.nvidia_smi import SmiAnswers, topograph_partition
from ...ib.enums import NodeType
from ...model.cluster import ZERO_UUID, host_and_hca
from ...model.fabric import Fabric, Node
from ...model.tiers import switch_tiers
from ..errors import TopologyProblem
from ..graph import NO_TOPOLOGY, DomainMap, Graph, HostInfo, Vertex
from ..report import Report


class ProviderError(TopologyProblem):
    """Nothing can be produced (topograph answers such requests with HTTP 500)."""


# --- topograph compatibility -------------------------------------------------------------

_WS = r"[ \t\n\f\r]"  # Go's \s
_RE_EMPTY = re.compile(rf"^{_WS}*$")
_RE_HCA = re.compile(rf'^Ca{_WS}+\d+{_WS}+"([^"]+)"{_WS}+# "([^"]+)"')
_RE_SWITCH = re.compile(rf'^Switch{_WS}+\d+{_WS}+"([^"]+)"{_WS}+# "([^"]+)"')
_RE_CONN = re.compile(rf'^\[\d+\]{_WS}+"([^"]+)"\[\d+\](\([0-9a-f]+\))?{_WS}+# "([^"]+)"')
_RE_NODE_NAME = re.compile(r"^(\S+)[ \t\n\f\r](\S+)$")


def topograph_parse(text: str) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
    """topograph's ``ParseIbnetdiscoverFile``: switch id -> {connected id: description},
    and CA id -> host name (only for two-word descriptions)."""
    switches: dict[str, dict[str, str]] = {}
    hca: dict[str, str] = {}
    entry: tuple[str, dict[str, str]] | None = None
    for line in text.split("\n"):
        line = line.rstrip("\r")
        if line.startswith("#"):
            continue
        if _RE_EMPTY.match(line):
            if entry is not None:
                switches[entry[0]] = entry[1]
                entry = None
            continue
        m = _RE_HCA.match(line)
        if m:
            n = _RE_NODE_NAME.match(m.group(2))
            if n:
                hca[m.group(1)] = n.group(1)
            continue
        m = _RE_SWITCH.match(line)
        if m:
            entry = (m.group(1), {})
            continue
        m = _RE_CONN.match(line)
        if m and entry is not None:
            entry[1][m.group(1)] = m.group(3)
    return switches, hca


def _topograph_tree(
    switches: dict[str, dict[str, str]], hca: dict[str, str], requested: set[str]
) -> list[Vertex]:
    """topograph's ``buildTree``: leaves hold requested nodes, each round adds the
    switches cabled to the previous round, only the last round is returned."""
    conns = {s: dict(c) for s, c in switches.items()}
    placed: dict[str, Vertex] = {}
    level: dict[str, Vertex] = {}
    for sid in sorted(conns):
        nodes = {}
        for cid in list(conns[sid]):
            if cid in hca:
                name = hca[cid]
                if name and name in requested:
                    nodes[cid] = name
                del conns[sid][cid]
        if nodes:
            v = Vertex(sid)
            for name in nodes.values():
                v.vertices[name] = Vertex(name, name)
            placed[sid] = level[sid] = v
            conns[sid] = {}
    while True:
        upper: dict[str, Vertex] = {}
        for sid in sorted(conns):
            if sid in placed:
                continue
            children = {c: level[c] for c in conns[sid] if c in level}
            if children:
                v = Vertex(sid)
                v.vertices.update(children)
                placed[sid] = upper[sid] = v
                conns[sid] = {}
        if not upper:
            break
        level = upper
    return list(level.values())


class _Merger:
    """topograph's ``topology.Merger``: tier by tier from the nodes up, vertices whose
    (merged) children are the same set become the first of them in traversal order."""

    def __init__(self, top: list[Vertex]):
        self.tiers: list[list[Vertex]] = []
        self.nodes: dict[str, Vertex] = {}
        self.refs: dict[str, Vertex] = {}
        if top:
            self._traverse(sorted(top, key=lambda v: v.id))

    def _traverse(self, layer: list[Vertex]) -> None:
        visited = set()
        leaf = False
        for v in layer:
            visited.add(v.id)
            if not v.vertices:
                leaf = True
                self.nodes[v.id] = v
        if not leaf:
            nxt = []
            for v in layer:
                for k in sorted(v.vertices):
                    if k not in visited:
                        visited.add(k)
                        nxt.append(v.vertices[k])
            self._traverse(nxt)
        self.tiers.append(layer)

    def merge(self) -> None:
        for i in range(1, len(self.tiers)):
            self.tiers[i] = self._merge_layer(self.tiers[i])

    def _merge_layer(self, layer: list[Vertex]) -> list[Vertex]:
        filters: list[tuple[list[str], str]] = []
        result = []
        for v in layer:
            ids = {self.refs[k].id if k in self.refs else k for k in v.vertices}
            sig = sorted(ids)
            for fsig, fid in filters:
                if fsig == sig:
                    self.refs[v.id] = self.nodes[fid]
                    break
            else:
                filters.append((sig, v.id))
                merged = Vertex(v.id, v.name)
                for k in sig:
                    merged.vertices[k] = self.nodes[k]
                self.nodes[v.id] = merged
                result.append(merged)
        return result

    def top(self) -> list[Vertex]:
        return self.tiers[-1] if self.tiers else []


def compat_graph(dumps: list[str], requested: list[str], smi: SmiAnswers | None) -> Graph:
    """topograph's graph for these ibnetdiscover outputs, requested nodes and nvidia-smi
    answers.  Raises ProviderError where topograph fails the request."""
    req = set(requested)
    roots: dict[str, Vertex] = {}
    for text in dumps:
        if "Topology file:" not in text:
            continue
        switches, hca = topograph_parse(text)
        m = _Merger(_topograph_tree(switches, hca, req))
        m.merge()
        for v in m.top():
            roots[v.id] = v
    root = Vertex()
    for v in _Merger(list(roots.values())).top():
        root.vertices[v.id] = v
    domains = DomainMap()
    if smi is not None:
        for host in requested:
            out = smi.raw.get(host, "").strip()
            if not out:
                continue
            try:
                dom = topograph_partition(out)
            except ValueError as e:
                raise ProviderError(
                    f"failed to discover accelerator domains: invalid nvidia-smi "
                    f'output for node "{host}": {e}'
                ) from None
            domains.add(HostInfo(dom, host, host))
    return Graph(root, domains)


# --- fabriclab's reading ------------------------------------------------------------------

_SWITCH_NAME = re.compile(r"^[^;:]+;([A-Za-z0-9._-]+):[^;:]+$")


def hosts_of(fabric: Fabric, report: Report | None = None) -> dict[str, list[Node]]:
    """Host name -> its CAs, from "<host> <hca>" descriptions.  Other CAs are reported;
    Aggregation Nodes (part of their switch) and routers are skipped quietly."""
    out: dict[str, list[Node]] = {}
    for n in fabric.cas():
        parts = host_and_hca(n.desc)
        if parts:
            out.setdefault(parts[0], []).append(n)
        elif (
            report is not None
            and n.type == NodeType.CA
            and n.desc != "Mellanox Technologies Aggregation Node"
        ):
            where = (
                ", ".join(
                    f"{p.peer.node.desc or p.peer.node.label} port {p.peer.num}"
                    for p in n.iter_ports()
                    if p.peer is not None
                )
                or "no switch"
            )
            report.warn(
                f"CA 0x{n.guid:016x}",
                f'description "{n.desc}" names no host; it hangs on {where} and is left out',
            )
    return out


def switch_label(n: Node, names: bool, unique: set[str]) -> str:
    if names:
        m = _SWITCH_NAME.match(n.desc)
        if m and m.group(1) in unique:
            return m.group(1)
    return n.label


def fabric_graph(
    fabric: Fabric,
    requested: list[str] | None,
    smi: SmiAnswers | None,
    *,
    names: bool = False,
    report: Report | None = None,
    domains: DomainMap | None = None,
) -> Graph:
    """fabriclab's topology graph of a fabric (see the module docstring)."""
    report = report or Report()
    hosts = hosts_of(fabric, report)
    wanted = list(hosts) if requested is None else list(requested)
    missing = [h for h in wanted if h not in hosts]
    for h in missing:
        report.warn(
            h, "not in the fabric (no CA describes itself as this host); listed under no-topology"
        )
    # tiers from every host, requested or not, so a leaf whose nodes were not asked
    # for is still a leaf and never looks like a tier above the spines
    tier = switch_tiers(fabric.switches(), {id(c) for cas in hosts.values() for c in cas})
    counts: dict[str, int] = {}
    for n in fabric.switches():
        m = _SWITCH_NAME.match(n.desc)
        if m:
            counts[m.group(1)] = counts.get(m.group(1), 0) + 1
    unique = {k for k, v in counts.items() if v == 1}

    # groups at the lowest level: hosts with the same set of leaves
    groups: dict[frozenset, list[str]] = {}
    for h in wanted:
        if h not in hosts:
            continue
        leaves = frozenset(
            id(p.peer.node)
            for c in hosts[h]
            for p in c.iter_ports()
            if p.peer is not None and p.peer.node.is_switch
        )
        if not leaves:
            report.warn(h, "its HCAs are not cabled to any switch; listed under no-topology")
            missing.append(h)
            continue
        groups.setdefault(leaves, []).append(h)
    by_id = {id(n): n for n in fabric.switches()}

    rank = _traversal_rank(groups, by_id, tier)
    used: dict[str, int] = {}

    def vertex_for(members: frozenset) -> Vertex:
        """A group of switches acts as one and is named after its first member, as
        topograph names switches it merges; where two groups would share a name (which
        topograph cannot express), the later ones get ``-2``, ``-3`` …"""
        first = by_id[min(members, key=lambda i: rank.get(i, (1 << 30, by_id[i].label)))]
        rep = switch_label(first, names, unique)
        k = used.get(rep, 0)
        used[rep] = k + 1
        return Vertex(rep if k == 0 else f"{rep}-{k + 1}")

    def order(s: frozenset):
        return sorted(by_id[i].label for i in s)

    current: dict[frozenset, Vertex] = {}
    for members in sorted(groups, key=order):
        v = vertex_for(members)
        for h in sorted(groups[members]):
            v.vertices[h] = Vertex(h, h)
        current[members] = v
    finished: list[Vertex] = []
    level = 1
    while current:
        up: dict[frozenset, list[frozenset]] = {}
        for members in current:
            above = frozenset(
                id(p.peer.node)
                for i in members
                for p in by_id[i].iter_ports()
                if p.peer is not None
                and p.peer.node.is_switch
                and tier.get(id(p.peer.node)) == level + 1
            )
            if above:
                up.setdefault(above, []).append(members)
            else:
                finished.append(current[members])  # nothing above: a root
        nxt: dict[frozenset, Vertex] = {}
        for above in sorted(up, key=order):
            v = vertex_for(above)
            for child in up[above]:
                cv = current[child]
                v.vertices[cv.id] = cv
            nxt[above] = v
        current = nxt
        level += 1
    root = Vertex()
    for v in finished:
        root.vertices[v.id] = v
    if missing:
        nt = Vertex(NO_TOPOLOGY)
        for h in missing:
            nt.vertices[h] = Vertex(h, h)
        root.vertices[NO_TOPOLOGY] = nt
    if domains is None and smi is not None:
        domains = smi_domains(smi, wanted, report)
    return Graph(root, domains, blocks_by_proximity=True)


def _traversal_rank(
    groups: dict[frozenset, list[str]], by_id: dict[int, Node], tier: dict[int, int]
) -> dict[int, tuple[int, str]]:
    """The order in which topograph's merger meets each switch: top tier first (sorted by
    id), then tier by tier down, each switch's lower neighbours in id order.  The first
    switch met of a group of identical ones is the one topograph keeps, so naming groups
    after it gives topograph's own answer wherever topograph has one."""
    level = set().union(*groups) if groups else set()
    levels = []
    placed = set(level)
    t = 1
    while level:
        levels.append(level)
        up = {
            id(p.peer.node)
            for i in level
            for p in by_id[i].iter_ports()
            if p.peer is not None and p.peer.node.is_switch and tier.get(id(p.peer.node)) == t + 1
        }
        level = up - placed
        placed |= level
        t += 1
    rank: dict[int, tuple[int, str]] = {}
    if not levels:
        return rank
    layer = sorted(levels[-1], key=lambda i: by_id[i].label)
    n = 0
    for below in [*list(reversed(levels[:-1])), set()]:
        visited = set(layer)
        nxt = []
        for i in layer:
            rank[i] = (n, by_id[i].label)
            n += 1
            children = {
                id(p.peer.node)
                for p in by_id[i].iter_ports()
                if p.peer is not None and id(p.peer.node) in below
            }
            for c in sorted(children, key=lambda c: by_id[c].label):
                if c not in visited:
                    visited.add(c)
                    nxt.append(c)
        layer = nxt
    return rank


def smi_domains(smi: SmiAnswers, hosts: list[str], report: Report) -> DomainMap:
    """NVLink domains from nvidia-smi answers: a host's GPUs must agree on one
    ``<uuid>.<clique>``; a host that disagrees is reported GPU by GPU and left out.
    A GPU outside any multi-node NVLink domain (all-zero cluster UUID, or clique 0,
    "a partition of one") puts its host in no domain."""
    for p in smi.problems:
        report.problems.append(p)
        report.left_out = True
    domains = DomainMap()
    for h in hosts:
        gpus = smi.hosts.get(h)
        if not gpus:
            report.warn(h, f"no nvidia-smi answer in {smi.source}; not in any NVLink domain")
            continue
        bad = [
            g
            for g in gpus
            if g.cluster_uuid in ("", "N/A", "[N/A]") or g.clique in ("", "N/A", "[N/A]")
        ]
        for g in bad:
            report.warn(
                f"{smi.source}:{g.line}",
                f"{h} GPU {g.gpu}: ClusterUUID {g.cluster_uuid or '(empty)'}, "
                f"CliqueId {g.clique or '(empty)'}",
            )
        if bad:
            continue
        doms = {(g.cluster_uuid, g.clique) for g in gpus}
        if len(doms) > 1:
            detail = "; ".join(f"GPU {g.gpu} {g.cluster_uuid}.{g.clique}" for g in gpus)
            report.warn(
                h, f"GPUs disagree on the NVLink partition ({detail}); left out of the domains"
            )
            continue
        cu, cl = doms.pop()
        if cu == ZERO_UUID or cl == "0":
            continue
        domains.add(HostInfo(f"{cu}.{cl}", h, h))
    return domains
