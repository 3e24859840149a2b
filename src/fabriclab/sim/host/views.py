"""What the tools on a tray see of the running fabric now: its ``ibnetdiscover`` (links
as they are: a link down is absent, a degraded one shows the width and speed it
retrained at) and its GPUs' ``nvidia-smi`` answers (NVLink faults included), for
``fabriclab topology --name N`` and ``fabriclab nvidia-smi``; and what the fabric knows
of its cluster that no tool shows (its trays, the spec's names of its NVLink domains).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ...errors import InputError, Problem
from ...formats import ibnetdiscover, nvidia_smi
from ...ib.enums import PhysState, PortState
from ...model.cluster import Cluster
from ...model.nvlink import partition_names
from ..fabric.state import SimFabric


@contextmanager
def _as_running(sim: SimFabric) -> Iterator[None]:
    """The model's ports show, for as long as this lasts, the link state the server
    holds: a link is up where both its ends are LinkUp and not Down (libibnetdisc
    follows a port whose PortState is above Down, and reads NodeInfo through it), at the
    width and speed it trained at.  Put back after (the
    model is the spec's fabric; the server's loop is the only user meanwhile)."""
    saved = []
    for n in sim.nodes:
        for p in n.ports:
            if p is None or p.num == 0:
                continue
            m = p.fabric_port
            saved.append((m, m.peer, m.phys, m.width, m.speed))
            if m.peer is None:
                continue
            q = p.peer
            up = q is not None and all(
                e.phys == PhysState.LINKUP and e.state != PortState.DOWN for e in (p, q)
            )
            if up:
                m.width = p.width_trained or m.width
                m.speed = p.speed_trained or m.speed
            else:  # the real ibnetdiscover lists no link there: as if uncabled
                m.peer, m.phys = None, PhysState.POLLING
    try:
        yield
    finally:
        for m, peer, phys, width, speed in saved:
            m.peer, m.phys, m.width, m.speed = peer, phys, width, speed


def ibnetdiscover_now(cluster: Cluster, sim: SimFabric, where: str | None) -> str:
    """``ibnetdiscover`` run now on ``where`` (a tray, HOST/HCA; default: the first tray
    whose first HCA link is up)."""
    if where:
        port, problem = cluster.locate(where)
        if port is None:
            raise InputError([Problem(where, problem or "no such CA port")])
    else:
        port = None
        for tray in cluster.trays:
            for hca in tray.hcas:
                for q in hca.iter_ports():
                    sp = sim.port_of(q)
                    if q.peer is not None and sp.phys == PhysState.LINKUP:
                        port = q
                        break
                if port is not None:
                    break
            if port is not None:
                break
        if port is None:
            raise InputError([Problem("--from", "no tray has an HCA link up")])
    with _as_running(sim):
        return ibnetdiscover.render(cluster.fabric, port)


def nvidia_smi_pdsh(cluster: Cluster) -> str:
    """``pdsh -w <every tray> nvidia-smi <topograph's query>`` now."""
    return nvidia_smi.render_pdsh([t for t in cluster.trays if t.gpus])


def nvidia_smi_on(cluster: Cluster, host: str, args: list[str]) -> str:
    """What ``nvidia-smi ARGS`` prints on tray ``host`` now: ``-q`` or the
    ``--query-gpu=… --format=csv`` form."""
    name = host.replace("/", ":").split(":")[0]
    tray = cluster.tray(name)
    if tray is None:
        raise InputError([cluster.no_tray(host)])
    if not tray.gpus:
        raise InputError([Problem(host, "the tray has no GPUs")])
    return nvidia_smi.render(tray, [str(a) for a in args])


def cluster_facts(cluster: Cluster) -> dict:
    """What the fabric knows of its cluster beyond the tools' answers, so that
    ``topology --name`` names and orders blocks as ``topology SPEC`` does: ``domains``,
    each NVLink partition's name in the spec (``<ClusterUUID>.<CliqueId>`` ->
    ``nvl72-r01``), and ``trays``, the trays cabled to the fabric, in the spec's order
    (one the scan does not reach is a tray whose every link is down)."""
    return {
        "domains": partition_names(cluster.domains),
        "trays": [
            t.host
            for t in cluster.trays
            if any(p.peer is not None for hca in t.hcas for p in hca.iter_ports())
        ],
    }
