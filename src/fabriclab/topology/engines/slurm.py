"""Slurm topology files from a topology graph: topology/tree, topology/block and the
per-partition topology.yaml.

The rules follow NVIDIA topograph's translate package, so that the same graph gives
the same bytes: breadth-first switch order with sorted children, ``# <name>=<id>``
comments for named vertices, topograph's host-list compaction, blocks ordered by the
first appearance of their nodes in the tree, ``BlockSizes`` inferred as [D, 2D, …,
2^k·D], and base-block "complementing" (padding and splitting domains into the block
tree Slurm expects) when block sizes are given or sub-domains exist.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import re2
import yaml

from ..cluset import MAX_EXPANDED, compact, expand_list
from ..errors import OptionError, TopologyProblem
from ..graph import DomainMap, Graph, HostInfo, Vertex

TREE, BLOCK, FLAT = "topology/tree", "topology/block", "topology/flat"


class TopologyError(TopologyProblem):
    """A topology that cannot be generated; ``status`` is the HTTP status topograph uses."""


@dataclass
class BlockName:
    """Rename blocks from their nodes' names: ``node_name_regexp`` with ``format``
    (``${1}``, ``$name``), as topograph's ``blockName``."""

    node_name_regexp: str
    format: str

    def __post_init__(self):
        if not self.node_name_regexp:
            raise TopologyError("blockName.nodeNameRegexp must not be empty")
        if not self.format:
            raise TopologyError("blockName.format must not be empty")
        try:
            self.re = re2.compile(self.node_name_regexp, options=_RE2_OPTIONS)
        except re2.error as e:
            what = e.args[0].decode(errors="replace") if e.args and isinstance(e.args[0], bytes) else str(e)
            raise TopologyError(f"invalid blockName.nodeNameRegexp {self.node_name_regexp!r}: {what}") from None

    def name(self, default: str, domain: str, nodes: list[str]) -> str:
        if not nodes:
            return default
        desc = f'block "{default}"' + (f' (domain "{domain}")' if domain else "")
        out = ""
        for node in nodes:
            m = self.re.search(node)
            if m is None:
                raise TopologyError(f'node "{node}" in {desc} does not match nodeNameRegexp '
                                    f'"{self.node_name_regexp}"')
            got = _go_expand(self.format, m)
            if not got:
                raise TopologyError(f'blockName format "{self.format}" produces an empty name for '
                                    f'node "{node}" in {desc}')
            if not out:
                out = got
            elif got != out:
                raise TopologyError(f'nodes in {desc} produce different block names "{out}" and "{got}"')
        return out


# topograph compiles nodeNameRegexp with Go's regexp, whose syntax is RE2's, and so does
# this: the same patterns are valid, and matching takes linear time (Python's re can take
# exponential time, e.g. '^(a|aa)+$' on 50 a's and a '!').  No stderr log of bad patterns.
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False

_GO_TEMPLATE = re.compile(r"\$(\$|\{([A-Za-z0-9_]+)\}|([A-Za-z0-9_]+))")


def _go_expand(template: str, m) -> str:
    """Go's ``regexp.Expand``: ``$1``/``${1}``/``$name``, ``$$`` for a dollar; an unknown
    group expands to nothing.  As Go's ``extract`` (regexp.go), a name is a group number
    only with at most 9 digits and no leading zero; else it is looked up as a name."""
    def sub(t: re.Match) -> str:
        if t.group(1) == "$":
            return "$"
        name = t.group(2) or t.group(3)
        number = name.isdigit() and len(name) <= 9 and (name == "0" or name[0] != "0")
        try:
            v = m.group(int(name)) if number else m.group(name)
        except IndexError:  # no such group
            return ""
        return v or ""
    return _GO_TEMPLATE.sub(sub, template)


@dataclass
class TopologySpec:
    """One named topology of topology.yaml."""

    plugin: str
    nodes: list[str] = field(default_factory=list)  # compact host lists
    block_sizes: list[int] = field(default_factory=list)
    block_name: BlockName | None = None
    cluster_default: bool = False


