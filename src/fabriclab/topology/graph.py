"""The scheduler-neutral topology graph every provider builds and every engine reads.

It has the same shape as NVIDIA topograph's canonical graph, so that fabriclab's
engines produce topograph's outputs for the same input:

- ``tiers``: a tree under a hidden root (id ""), switches as inner vertices and compute
  nodes as leaves (id = instance id, name = host name);
- ``domains``: accelerator (NVLink) domain -> host name -> HostInfo.

Vertex children are kept in dicts keyed by child id; engines sort where topograph sorts
and otherwise follow insertion order, which providers make deterministic.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

NO_TOPOLOGY = "no-topology"


@dataclass(eq=False)
class Vertex:
    id: str = ""
    name: str = ""
    vertices: dict[str, "Vertex"] = field(default_factory=dict)

    @property
    def is_node(self) -> bool:
        return not self.vertices

    def add(self, child: "Vertex", key: str | None = None) -> "Vertex":
        self.vertices[child.id if key is None else key] = child
        return child

    def __repr__(self) -> str:
        return f"Vertex({self.id!r}, {self.name!r}, {len(self.vertices)} children)"


@dataclass
class HostInfo:
    domain: str
    instance_id: str
    host_name: str
    sub_domain: str = ""


class DomainMap(dict):
    """domain -> {host name -> HostInfo}."""

    def add(self, info: HostInfo) -> None:
        if not info.domain:
            return
        self.setdefault(info.domain, {})[info.host_name] = info

    def add_host(self, domain: str, instance: str, host: str, sub_domain: str = "") -> None:
        self.add(HostInfo(domain, instance, host, sub_domain))


@dataclass
class Graph:
    tiers: Vertex | None = None
    domains: DomainMap | None = None

    def nodes(self) -> list[Vertex]:
        """Compute-node vertices, breadth first."""
        out, queue, seen = [], [self.tiers] if self.tiers else [], set()
        while queue:
            v = queue.pop(0)
            if id(v) in seen:
                continue
            seen.add(id(v))
            if v.is_node and v is not self.tiers:
                out.append(v)
            queue.extend(v.vertices[k] for k in sorted(v.vertices))
        return out


@dataclass
class InstanceTopology:
    """One compute instance and its switches, closest first (topograph's cloud shape)."""

    instance_id: str
    tiers: list[tuple[str, str]]  # (switch id, display name), closest first
    domain: str = ""
    sub_domain: str = ""


def instances_to_graph(instances: list[InstanceTopology], i2n: dict[str, str], *,
                       trim_tiers: int = 0, normalize: bool = False) -> Graph:
    """topograph's ``ClusterTopology.ToGraph``: instances become a forest, switches are
    shared by (level, id), requested nodes without topology go under ``no-topology``.
    ``normalize`` renames switches ``switch.<level>.<n>`` in hierarchy order (OCI)."""
    i2n = dict(i2n)
    if normalize:
        instances = _normalized(instances)
    forest: dict[str, Vertex] = {}
    nodes: dict[tuple[int, str], Vertex] = {}
    domains = DomainMap()
    for inst in instances:
        if inst.instance_id not in i2n:
            continue
        node_name = i2n.pop(inst.instance_id)
        v = Vertex(inst.instance_id, node_name)
        if inst.domain:
            domains.add(HostInfo(inst.domain, inst.instance_id, node_name, inst.sub_domain))
        keep = len(inst.tiers) - min(max(0, trim_tiers), len(inst.tiers))
        for level, (sw_id, sw_name) in enumerate(inst.tiers[:keep]):
            if not sw_id:
                continue
            sw = nodes.get((level, sw_id))
            if sw is None:
                sw = nodes[(level, sw_id)] = Vertex(sw_id, sw_name)
            sw.vertices[v.id] = v
            v = sw
        if v.id in forest:
            _merge(forest[v.id], v)
        else:
            forest[v.id] = v
    if i2n:
        sw = Vertex(NO_TOPOLOGY)
        for iid, name in i2n.items():
            sw.vertices[iid] = Vertex(iid, name)
        forest[NO_TOPOLOGY] = sw
    root = Vertex()
    root.vertices.update(forest)
    return Graph(root, domains if domains else None)


def _merge(dst: Vertex, src: Vertex) -> None:
    if dst is src:
        return
    if not dst.name:
        dst.name = src.name
    for k, child in src.vertices.items():
        if k in dst.vertices:
            _merge(dst.vertices[k], child)
        else:
            dst.vertices[k] = child


def _normalized(instances: list[InstanceTopology]) -> list[InstanceTopology]:
    width = max((len(i.tiers) for i in instances), default=0)

    def sort_key(inst: InstanceTopology):
        ids = [t[0] for t in inst.tiers]
        return ([ids[lvl] if lvl < len(ids) else "" for lvl in range(width - 1, -1, -1)],
                inst.instance_id)

    ordered = sorted(instances, key=sort_key)
    counts: dict[int, int] = {}
    names: dict[int, dict[str, str]] = {}
    out = []
    for inst in ordered:
        tiers = []
        for level, (sw_id, _) in enumerate(inst.tiers):
            if not sw_id:
                tiers.append((sw_id, ""))
                continue
            level_names = names.setdefault(level, {})
            if sw_id not in level_names:
                counts[level] = counts.get(level, 0) + 1
                level_names[sw_id] = f"switch.{level + 1}.{counts[level]}"
            tiers.append((sw_id, level_names[sw_id]))
        out.append(InstanceTopology(inst.instance_id, tiers, inst.domain, inst.sub_domain))
    return out


# --- host list compaction ------------------------------------------------------------

_COMPACT = re.compile(r"^(.*?)(0*\d+)$")


def compact(names: list[str]) -> list[str]:
    """topograph's ``cluset.Compact``: names grouped by the prefix before their trailing
    number (``^(.*?)(0*\\d+)$``), prefixes sorted, numbers sorted by value and joined into
    ranges that keep each number's own digits: ``n-[1101-1102]``, ``S[2-3]``, ``x1``."""
    groups: dict[str, list[str] | None] = {}
    for n in names:
        m = _COMPACT.match(n)
        if m:
            g = groups.get(m.group(1))
            if g is None:
                groups[m.group(1)] = [m.group(2)]
            else:
                g.append(m.group(2))
        else:
            groups.setdefault(n, None)
    out = []
    for prefix in sorted(groups):
        nums = groups[prefix]
        if not nums:
            out.append(prefix)
            continue
        nums = sorted(nums, key=int)
        if len(nums) == 1:
            out.append(prefix + nums[0])
            continue
        parts, start, end = [], nums[0], nums[0]
        for n in nums[1:]:
            if int(n) == int(end) + 1:
                end = n
            else:
                parts.append(start if start == end else f"{start}-{end}")
                start = end = n
        parts.append(start if start == end else f"{start}-{end}")
        out.append(prefix + "[" + ",".join(parts) + "]")
    return out


def compact_str(names: list[str]) -> str:
    return ",".join(compact(names))


def expand_list(text: str) -> list[str]:
    """topograph's ``cluset.ExpandList``: comma-separated entries, each ``prefix[ranges]``
    (one bracket, at the end) or a plain name; ranges keep the lower bound's width."""
    out: list[str] = []
    for entry in _split_top(text):
        m = re.match(r"^(.*?)\[(.*?)\]$", entry)
        if not m:
            out.append(entry)
            continue
        prefix = m.group(1)
        for part in m.group(2).split(","):
            if "-" in part:
                lo, hi = part.split("-")[:2]
                w = len(lo)
                a, b = _atoi(lo), _atoi(hi)
                if b >= a and b - a >= MAX_EXPANDED - len(out):
                    raise ValueError(f"expanded node list exceeds {MAX_EXPANDED} entries")
                out.extend(f"{prefix}{i:0{w}d}" for i in range(a, b + 1))
            else:
                out.append(prefix + part)
    return out


MAX_EXPANDED = 500_000


def _atoi(s: str) -> int:
    """Go's strconv.Atoi as topograph uses it: a bad number counts as 0."""
    try:
        return int(s)
    except ValueError:
        return 0


def _split_top(text: str) -> list[str]:
    out, cur, depth = [], [], 0
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]" and depth:
            depth -= 1
        if ch == "," and depth == 0:
            s = "".join(cur).strip()
            if s:
                out.append(s)
            cur = []
        else:
            cur.append(ch)
    s = "".join(cur).strip()
    if s:
        out.append(s)
    return out
