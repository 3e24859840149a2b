"""A tray's HCAs as its host sees them: identity, each port's PortInfo fields, P_Key
table and counters, taken from the running fabric as one JSON-able document (the admin
socket's ``tray`` request; :mod:`.sysfs` writes it out as /sys/class/infiniband).

Counters are read as the kernel's sysfs reads them, through the PMA's two views
(:class:`~..fabric.counters.Counters`): the narrow error counters and PortXmitWait from
PortCounters, the data and packet counters from PortCountersExtended.  Reading flushes
the port (:meth:`~..fabric.state.SimPort.flush`), so traffic and MADs up to now are counted.
"""

from __future__ import annotations

from ...errors import InputError, Problem
from ...model.cluster import Cluster
from ..fabric.state import SimFabric, SimPort

# libibumad lists at most UMAD_MAX_DEVICES (32) devices (rdma-core libibumad/umad.h); a
# tray with more HCAs than that is refused before any work.
HCAS_MAX = 32


def _port(sp: SimPort) -> dict:
    m = sp.fabric_port
    speed = sp.speed_trained or m.speed
    width = sp.width_trained or m.width
    c = sp.flush()
    return {
        "num": sp.num,
        "lid": sp.lid,
        "lmc": sp.lmc,
        "sm_lid": sp.smlid,
        "sm_sl": sp.smsl,
        "state": int(sp.state),
        "phys": int(sp.phys),
        "cap_mask": sp.cap_mask,
        "gid_prefix": sp.gid_prefix,
        "guid": sp.guid,
        "speed": speed.token,
        "lanes": width.lanes,
        "pkeys": [int.from_bytes(sp.pkeys[i : i + 2], "big") for i in range(0, len(sp.pkeys), 2)],
        "counters": c.view(),
        "counters_ext": c.view_ext(),
    }


def tray_view(cluster: Cluster, sim: SimFabric, host: object) -> dict:
    """Tray ``host``'s HCAs, in their order, with their ports (InputError: no such
    tray, or more HCAs than libibumad lists)."""
    tray = cluster.tray(host) if isinstance(host, str) else None
    if tray is None:
        raise InputError([cluster.no_tray(str(host))])
    host = tray.host
    if len(tray.hcas) > HCAS_MAX:
        raise InputError(
            [Problem(host, f"has {len(tray.hcas)} HCAs; a host lists at most {HCAS_MAX}")]
        )
    hcas: list[dict] = []
    for node in tray.hcas:
        sn = sim.node_of(node)
        hcas.append(
            {
                "name": node.hca or f"mlx5_{len(hcas)}",
                "desc": node.desc,
                "node_guid": node.guid,
                "sys_image_guid": node.sysimgguid,
                "vendor_id": node.vendid,
                "device_id": node.devid,
                "revision": node.revision,
                "ports": [_port(sp) for sp in sn.ports if sp is not None and sp.num != 0],
            }
        )
    return {"host": tray.host, "hcas": hcas}