@dataclass
class SlurmConfig:
    plugin: str = TREE
    block_sizes: list[int] = field(default_factory=list)
    block_name: BlockName | None = None
    topologies: dict[str, TopologySpec] = field(default_factory=dict)

    def validate(self, graph: Graph | None) -> None:
        if self.block_name is not None and self.plugin != BLOCK:
            raise TopologyError(f'blockName is only supported with plugin "{BLOCK}"')
        if self.topologies:
            if self.plugin and self.plugin != TREE:
                raise TopologyError("plugin and topologies parameters are mutually exclusive")
            for name, spec in self.topologies.items():
                if spec.block_name is not None and spec.plugin != BLOCK:
                    raise TopologyError(f'topology "{name}": blockName is only supported with plugin "{BLOCK}"')
                if spec.plugin == TREE:
                    if graph is None or graph.tiers is None:
                        raise TopologyError(f'missing tree topology for topology "{name}"')
                elif spec.plugin == BLOCK:
                    if graph is None or graph.domains is None:
                        raise TopologyError(f'missing block topology for topology "{name}"')
                elif spec.plugin != FLAT:
                    raise TopologyError(f'unsupported topology plugin "{spec.plugin}" for topology "{name}"')
                if not spec.nodes and spec.plugin != FLAT:
                    raise TopologyError(f'topology "{name}" specifies no nodes')
            return
        if self.plugin == TREE:
            if graph is None or graph.tiers is None:
                raise TopologyError("missing tree topology")
        elif self.plugin == BLOCK:
            if graph is None or graph.domains is None:
                raise TopologyError("missing block topology")
            if not graph.domains:
                raise TopologyError("block topology contains no accelerator domains")
        else:
            raise TopologyError(f'unsupported topology plugin "{self.plugin}"')


@dataclass
class _Block:
    id: str
    name: str = ""
    nodes: list[str] = field(default_factory=list)
    indx: int = 0


@dataclass
class _NodeInfo:
    instance_id: str
    block_id: str = ""
    block_indx: int | None = None
    switches: list[str] = field(default_factory=list)


