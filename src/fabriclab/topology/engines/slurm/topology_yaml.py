"""topology.yaml text: the per-partition topologies as topograph writes them with
gopkg.in/yaml.v3 (four-space indents inside list items, empty fields left out)."""

from __future__ import annotations

from ..yaml_text import go_scalar
from .topology_units import TopologyUnit


def topology_yaml(units: list[TopologyUnit], skeleton: bool = False) -> str:
    """yaml.v3's layout of ``[]TopologyUnit``: four-space indents inside the list items,
    ``omitempty`` fields left out; ``skeleton`` leaves out the node lists."""
    out: list[str] = []
    for unit in units:
        out.append(f"- topology: {go_scalar(unit.name)}\n")
        out.append(f"  cluster_default: {go_scalar(unit.cluster_default)}\n")
        if unit.flat:
            out.append("  flat: true\n")
        if unit.switches is not None:
            out.append("  tree:\n")
            if not unit.switches:
                out.append("    switches: []\n")
            else:
                out.append("    switches:\n")
                for switch, children, nodes in unit.switches:
                    out.append(f"        - switch: {go_scalar(switch)}\n")
                    if children:
                        out.append(f"          children: {go_scalar(children)}\n")
                    if nodes and not skeleton:
                        out.append(f"          nodes: {go_scalar(nodes)}\n")
        if unit.blocks is not None:
            out.append("  block:\n")
            out.append("    block_sizes:\n" if unit.block_sizes else "    block_sizes: []\n")
            for size in unit.block_sizes or []:
                out.append(f"        - {size}\n")
            out.append("    blocks:\n" if unit.blocks else "    blocks: []\n")
            for name, nodes in unit.blocks:
                out.append(f"        - block: {go_scalar(name)}\n")
                if nodes and not skeleton:
                    out.append(f"          nodes: {go_scalar(nodes)}\n")
    return "".join(out) if out else "[]\n"
