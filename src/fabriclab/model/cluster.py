"""The cluster around the fabric: trays, their GPUs and HCAs, and NVLink domains."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import InputError, Problem
from .fabric import Fabric, Node, Port

if TYPE_CHECKING:
    from .networks import Networks

ZERO_UUID = "00000000-0000-0000-0000-000000000000"
SUGGESTED = 3  # names suggested for one that names nothing
UNKNOWN = "no tray, CA or node"  # how a problem of :meth:`Cluster.locate` naming nothing starts

# A host's HCA describes itself "<host> <hca>": what rdma-core's rdma-ndd writes by default
# (DEFAULT_ND_FORMAT "%h %d", hostname and device, rdma-ndd/rdma-ndd.c), and what the
# builder gives tray HCAs.
_HOST_HCA_DESC = re.compile(r"^(\S+) (\S+)$")


def host_and_hca(desc: str) -> tuple[str, str] | None:
    """The host and HCA names of a CA described ``"<host> <hca>"``, else None."""
    m = _HOST_HCA_DESC.match(desc)
    return (m.group(1), m.group(2)) if m else None


# What NVML reports for a GPU whose NVLink fabric registration failed (nvmlGpuFabricInfo_t:
# state NVML_GPU_FABRIC_STATE_COMPLETED, "status must be checked only if state returns
# complete", status an nvmlReturn_t; go-nvml nvml.h).  The one public capture of a failed
# GPU shows State Completed, Status "Insufficient Resources"
# (NVML_ERROR_INSUFFICIENT_RESOURCES), CliqueId 0 and an all-zero ClusterUUID
# (Azure/azhpc-images PR #506); healthSummary 2 = Unhealthy, DEGRADED_BW 1 = degraded.
FABRIC_OK = ("Completed", "Success")
FABRIC_FAULT = ("Completed", "Insufficient Resources")


@dataclass
class Gpu:
    """One GPU of a tray, with the NVLink domain and user partition it is in, and
    whether its NVLinks are faulted (then it is in no NVLink partition)."""

    tray: Tray
    index: int
    domain: Domain | None = None
    partition: int | None = None  # user NVLink partition id
    nvlink_fault: bool = False

    @property
    def fabric_state(self) -> tuple[str, str]:
        """NVML's fabric (state, status) as nvidia-smi prints them."""
        return FABRIC_FAULT if self.nvlink_fault else FABRIC_OK

    @property
    def cluster_uuid(self) -> str:
        """What NVML reports as the GPU's ClusterUuid: its domain's, else all zeros (no
        domain, or its NVLinks faulted)."""
        if self.nvlink_fault:
            return ZERO_UUID
        return self.domain.cluster_uuid if self.domain else ZERO_UUID

    @property
    def clique(self) -> int:
        """What NVML reports as the GPU's CliqueId: 0 for a faulted GPU, else the user
        partition's id, else the domain's default-partition clique, else 0 (a GPU in no
        partition)."""
        if self.nvlink_fault:
            return 0
        if self.partition is not None:
            return self.partition
        if self.domain is not None and self.domain.default_partition:
            return self.domain.clique
        return 0


@dataclass
class Tray:
    """A compute node (host): its GPUs and its HCAs (fabric nodes)."""

    host: str
    gpus: list[Gpu] = field(default_factory=list)
    hcas: list[Node] = field(default_factory=list)
    gpu_model: str = "gb200"  # a key of fabriclab.gpus.MODELS

    def hca(self, name: str) -> Node | None:
        """The tray's HCA named ``name`` (``mlx5_0``), if it has one."""
        for n in self.hcas:
            if n.hca == name:
                return n
        return None


@dataclass
class Domain:
    """An NVLink domain: its trays, the clique of its default partition, and its user
    partitions (partition id -> GPUs)."""

    name: str
    cluster_uuid: str
    clique: int
    default_partition: bool
    trays: list[Tray] = field(default_factory=list)
    partitions: dict[int, list[Gpu]] = field(default_factory=dict)

    @property
    def gpu_count(self) -> int:
        """GPUs in the domain's trays."""
        return sum(len(t.gpus) for t in self.trays)


@dataclass
class TierInfo:
    """One switch tier of the fabric, for ``inspect``."""

    tier: int
    role: str
    switches: int
    down: int  # links toward the hosts
    up: int  # links toward the next tier

    @property
    def oversubscription(self) -> float | None:
        """Links down per link up, None for the top tier."""
        return self.down / self.up if self.up else None