class NetworkTopology:
    def __init__(self, graph: Graph, config: SlurmConfig):
        config.validate(graph)
        self.config = config
        self.tree: dict[str, list[str]] = {}
        self.vertices: dict[str, Vertex] = {}
        self.node_info: dict[str, _NodeInfo] = {}
        self.domains: DomainMap | None = None
        self.blocks: list[_Block] = []
        self._init_tree(graph)
        self._init_blocks(graph)

    # --- set-up --------------------------------------------------------------------
    def _init_tree(self, graph: Graph) -> None:
        if graph.tiers is None:
            return
        parents: dict[str, list[str]] = {}
        seen = {graph.tiers.id}
        queue = [graph.tiers]
        while queue:
            v = queue.pop(0)
            if v.id not in self.tree:
                self.tree[v.id] = []
                self.vertices[v.id] = v
                if not v.vertices:
                    self.node_info[v.name] = _NodeInfo(v.id, switches=parents.get(v.id, []))
            for key in sorted(v.vertices):
                w = v.vertices[key]
                if key == v.id or w.id == v.id:
                    raise TopologyError(f'vertex "{v.id}" contains a self-edge')
                if w.id in seen:
                    raise TopologyError(f'vertex "{w.id}" is reachable more than once; topology must be a tree')
                seen.add(w.id)
                if v.id:
                    parents[w.id] = parents.get(v.id, []) + [v.id]
                self.tree[v.id].append(key)
                queue.append(w)
        for k in self.tree:
            self.tree[k].sort()

    def _init_blocks(self, graph: Graph) -> None:
        if not graph.domains:
            return
        self.domains = graph.domains
        blocks = _block_infos(graph.domains)
        if graph.tiers is None:
            for i, b in enumerate(blocks):
                b.indx = i
                for node in b.nodes:
                    h = graph.domains[b.name].get(node)
                    if h is not None:
                        self.node_info[node] = _NodeInfo(h.instance_id, b.id, i)
                self.blocks.append(b)
            return
        by_id = {b.id: b for b in blocks}
        for b in blocks:
            for node in b.nodes:
                if node in self.node_info:
                    self.node_info[node].block_id = b.id
        indx = 0
        queue = [graph.tiers]
        while queue:
            v = queue.pop(0)
            if not v.vertices:
                info = self.node_info.get(v.name)
                if info and info.block_id and info.block_indx is None and info.block_id in by_id:
                    b = by_id[info.block_id]
                    copy = _Block(b.id, b.name, list(b.nodes), indx)
                    for node in copy.nodes:
                        if node in self.node_info:
                            self.node_info[node].block_indx = indx
                    self.blocks.append(copy)
                    indx += 1
            else:
                queue.extend(v.vertices[k] for k in sorted(v.vertices))

    # --- output --------------------------------------------------------------------
    def generate(self, skeleton: bool = False) -> str:
        if self.config.topologies:
            return topology_yaml(self.topology_units(), skeleton)
        if self.config.plugin == BLOCK:
            return self._block_conf(skeleton)
        return self._tree_conf(skeleton)

    def _tree_conf(self, skeleton: bool) -> str:
        out: list[str] = []
        visited: set[str] = set()
        queue = [""]
        while queue:
            vid = queue.pop(0)
            if vid in visited:
                continue
            visited.add(vid)
            v = self.vertices.get(vid)
            if v is None:
                raise TopologyError(f'missing vertex with ID "{vid}"', 502)
            _write_vertex(out, v, skeleton)
            queue.extend(self.tree[vid])
        return "".join(out)

    def _block_conf(self, skeleton: bool) -> str:
        blocks, sizes = self._complement(self.blocks, self.config.block_sizes)
        names = _block_names(blocks, self.config.block_name)
        named = []
        for b, n in zip(blocks, names):
            named.append(_Block(n, b.name, b.nodes, b.indx))
            for node in b.nodes:
                if node in self.node_info:
                    self.node_info[node].block_id = n
        sizes = _block_sizes(named, sizes)
        out = []
        for b in named:
            comment = f"# {b.id}={b.name}\n" if b.name else ""
            if skeleton or not b.nodes:
                out.append(f"{comment}BlockName={b.id}\n")
            else:
                out.append(f"{comment}BlockName={b.id} Nodes={','.join(compact(b.nodes))}\n")
        out.append(f"BlockSizes={','.join(str(s) for s in sizes)}\n")
        return "".join(out)

    def node_spec(self, node: str, units: list | None = None) -> str:
        """Slinky's dynamic-node topology string for a node (``default:S1:S3``)."""
        info = self.node_info.get(node)
        if info is None:
            return ""
        if self.config.topologies:
            parts = []
            for u in units or []:
                parent = ":".join(u.parents.get(node, [])) if u.tree is not None else u.parents.get(node, "")
                if parent:
                    parts.append(f"{u.name}:{parent}")
            return ",".join(parts)
        if self.config.plugin == BLOCK:
            return f"default:{info.block_id}"
        return "default:" + ":".join(info.switches)

    # --- per-partition topologies (topology.yaml) ------------------------------------
    def topology_units(self) -> list["TopologyUnit"]:
        out = []
        self._names_left = MAX_EXPANDED  # for all the topologies' node lists together
        for name in sorted(self.config.topologies):
            spec = self.config.topologies[name]
            try:
                if spec.plugin == TREE:
                    out.append(self._tree_unit(name, spec))
                elif spec.plugin == BLOCK:
                    out.append(self._block_unit(name, spec))
                else:
                    out.append(TopologyUnit(name, spec.cluster_default, flat=True))
            except TopologyError as e:
                raise TopologyError(f'topology "{name}": {e}') from None
        return out

    def _expand(self, spec: TopologySpec) -> list[str]:
        nodes: list[str] = []
        for entry in spec.nodes:
            try:
                names = expand_list(entry)  # at most MAX_EXPANDED, counted before expanding
            except OptionError as e:
                raise TopologyError(f"nodes expansion failed: {e}") from None
            self._names_left -= len(names)
            if self._names_left < 0:  # so one request's lists make at most 2 x MAX_EXPANDED names
                raise TopologyError(f"nodes expansion failed: the topologies' node lists expand to more "
                                    f"than {MAX_EXPANDED} names")
            nodes.extend(names)
        return nodes

    def _block_unit(self, name: str, spec: TopologySpec) -> "TopologyUnit":
        by_indx: dict[int, _Block] = {}
        for node in self._expand(spec):
            info = self.node_info.get(node)
            if info is None or info.block_indx is None:
                continue
            b = by_indx.get(info.block_indx)
            if b is None:
                nm = self.blocks[info.block_indx].name if info.block_indx < len(self.blocks) else ""
                by_indx[info.block_indx] = _Block("", nm, [node], info.block_indx)
            else:
                b.nodes.append(node)
        unit = TopologyUnit(name, spec.cluster_default)
        if not by_indx:
            unit.flat = True
            return unit
        blocks = [by_indx[k] for k in sorted(by_indx)]
        blocks, sizes = self._complement(blocks, spec.block_sizes)
        for i, b in enumerate(blocks):
            b.id = f"block{i + 1}"
        names = _block_names(blocks, spec.block_name)
        unit.blocks = []
        for b, n in zip(blocks, names):
            unit.blocks.append((n, ",".join(compact(b.nodes)) if b.nodes else ""))
            for node in b.nodes:
                unit.parents[node] = n
        unit.block_sizes = _block_sizes(blocks, sizes)
        return unit

    def _tree_unit(self, name: str, spec: TopologySpec) -> "TopologyUnit":
        unit = TopologyUnit(name, spec.cluster_default)
        names = self._expand(spec)
        selected = set(names)
        ids = []
        for n in names:
            info = self.node_info.get(n)
            if info is None:
                selected.discard(n)
            else:
                ids.append(info.instance_id)
        sub = self._partition_tree(ids)
        if not sub:
            unit.flat = True
            return unit
        unit.switches = []
        visited: set[str] = set()
        queue = [""]
        while queue:
            sid = queue.pop(0)
            if sid in visited:
                continue
            visited.add(sid)
            connects = sub.get(sid)
            if connects is None:
                continue
            if sid:
                v = self.vertices[sid]
                children, leaves = [], []
                wanted = set(connects)
                for w in v.vertices.values():
                    key = w.id
                    if not w.vertices:
                        key = w.name
                        if w.name in selected:
                            leaves.append(w.name)
                    elif w.id in wanted:
                        children.append(w.id)
                    unit.parents[key] = list(unit.parents.get(v.id, [])) + [v.id]
                if children or leaves:
                    unit.switches.append((v.id, ",".join(compact(children)) if children else "",
                                          ",".join(compact(leaves)) if leaves else ""))
            queue.extend(connects)
        return unit

    def _partition_tree(self, leaves: list[str]) -> dict[str, list[str]]:
        want = set(leaves)
        required: set[str] = set()

        def dfs(n: str) -> bool:
            keep = n in want
            for c in self.tree.get(n, []):
                if dfs(c):
                    keep = True
            if keep:
                required.add(n)
            return keep

        dfs("")
        sub: dict[str, list[str]] = {}
        for parent, children in self.tree.items():
            if parent in required:
                for c in children:
                    if c in required:
                        sub.setdefault(parent, []).append(c)
        return sub

    # --- block complementing ---------------------------------------------------------
    def _complement(self, blocks: list[_Block], sizes: list[int]) -> tuple[list[_Block], list[int]]:
        if self.domains is None:
            return blocks, sizes
        local = DomainMap()
        for b in blocks:
            if not b.name or b.name not in self.domains:
                continue
            owned = set(b.nodes)
            for h in self.domains[b.name].values():
                if h.host_name in owned:
                    local.add(HostInfo(h.domain, h.instance_id, h.host_name, h.sub_domain))
        if not local:
            return blocks, sizes
        if not sizes:
            sizes = infer_two_level_block_sizes(local)
            if not sizes:
                return blocks, sizes
        by_name = {b.name: b for b in blocks if b.name}
        tree = _build_block_tree(local, sizes)
        if tree is None:
            return blocks, sizes
        out = [_base_to_block(bb, by_name, i + 1) for i, bb in enumerate(_slots(tree))]
        return out, sizes


