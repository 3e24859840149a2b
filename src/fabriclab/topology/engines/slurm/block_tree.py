"""topograph's block "complement" (pkg/translate/block_complement.go and block_tree.go):
domains padded and split into the tree of base blocks that Slurm's BlockSizes describe.

With block sizes given, or with hosts in sub-domains (racks within an NVLink domain), the
blocks are rebuilt from a tree: each domain becomes an aggregate of base blocks of the
first size (hosts sorted by name, split into base blocks, empty base blocks added up to
the aggregate's capacity), and the root is padded with empty aggregates until its base
blocks fill a whole number of the largest size.  The base blocks, in tree order, are the
new blocks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ...graph import DomainMap, HostInfo
from .blocks import Block


@dataclass
class DomainVertex:
    """topograph's ``BlockVertex``: a domain with its hosts, or a domain of sub-domains
    (``children``); ``actual`` is its host count, ``max_child`` its largest child's."""

    id: str = ""
    actual: int = 0
    max_child: int = 0
    hosts: dict[str, HostInfo] | None = None
    children: dict[str, DomainVertex] | None = None


@dataclass
class BaseBlock:
    """A slot of the block tree: ``leaves`` holds one host or None per place."""

    id: str
    domain: str
    leaves: list[HostInfo | None]


@dataclass
class AggregateBlock:
    """An inner vertex of the block tree: base blocks or aggregates, ``count`` places."""

    id: str = ""
    children: list[BaseBlock | AggregateBlock] = field(default_factory=list)
    count: int = 0


def complement(
    blocks: list[Block], sizes: list[int], domains: DomainMap | None
) -> tuple[list[Block], list[int]]:
    """topograph's ``complementBlocks``: the blocks rebuilt from the block tree of the
    domains they hold, and the block sizes (inferred for two-level domains); the blocks
    and sizes unchanged where there is no tree to build."""
    if domains is None:
        return blocks, sizes
    local = _domains_for_blocks(domains, blocks)
    if not local:
        return blocks, sizes
    if not sizes:
        sizes = infer_two_level_block_sizes(local)
        if not sizes:
            return blocks, sizes
    by_name = {block.name: block for block in blocks if block.name}
    tree = _build_block_tree(local, sizes)
    if tree is None:
        return blocks, sizes
    out = [_base_to_block(base, by_name, i + 1) for i, base in enumerate(_slots(tree))]
    return out, sizes


def _domains_for_blocks(domains: DomainMap, blocks: list[Block]) -> DomainMap:
    """The hosts of each block's domain that are the block's own nodes (so a partition's
    blocks are not padded with another partition's hosts)."""
    local = DomainMap()
    for block in blocks:
        if not block.name or block.name not in domains:
            continue
        owned = set(block.nodes)
        for host in domains[block.name].values():
            if host.host_name in owned:
                local.add(HostInfo(host.domain, host.instance_id, host.host_name, host.sub_domain))
    return local


def infer_two_level_block_sizes(domains: DomainMap) -> list[int]:
    """[largest sub-domain, smallest power-of-two multiple ≥ largest domain] when hosts
    carry sub-domains (racks inside an NVLink domain); nothing otherwise."""
    max_domain = max_sub = 0
    has_sub = False
    for hosts in domains.values():
        sub_sizes: dict[str, int] = {}
        for host in hosts.values():
            if host.sub_domain:
                has_sub = True
                sub_sizes[host.sub_domain] = sub_sizes.get(host.sub_domain, 0) + 1
        max_domain = max(max_domain, len(hosts))
        max_sub = max([max_sub, *sub_sizes.values()])
    if not has_sub:
        return []
    aggregate = max_sub
    while aggregate < max_domain:
        aggregate *= 2
    return [max_sub] if aggregate == max_sub else [max_sub, aggregate]


def _domain_tree(domains: DomainMap) -> DomainVertex:
    """topograph's ``DomainMap.GetDomainTree``: one level of domains, or two where hosts
    carry sub-domains (a host without one counts as its domain's own sub-domain)."""
    root = DomainVertex(children={})
    for domain, hosts in domains.items():
        vertex = DomainVertex(id=domain)
        root.children[domain] = vertex  # type: ignore[index]
        if not any(host.sub_domain for host in hosts.values()):
            vertex.hosts = dict(hosts)
            vertex.actual = len(hosts)
        else:
            vertex.children = {}
            for host in hosts.values():
                group = host.sub_domain or domain
                sub = vertex.children.get(group)
                if sub is None:
                    sub = vertex.children[group] = DomainVertex(id=group, hosts={})
                sub.hosts[host.host_name] = host  # type: ignore[index]
                sub.actual += 1
            vertex.actual = len(hosts)
            vertex.max_child = max((sub.actual for sub in vertex.children.values()), default=0)
        root.max_child = max(root.max_child, vertex.actual)
    return root


def _domain_of(block_id: str) -> str:
    """The domain a base block's id names: what comes before its first ``/``, ``#`` or ``+``."""
    for i, char in enumerate(block_id):
        if char in "/#+":
            return block_id[:i]
    return block_id


def _new_base(block_id: str, hosts: list[HostInfo], size: int) -> BaseBlock:
    leaves: list[HostInfo | None] = [None] * size
    for i, host in enumerate(hosts[:size]):
        leaves[i] = host
    return BaseBlock(block_id, _domain_of(block_id), leaves)


def _empty_base(size: int) -> BaseBlock:
    return BaseBlock("", "", [None] * max(size, 0))


