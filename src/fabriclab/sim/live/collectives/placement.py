"""Where a collective's ranks sit: each rank a GPU of a tray, the ranks grouped by the
NVLink that joins them, and each group's HCAs: the ones NCCL uses to leave it.

A group is what NCCL treats as a node: GPUs that reach each other over NVLink.  That is
an NVLink partition of a domain (GPUs of several trays with the same clique, NVIDIA's
multi-node NVLink), else the GPUs of one tray (joined by the tray's own NVLink), and a
GPU whose NVLinks failed is a group of its own.  Each GPU leaves its group by the HCA
closest to it, GPU i of g by HCA i*h/g of the tray's h (one per GPU on GB200 and DGX
H100 trays: a rail each); when ``NCCL_IB_HCA`` leaves that HCA out the GPU uses the
tray's others (as NCCL's PXN and PCI paths do).  Ranks are numbered as nccl-tests
numbers them: node by node in the node list, a node's GPUs in order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ....errors import InputError, Problem
from ....gpus import model as gpu_model
from ....model.cluster import Cluster, Gpu, Tray
from ....spec import hostlist
from ...fabric.state import SimFabric, SimPort
from .knobs import HcaFilter

_GPUS = re.compile(r"^(\d+)(?:-(\d+))?$")


@dataclass
class Group:
    """GPUs joined by NVLink (NCCL's node): its ranks, its HCA ports in the order its
    ranks reach them, and what NCCL gets of each of its GPUs' NVLink each way (GB/s)."""

    key: tuple
    ranks: list[int] = field(default_factory=list)
    nics: list[SimPort] = field(default_factory=list)
    rank_nics: list[SimPort] = field(default_factory=list)  # each rank's, as ``ranks``
    nvlink_GBps: float = 0.0


@dataclass
class Placement:
    """The ranks (tray, GPU) in rank order and their groups, in the order of their
    first rank."""

    ranks: list[tuple[Tray, Gpu]]
    groups: list[Group]
    compute_capability: int
    gpu_name: str  # rank 0's, as nvidia-smi and nccl-tests name it

    @property
    def nnodes(self) -> int:
        return len(self.groups)

    @property
    def nranks(self) -> int:
        return len(self.ranks)

    @property
    def nvlink(self) -> bool:
        """Whether the ranks of every group share NVLink (else: PCI)."""
        return all(g.nvlink_GBps > 0 for g in self.groups)


def _entries(text: str) -> list[str]:
    """The comma-separated entries of ``text`` outside brackets."""
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return [e.strip() for e in out if e.strip()]


def parse_nodes(text: str) -> list[tuple[str, list[int] | None]]:
    """``--nodes``: a Slurm hostlist whose entries may end ``:GPUS``, one GPU index or
    a range (``gb-r01-t[01-02]:0-1``): the hosts in order, each with its GPUs (None:
    as many as ``--gpus-per-node``)."""
    out: list[tuple[str, list[int] | None]] = []
    for entry in _entries(text):
        hl, sep, gpus = entry.rpartition(":") if ":" in entry else (entry, "", "")
        picked: list[int] | None = None
        if sep:
            m = _GPUS.match(gpus)
            if not m:
                raise InputError([Problem("--nodes", f"GPUs {gpus!r} of {hl!r}: want N or N-M")])
            lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
            if hi < lo:
                raise InputError([Problem("--nodes", f"GPUs {gpus!r}: the range runs backwards")])
            picked = list(range(lo, hi + 1))
        try:
            hosts = hostlist.expand(hl)
        except hostlist.HostlistError as e:
            raise InputError([Problem("--nodes", str(e))]) from None
        out.extend((h, picked) for h in hosts)
    seen: set[str] = set()
    for h, _ in out:
        if h in seen:
            raise InputError([Problem("--nodes", f"host {h!r} appears twice")])
        seen.add(h)
    if not out:
        raise InputError([Problem("--nodes", "names no host")])
    return out


def _group_key(tray: Tray, gpu: Gpu) -> tuple:
    if gpu.nvlink_fault:
        return ("gpu", tray.host, gpu.index)
    if gpu.domain is not None and gpu.clique:
        return ("nvlink", gpu.domain.name, gpu.clique)
    return ("tray", tray.host)


def _nic(tray: Tray, gpu: Gpu, allowed: list, host: str):
    """The HCA GPU ``gpu`` of ``tray`` leaves by: its own when allowed, else one of the
    tray's allowed ones."""
    h, g = len(tray.hcas), max(len(tray.gpus), 1)
    own = tray.hcas[gpu.index * h // g] if h else None
    if own is not None and own in allowed:
        return own
    if not allowed:
        raise InputError([Problem(host, "NCCL_IB_HCA leaves this tray no HCA")])
    return allowed[gpu.index % len(allowed)]


def place(
    cluster: Cluster,
    sim: SimFabric,
    nodes: str,
    gpus_per_node: int | None = None,
    hca: HcaFilter | None = None,
) -> Placement:
    """The ranks of a job on ``nodes`` with ``gpus_per_node`` GPUs each (default: every
    GPU of each tray), using the HCAs ``hca`` allows."""
    hca = hca or HcaFilter()
    ranks: list[tuple[Tray, Gpu]] = []
    for host, picked in parse_nodes(nodes):
        tray = cluster.tray(host)
        if tray is None:
            raise InputError([cluster.no_tray(host)])
        want = picked if picked is not None else list(range(gpus_per_node or len(tray.gpus)))
        if not tray.gpus:
            raise InputError([Problem(host, "this tray has no GPU")])
        for i in want:
            if i >= len(tray.gpus):
                raise InputError([Problem(host, f"GPU {i}: the tray has {len(tray.gpus)} GPUs")])
            ranks.append((tray, tray.gpus[i]))
    groups: dict[tuple, Group] = {}
    ccs = set()
    for r, (tray, gpu) in enumerate(ranks):
        spec = gpu_model(tray.gpu_model)
        ccs.add(spec.compute_capability)
        key = _group_key(tray, gpu)
        g = groups.setdefault(key, Group(key, nvlink_GBps=spec.nccl_nvlink_GBps))
        g.nvlink_GBps = min(g.nvlink_GBps, spec.nccl_nvlink_GBps)
        g.ranks.append(r)
    ordered = list(groups.values())
    if len(ordered) > 1:
        for g in ordered:
            for r in g.ranks:
                tray, gpu = ranks[r]
                allowed = [n for n in tray.hcas if hca.allows(str(n.hca or ""), 1)]
                node = _nic(tray, gpu, allowed, tray.host)
                port = sim.port_of(node.port(1))
                g.rank_nics.append(port)
                if port not in g.nics:
                    g.nics.append(port)
    return Placement(ranks, ordered, min(ccs), gpu_model(ranks[0][0].gpu_model).name)