@dataclass
class TopologyUnit:
    name: str
    cluster_default: bool = False
    flat: bool = False
    switches: list[tuple[str, str, str]] | None = None  # (switch, children, nodes)
    block_sizes: list[int] | None = None
    blocks: list[tuple[str, str]] | None = None  # (block, nodes)
    parents: dict = field(default_factory=dict)

    @property
    def tree(self):
        return self.switches


def _write_vertex(out: list[str], v: Vertex, skeleton: bool) -> None:
    if not v.id:
        return
    switches, nodes = [], []
    for w in v.vertices.values():
        if not w.vertices:
            nodes.append(w.name)
        else:
            switches.append(w.name or w.id)
    if v.name:
        comment, name = f"# {v.name}={v.id}\n", v.name
    else:
        comment, name = "", v.id
    if switches:
        out.append(f"{comment}SwitchName={name} Switches={','.join(compact(switches))}\n")
    if not skeleton and nodes:
        out.append(f"{comment}SwitchName={name} Nodes={','.join(compact(nodes))}\n")


def _block_infos(domains: DomainMap) -> list[_Block]:
    return [_Block(f"block{i + 1:03d}", name, sorted(domains[name]))
            for i, name in enumerate(sorted(domains))]


def _block_names(blocks: list[_Block], fmt: BlockName | None) -> list[str]:
    names, seen = [], {}
    for b in blocks:
        n = fmt.name(b.id, b.name, b.nodes) if fmt else b.id
        if n in seen:
            raise TopologyError(f'blocks "{seen[n]}" and "{b.id}" produce duplicate block name "{n}"')
        seen[n] = b.id
        names.append(n)
    return names