@dataclass
class Cluster:
    """A built spec: the InfiniBand fabric, the trays around it and the NVLink domains."""

    name: str
    fabric: Fabric
    trays: list[Tray]
    domains: list[Domain]
    description: str = ""
    cold_start: bool = False  # served with no LIDs until an SM assigns them (spec lids.power_on)
    networks: Networks | None = None  # the front end, storage, management ... networks
    # what the build says of the spec without refusing it: name patterns whose zero-padded
    # field the size outgrows (name_patterns.outgrown); validate, inspect and up print them
    warnings: list[Problem] = field(default_factory=list)

    def tray(self, host: str) -> Tray | None:
        """The tray of a host name, if there is one."""
        return self._trays_by_host().get(host)

    def nearest(self, text: str, trays: bool = False) -> list[str]:
        """The names nearest ``text`` (at most SUGGESTED, nearest first): trays,
        HOST/HCA, switches and CAs by name or description (each shown by its name), or
        with ``trays`` the trays alone."""
        names = {t.host: t.host for t in self.trays} if trays else self._names()
        near = difflib.get_close_matches(text, names, n=SUGGESTED * 2, cutoff=0.6)
        return list(dict.fromkeys(names[n] for n in near))[:SUGGESTED]

    def did_you_mean(self, text: str, trays: bool = False) -> str:
        """`` (did you mean 'a', 'b'?)`` of :meth:`nearest`, or nothing when none is near."""
        shown = self.nearest(text, trays)
        return f" (did you mean {', '.join(map(repr, shown))}?)" if shown else ""

    def no_tray(self, host: str) -> Problem:
        """The problem of ``host`` naming no tray, with the nearest trays."""
        return Problem(host, f"no such tray in this fabric{self.did_you_mean(host, trays=True)}")

    def _names(self) -> dict[str, str]:
        """The names a user may give (trays, HOST/HCA, node names and descriptions), each
        to the name it is shown by (a node's description to its name)."""
        cached = getattr(self, "_all_names", None)
        if cached is None:
            cached = {t.host: t.host for t in self.trays}
            for n in self.fabric.nodes:
                shown = f"{n.host}/{n.hca}" if n.host and n.hca else (n.name or n.desc)
                for x in (n.name, n.desc, shown):
                    if x:
                        cached.setdefault(x, shown)
            self._all_names = cached
        return cached

    def _trays_by_host(self) -> dict[str, Tray]:
        cached = getattr(self, "_by_host", None)
        if cached is None or len(cached) != len(self.trays):
            cached = {t.host: t for t in self.trays}
            self._by_host = cached
        return cached

    def nvlink_fault(self, host: str, gpus: list[int] | None = None) -> list[Gpu]:
        """Fail the NVLinks of ``host``'s GPUs ``gpus`` (None: the whole tray), as a
        tray's BMC fails an NVLink; the GPUs faulted.  Checked before anything changes."""
        chosen = self._gpus(host, gpus)
        for g in chosen:
            g.nvlink_fault = True
        return chosen

    def nvlink_clear(self, host: str, gpus: list[int] | None = None) -> list[Gpu]:
        """Clear the NVLink fault of ``host``'s GPUs ``gpus`` (None: the whole tray)."""
        chosen = self._gpus(host, gpus)
        for g in chosen:
            g.nvlink_fault = False
        return chosen

    def _gpus(self, host: str, gpus: list[int] | None) -> list[Gpu]:
        tray = self.tray(host)
        if tray is None:
            raise InputError([self.no_tray(host)])
        if not tray.gpus:
            raise InputError([Problem(host, "the tray has no GPUs")])
        if gpus is None:
            return list(tray.gpus)
        bad = [i for i in gpus if not 0 <= i < len(tray.gpus)]
        if bad:
            raise InputError(
                [Problem(host, f"no GPU {bad[0]} (the tray has GPUs 0-{len(tray.gpus) - 1})")]
            )
        return [tray.gpus[i] for i in sorted(set(gpus))]

    def tiers(self) -> list[TierInfo]:
        """Switch counts and link counts per tier (1 = leaf)."""
        out: dict[int, TierInfo] = {}
        for n in self.fabric.switches():
            info = out.setdefault(n.tier, TierInfo(n.tier, n.role or f"tier-{n.tier}", 0, 0, 0))
            info.switches += 1
            for p in n.iter_ports():
                if p.peer is None:
                    continue
                other = p.peer.node
                if other.is_switch and other.tier > n.tier:
                    info.up += 1
                elif not other.is_switch or other.tier < n.tier:
                    info.down += 1
        return [out[k] for k in sorted(out)]

    def locate(
        self, text: str | None, *, switches: bool = False, nearest: bool = True
    ) -> tuple[Port | None, str]:
        """The port ``text`` names, and its node (``port.node``), or (None, why not).

        A CA port: ``HOST`` (the tray's first HCA), ``HOST:HCA`` or ``HOST/HCA``,
        ``HOST:HCA:PORT``, or a CA by description, name, node id (``H-…``) or GUID
        (``0x…``); a CA is reached at its first cabled port.  None names the first
        tray's first HCA (the first CA when no tray has one).  Where the caller allows
        ``switches`` (where an SM or a tool may run on a managed switch), also a switch
        by description, name, id or GUID, at its port 0, and any node with ``:PORT``.
        A name that names nothing comes with the nearest names (unless not ``nearest``:
        the caller tries it as something else first)."""
        port, problem = self._ca_port(text)
        if port is not None or text is None:
            return port, problem
        found = self._switch_port(text) if switches else None
        if found is not None:
            return found
        if nearest and problem.startswith(UNKNOWN):  # the nearest names, a port number aside
            head, _, tail = text.rpartition(":")
            name = head if head and tail.isdigit() else text
            problem += self.did_you_mean(name.replace(":", "/"))
        return None, problem

    def _switch_port(self, text: str) -> tuple[Port | None, str] | None:
        """:meth:`locate` for a switch, or any node with ``:PORT`` (None: no node)."""
        fabric = self.fabric
        node = fabric.find(text)
        num = None
        if node is None and ":" in text:
            head, _, tail = text.rpartition(":")
            if tail.isdigit():
                node, num = fabric.find(head), int(tail)
        if node is None:
            return None
        if num is not None:
            if not (0 if node.is_switch else 1) <= num <= node.nports or node.ports[num] is None:
                return None, f"{node.desc!r} has no port {num}"
            return node.ports[num], ""
        if node.is_switch:
            return node.ports[0], ""
        return None

    def _ca_port(self, text: str | None) -> tuple[Port | None, str]:
        """:meth:`locate` for a CA port."""
        fabric = self.fabric
        node: Node | None = None
        port_num: int | None = None
        if text is None:
            for t in self.trays:
                if t.hcas:
                    node = t.hcas[0]
                    break
            if node is None:
                node = next((n for n in fabric.nodes if not n.is_switch), None)
            if node is None:
                return None, "the fabric has no CA to run from"
        else:
            parts = text.replace("/", ":").split(":")
            host = parts[0]
            tray = self.tray(host)
            if tray is not None:
                if len(parts) == 1:
                    node = tray.hcas[0] if tray.hcas else None
                    if node is None:
                        return None, f"tray {host!r} has no HCA"
                else:
                    node = tray.hca(parts[1])
                    if node is None:
                        names = ", ".join(h.hca or "?" for h in tray.hcas)
                        return None, f"tray {host!r} has no HCA {parts[1]!r} (it has {names})"
                    if len(parts) > 2:
                        if not parts[2].isdigit():
                            return None, f"bad port {parts[2]!r}"
                        port_num = int(parts[2])
            else:
                node = fabric.find(text)
                if node is None:
                    return None, f"{UNKNOWN} {text!r} in this fabric"
                if node.is_switch:
                    return None, f"{text!r} is a switch; run from a tray or CA"
        if port_num is not None:
            if not 1 <= port_num <= node.nports:
                return None, f"{node.desc} has ports 1-{node.nports}"
            return node.port(port_num), ""
        return _first_port(node), ""


def find_port(cluster: Cluster, text: str | None) -> tuple[Port | None, str]:
    """The CA port a tool runs from: :meth:`Cluster.locate` without switches."""
    return cluster.locate(text)


def _first_port(node: Node) -> Port:
    """Where a tool on a CA runs: its first cabled port, else port 1."""
    for p in node.iter_ports():
        if p.peer is not None:
            return p
    return node.port(1)