def _split(block_id: str, hosts: list[HostInfo], size: int) -> list[BaseBlock]:
    """Hosts cut into base blocks of ``size``: ``id``, ``id#2``, ``id#3`` …"""
    out: list[BaseBlock] = []
    for start in range(0, len(hosts), size):
        part_id = block_id if not out else f"{block_id}#{len(out) + 1}"
        out.append(_new_base(part_id, hosts[start : start + size], size))
    return out


def _sorted_hosts(hosts: dict[str, HostInfo]) -> list[HostInfo]:
    return sorted(hosts.values(), key=lambda host: host.host_name)


def _capacity(max_sibling: int, base: int) -> int:
    """``aggregateSlotCapacity``: the smallest power-of-two multiple of ``base`` that
    holds ``max_sibling`` hosts."""
    capacity = base
    while capacity < max_sibling:
        capacity *= 2
    return capacity


def _pack(block_id: str, hosts: list[HostInfo], count: int, base: int) -> AggregateBlock:
    """``packHostsIntoAggregate``: hosts in base blocks, padded to ``count`` base blocks."""
    bases = _split(block_id, hosts, base)
    while len(bases) < count:
        bases.append(_empty_base(base))
    return AggregateBlock(block_id, list(bases), base * len(bases))


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _single_level_aggregate(
    source: DomainVertex, max_sibling: int, sizes: list[int]
) -> AggregateBlock:
    base = sizes[0]
    count = (
        _ceil_div(source.actual, base) if len(sizes) == 1 else _capacity(max_sibling, base) // base
    )
    return _pack(source.id, _sorted_hosts(source.hosts or {}), max(count, 1), base)


def _domain_aggregate(source: DomainVertex, max_sibling: int, sizes: list[int]) -> AggregateBlock:
    base, largest = sizes[0], sizes[-1]
    if source.hosts is not None:
        count = (
            _ceil_div(source.actual, base)
            if largest < max_sibling
            else _capacity(max_sibling, base) // base
        )
        return _pack(source.id, _sorted_hosts(source.hosts), max(count, 1), base)
    capacity = _capacity(min(largest, max_sibling), base)
    return _recurse(source, max(capacity // base, 1), sizes)


def _recurse(source: DomainVertex, count: int, sizes: list[int]) -> AggregateBlock:
    """``recurseChildrenIntoAggregate``: a domain of sub-domains, each packed on its own,
    padded to ``count`` base blocks or, when it holds more, to a multiple of the width of
    the smallest block size that holds it."""
    base = sizes[0]
    aggregate = AggregateBlock(source.id)
    for name in sorted(source.children or {}):
        child = _domain_aggregate(source.children[name], source.max_child, sizes)  # type: ignore[index]
        for slot in _slots(child):
            aggregate.children.append(slot)
            aggregate.count += base
    actual = aggregate.count // base
    if actual > count and len(sizes) >= 2:
        nodes = actual * base
        align = nodes
        for size in sizes[1:]:
            if size >= nodes:
                align = size
                break
        width = _capacity(align, base) // base
        count = _ceil_div(actual, width) * width
    while aggregate.count // base < count:
        aggregate.children.append(_empty_base(base))
        aggregate.count += base
    return aggregate


def _build_block_tree(domains: DomainMap, sizes: list[int]) -> AggregateBlock | None:
    """``buildBlockTree``: the root aggregate of every domain's aggregate, padded with
    empty aggregates to a multiple of the largest block size."""
    if not sizes or sizes[0] <= 0:
        return None
    root = _domain_tree(domains)
    base, desired = sizes[0], sizes[-1]
    single = bool(root.children) and all(
        domain.hosts is not None and not domain.children
        for domain in (root.children or {}).values()
    )
    result = AggregateBlock(root.id)
    common = 0  # the gcd of the domains' aggregate sizes
    for name in sorted(root.children or {}):
        domain = root.children[name]  # type: ignore[index]
        aggregate = (
            _single_level_aggregate(domain, root.max_child, sizes)
            if single
            else _domain_aggregate(domain, root.max_child, sizes)
        )
        result.children.append(aggregate)
        result.count += aggregate.count
        common = aggregate.count if common == 0 else math.gcd(common, aggregate.count)
    if result.count > 0 and common > 0 and result.count % desired:
        step = common // math.gcd(common, desired) * desired
        target = _ceil_div(result.count, step) * step
        while result.count < target:
            result.children.append(
                AggregateBlock(
                    "", [_empty_base(base) for _ in range(common // base)], base * (common // base)
                )
            )
            result.count += common
    return result


def _slots(tree: BaseBlock | AggregateBlock) -> list[BaseBlock]:
    """``collectBaseBlockSlots``: the base blocks of a tree, depth first, in order."""
    out: list[BaseBlock] = []

    def walk(vertex: BaseBlock | AggregateBlock) -> None:
        if isinstance(vertex, BaseBlock):
            out.append(vertex)
        else:
            for child in vertex.children:
                walk(child)

    walk(tree)
    return out


def _base_to_block(base: BaseBlock, by_name: dict[str, Block], seq: int) -> Block:
    """``baseBlockToBlockInfo``: a slot as block ``block<seq>``: its hosts, else (an empty
    slot) the nodes of the first block of its hosts' domains, else nothing."""
    block_id = f"block{seq:03d}"
    nodes = [host.host_name for host in base.leaves if host is not None and host.host_name]
    if nodes:
        return Block(block_id, base.domain or base.id, nodes)
    domains = sorted({host.domain for host in base.leaves if host is not None and host.domain})
    for domain in domains:
        if domain in by_name:
            return Block(block_id, domain or base.id, list(by_name[domain].nodes))
    if base.domain:
        return Block(block_id, base.domain)
    return Block(block_id)