def _block_sizes(blocks: list[_Block], requested: list[int]) -> list[int]:
    """The requested sizes, else [D, 2D, …, 2^k·D]: D the smallest block, k = ⌊log2 N⌋."""
    if requested:
        return list(requested)
    if not blocks:
        raise TopologyError("cannot determine blockSizes: topology contains no blocks")
    d = min(len(b.nodes) for b in blocks)
    return [d * 2 ** i for i in range(int(math.log2(len(blocks))) + 1)]


def infer_two_level_block_sizes(domains: DomainMap) -> list[int]:
    """[largest sub-domain, smallest power-of-two multiple ≥ largest domain] when hosts
    carry sub-domains (racks inside an NVLink domain); nothing otherwise."""
    max_domain = max_sub = 0
    has_sub = False
    for hosts in domains.values():
        subs: dict[str, int] = {}
        for h in hosts.values():
            if h.sub_domain:
                has_sub = True
                subs[h.sub_domain] = subs.get(h.sub_domain, 0) + 1
        max_domain = max(max_domain, len(hosts))
        max_sub = max([max_sub, *subs.values()])
    if not has_sub:
        return []
    agg = max_sub
    while agg < max_domain:
        agg *= 2
    return [max_sub] if agg == max_sub else [max_sub, agg]


# --- the block tree (topograph block_tree.go) -------------------------------------------


