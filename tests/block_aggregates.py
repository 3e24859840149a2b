"""Slurm's aggregated blocks, as topology/block forms them from topology.conf, and the
check that none crosses a pod when it need not; for the block-order tests, in-process and
with the real Slurm."""

from __future__ import annotations

from fabriclab.model.build import build
from fabriclab.spec.load import load_spec


def aggregates(blocks: list[list[str]], sizes: list[int]) -> list[set[str]]:
    """The node sets Slurm aggregates ``blocks`` (in topology.conf order) into for each
    larger block size: runs of 2^k consecutive blocks, aligned from the first (blocks
    1-2, 3-4, then 1-4 …: ``AggregatedBlock=nvl[1-2]`` in ``scontrol show topology``)."""
    out = []
    base = sizes[0]
    for size in sizes[1:]:
        width = size // base
        for start in range(0, len(blocks) - width + 1, width):
            out.append({node for block in blocks[start : start + width] for node in block})
    return out


def needless_crossings(
    runs: list[set[str]], blocks: list[list[str]], pods: dict[str, str]
) -> list[set[str]]:
    """The aggregates that cross a pod although they need not: an aggregate of n blocks
    that holds blocks of a pod whose block count is a multiple of n, and blocks of other
    pods too (that pod could have held whole aggregates of n)."""
    base = min(len(block) for block in blocks)
    per_pod: dict[str, int] = {}
    for block in blocks:
        pod = pods[block[0]]
        per_pod[pod] = per_pod.get(pod, 0) + 1
    bad = []
    for run in runs:
        count = len(run) // base
        touched = {pods[node] for node in run}
        if len(touched) > 1 and any(per_pod[pod] % count == 0 for pod in touched):
            bad.append(run)
    return bad


def pods_of(spec: str) -> dict[str, str]:
    """Tray -> its pod: the spines (tier 2) above the leaves its HCAs are cabled to."""
    cluster = build(load_spec(spec))
    out = {}
    for tray in cluster.trays:
        spines = set()
        for hca in tray.hcas:
            for port in hca.iter_ports():
                if port.peer is None:
                    continue
                for up in port.peer.node.iter_ports():
                    if up.peer is not None and up.peer.node.is_switch and up.peer.node.tier == 2:
                        spines.add(up.peer.node.name)
        out[tray.host] = ",".join(sorted(spines))
    return out
