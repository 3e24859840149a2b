"""The graph as the Slurm writers read it (topograph's ``NetworkTopology``): the switch
tree breadth first with sorted children, each node's instance and block, and the blocks
in the order their first node appears in the tree."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from ...graph import DomainMap, Graph, Vertex
from .blocks import Block, domain_blocks
from .config import SlurmConfig
from .errors import SlurmTopologyError


@dataclass
class NodeInfo:
    """A compute node: its instance id, its block's id and the block's position."""

    instance_id: str
    block_id: str = ""
    block_position: int | None = None


class NetworkTopology:
    """A checked graph and config, indexed: ``tree`` (vertex id -> sorted child keys,
    "" the root), ``vertices`` (id -> vertex), ``node_info`` (node name -> NodeInfo),
    ``blocks`` and ``domains``; ``graph`` itself, for what else it tells (domain names,
    block order)."""

    def __init__(self, graph: Graph, config: SlurmConfig):
        config.validate(graph)
        self.graph = graph
        self.config = config
        self.tree: dict[str, list[str]] = {}
        self.vertices: dict[str, Vertex] = {}
        self.node_info: dict[str, NodeInfo] = {}
        self.domains: DomainMap | None = None
        self.blocks: list[Block] = []
        self._index_tree(graph)
        self._index_blocks(graph)

    def _index_tree(self, graph: Graph) -> None:
        """``initTree``: breadth first from the root; a vertex reached twice (not a tree)
        or a self-edge is a SlurmTopologyError."""
        if graph.tiers is None:
            return
        seen = {graph.tiers.id}
        queue = deque([graph.tiers])
        while queue:
            vertex = queue.popleft()
            if vertex.id not in self.tree:
                self.tree[vertex.id] = []
                self.vertices[vertex.id] = vertex
                if not vertex.vertices:
                    self.node_info[vertex.name] = NodeInfo(vertex.id)
            for key in sorted(vertex.vertices):
                child = vertex.vertices[key]
                if key == vertex.id or child.id == vertex.id:
                    raise SlurmTopologyError(f'vertex "{vertex.id}" contains a self-edge')
                if child.id in seen:
                    raise SlurmTopologyError(
                        f'vertex "{child.id}" is reachable more than once; topology must be a tree'
                    )
                seen.add(child.id)
                self.tree[vertex.id].append(key)
                queue.append(child)
        for children in self.tree.values():
            children.sort()

    def _index_blocks(self, graph: Graph) -> None:
        """``initBlocks``: one block per domain; with a tree, the blocks are taken in the
        breadth-first order of their first node, and only blocks with a node in the tree."""
        if not graph.domains:
            return
        self.domains = graph.domains
        blocks = domain_blocks(graph.domains)
        if graph.tiers is None:
            for position, block in enumerate(blocks):
                block.position = position
                for node in block.nodes:
                    host = graph.domains[block.name].get(node)
                    if host is not None:
                        self.node_info[node] = NodeInfo(host.instance_id, block.id, position)
                self.blocks.append(block)
            return
        by_id = {block.id: block for block in blocks}
        for block in blocks:
            for node in block.nodes:
                if node in self.node_info:
                    self.node_info[node].block_id = block.id
        position = 0
        queue = deque([graph.tiers])
        while queue:
            vertex = queue.popleft()
            if not vertex.vertices:
                info = self.node_info.get(vertex.name)
                if (
                    info
                    and info.block_id
                    and info.block_position is None
                    and info.block_id in by_id
                ):
                    block = by_id[info.block_id]
                    copy = Block(block.id, block.name, list(block.nodes), position)
                    for node in copy.nodes:
                        if node in self.node_info:
                            self.node_info[node].block_position = position
                    self.blocks.append(copy)
                    position += 1
            else:
                queue.extend(vertex.vertices[key] for key in sorted(vertex.vertices))