@dataclass
class _BV:
    """BlockVertex: a domain (with hosts) or a domain of sub-domains."""

    id: str = ""
    actual: int = 0
    max_child: int = 0
    hosts: dict[str, HostInfo] | None = None
    children: dict[str, "_BV"] | None = None


def _domain_tree(domains: DomainMap) -> _BV:
    root = _BV(children={})
    for domain, hosts in domains.items():
        bv = _BV(id=domain)
        root.children[domain] = bv  # type: ignore[index]
        if not any(h.sub_domain for h in hosts.values()):
            bv.hosts = dict(hosts)
            bv.actual = len(hosts)
        else:
            bv.children = {}
            for h in hosts.values():
                gn = h.sub_domain or domain
                sub = bv.children.get(gn)
                if sub is None:
                    sub = bv.children[gn] = _BV(id=gn, hosts={})
                sub.hosts[h.host_name] = h  # type: ignore[index]
                sub.actual += 1
            bv.actual = len(hosts)
            bv.max_child = max((s.actual for s in bv.children.values()), default=0)
        root.max_child = max(root.max_child, bv.actual)
    return root


@dataclass
class _Base:
    id: str
    domain: str
    leaves: list[HostInfo | None]


@dataclass
class _Agg:
    id: str = ""
    children: list = field(default_factory=list)
    count: int = 0


def _domain_of(bid: str) -> str:
    for i, ch in enumerate(bid):
        if ch in "/#+":
            return bid[:i]
    return bid


def _new_base(bid: str, hosts: list[HostInfo], size: int) -> _Base:
    leaves: list[HostInfo | None] = [None] * size
    for i, h in enumerate(hosts[:size]):
        leaves[i] = h
    return _Base(bid, _domain_of(bid), leaves)


def _empty_base(size: int) -> _Base:
    return _Base("", "", [None] * max(size, 0))


def _split(bid: str, hosts: list[HostInfo], size: int) -> list[_Base]:
    out = []
    for start in range(0, len(hosts), size):
        out.append(_new_base(bid if not out else f"{bid}#{len(out) + 1}", hosts[start:start + size], size))
    return out


def _sorted_hosts(hosts: dict[str, HostInfo]) -> list[HostInfo]:
    return sorted(hosts.values(), key=lambda h: h.host_name)


def _capacity(max_sibling: int, base: int) -> int:
    c = base
    while c < max_sibling:
        c *= 2
    return c


def _pack(bid: str, hosts: list[HostInfo], n: int, base: int) -> _Agg:
    blocks = _split(bid, hosts, base)
    while len(blocks) < n:
        blocks.append(_empty_base(base))
    return _Agg(bid, list(blocks), base * len(blocks))


def _single_level_agg(src: _BV, max_sibling: int, sizes: list[int]) -> _Agg:
    base = sizes[0]
    n = -(-src.actual // base) if len(sizes) == 1 else _capacity(max_sibling, base) // base
    return _pack(src.id, _sorted_hosts(src.hosts or {}), max(n, 1), base)


def _domain_agg(src: _BV, max_sibling: int, sizes: list[int]) -> _Agg:
    base, last = sizes[0], sizes[-1]
    if src.hosts is not None:
        n = -(-src.actual // base) if last < max_sibling else _capacity(max_sibling, base) // base
        return _pack(src.id, _sorted_hosts(src.hosts), max(n, 1), base)
    count = _capacity(min(last, max_sibling), base)
    return _recurse(src, max(count // base, 1), sizes)


def _recurse(src: _BV, n: int, sizes: list[int]) -> _Agg:
    base = sizes[0]
    agg = _Agg(src.id)
    for name in sorted(src.children or {}):
        child = _domain_agg(src.children[name], src.max_child, sizes)  # type: ignore[index]
        for bb in _slots(child):
            agg.children.append(bb)
            agg.count += base
    actual = agg.count // base
    if actual > n and len(sizes) >= 2:
        nodes = actual * base
        align = nodes
        for bs in sizes[1:]:
            if bs >= nodes:
                align = bs
                break
        width = _capacity(align, base) // base
        n = -(-actual // width) * width
    while agg.count // base < n:
        agg.children.append(_empty_base(base))
        agg.count += base
    return agg


def _build_block_tree(domains: DomainMap, sizes: list[int]) -> _Agg | None:
    if not sizes or sizes[0] <= 0:
        return None
    root = _domain_tree(domains)
    base, desired = sizes[0], sizes[-1]
    single = bool(root.children) and all(
        d.hosts is not None and not d.children for d in root.children.values())  # type: ignore[union-attr]
    result = _Agg(root.id)
    cap = 0
    for name in sorted(root.children or {}):
        d = root.children[name]  # type: ignore[index]
        agg = _single_level_agg(d, root.max_child, sizes) if single else _domain_agg(d, root.max_child, sizes)
        result.children.append(agg)
        result.count += agg.count
        cap = agg.count if cap == 0 else math.gcd(cap, agg.count)
    if result.count > 0 and cap > 0 and result.count % desired:
        step = cap // math.gcd(cap, desired) * desired
        target = -(-result.count // step) * step
        while result.count < target:
            result.children.append(_Agg("", [_empty_base(base) for _ in range(cap // base)],
                                        base * (cap // base)))
            result.count += cap
    return result


def _slots(tree) -> list[_Base]:
    out: list[_Base] = []

    def walk(n):
        if isinstance(n, _Base):
            out.append(n)
        else:
            for c in n.children:
                walk(c)

    walk(tree)
    return out


def _base_to_block(bb: _Base, by_name: dict[str, _Block], seq: int) -> _Block:
    bid = f"block{seq:03d}"
    nodes = [h.host_name for h in bb.leaves if h is not None and h.host_name]
    if nodes:
        return _Block(bid, bb.domain or bb.id, nodes)
    domains = sorted({h.domain for h in bb.leaves if h is not None and h.domain})
    for d in domains:
        if d in by_name:
            return _Block(bid, d or bb.id, list(by_name[d].nodes))
    if bb.domain:
        return _Block(bid, bb.domain)
    return _Block(bid)


# --- topology.yaml, as gopkg.in/yaml.v3 writes it ---------------------------------------


def _scalar(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    text = yaml.safe_dump(v, default_flow_style=True, width=10_000).strip()
    if text.endswith("\n..."):
        text = text[:-4].rstrip()
    return text


def topology_yaml(units: list[TopologyUnit], skeleton: bool = False) -> str:
    """yaml.v3's layout of ``[]TopologyUnit``: four-space indents inside the list items,
    ``omitempty`` fields left out."""
    out: list[str] = []
    for u in units:
        out.append(f"- topology: {_scalar(u.name)}\n")
        out.append(f"  cluster_default: {_scalar(u.cluster_default)}\n")
        if u.flat:
            out.append("  flat: true\n")
        if u.switches is not None:
            out.append("  tree:\n")
            if not u.switches:
                out.append("    switches: []\n")
            else:
                out.append("    switches:\n")
                for sw, children, nodes in u.switches:
                    out.append(f"        - switch: {_scalar(sw)}\n")
                    if children:
                        out.append(f"          children: {_scalar(children)}\n")
                    if nodes and not skeleton:
                        out.append(f"          nodes: {_scalar(nodes)}\n")
        if u.blocks is not None:
            out.append("  block:\n")
            out.append("    block_sizes:\n" if u.block_sizes else "    block_sizes: []\n")
            for s in u.block_sizes or []:
                out.append(f"        - {s}\n")
            out.append("    blocks:\n" if u.blocks else "    blocks: []\n")
            for name, nodes in u.blocks:
                out.append(f"        - block: {_scalar(name)}\n")
                if nodes and not skeleton:
                    out.append(f"          nodes: {_scalar(nodes)}\n")
    return "".join(out) if out else "[]\n"
