"""Partitions at run time: who may talk to whom by the P_Key tables the SM wrote, which
port of a path discards a packet that may not pass, and what that port counts.

The rules (IBA Vol. 1, 10.9 "Partitioning", section numbers of release 1.2.1):
- A P_Key is 16 bits: bit 15 is the membership type (1 full, 0 limited), bits 14-0 the
  partition.  A partition number of 0 (P_Keys 0x0000 and 0x8000) is invalid and
  matches nothing (10.9.1).
- Two end ports share a partition when their tables hold P_Keys of the same partition
  and at least one of the two is a full member; two limited members may not talk
  (10.9.3, P_Key matching).
- A CA discards a packet whose P_Key matches no entry of its table and counts it in
  PortInfo.P_KeyViolations; it sends trap 257 "Bad P_Key" to the SM (14.2.5.1 / Notice
  data ``ntc_257_258`` in OpenSM's ib_types.h).
- A switch external port with PortInfo.PartitionEnforcementInbound set discards a packet
  it receives whose partition is not in the port's table and counts
  PortRcvConstraintErrors; with PartitionEnforcementOutbound, one it would send, counting
  PortXmitConstraintErrors (16.1.3.5; UFM events 117/118 quote the same words).  It
  sends trap 259 "Bad P_Key (switch external port)" only when its port 0 has
  CapabilityMask.IsPKeySwitchExternalPortTrapSupported (bit 12, ib_types.h).
- A switch port compares partitions only, not membership: OpenSM copies a limited
  member's own limited P_Key into the switch port facing it (osm_pkey_mgr.c
  pkey_mgr_update_peer_port), so that member's packets could never pass its own port
  if the full/limited rule applied there.

Where a packet between tenants stops, with the tables OpenSM writes: the sending CA's
port carries the sender's own keys, so the packet passes its ingress port; the switch
port facing the receiver carries the receiver's keys, so the packet is discarded there
(PortXmitConstraintErrors) when that port enforces outbound, else at the receiving CA
(P_KeyViolations, trap 257).  PortRcvConstraintErrors grow at the ingress port only
for a packet with a P_Key its own port's table lacks (a misbehaving or stale sender).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ...ib.caps import CAP_IS_PKEY_SW_EXT_PORT_TRAP

# trap 257 at a CA (ib_types.h, "Bad P_Key"); 259 at a switch external port ("Bad P_Key
# (switch external port)")
from ...ib.mad.consts import TRAP_BAD_PKEY, TRAP_BAD_PKEY_SWITCH
from .state import SimPort

FULL = 0x8000  # membership bit (10.9.1)
PARTITION = 0x7FFF
_VIOLATIONS_MAX = 0xFFFF  # PortInfo.P_KeyViolations is 16 bits and stops there


def pkeys(port: SimPort) -> tuple[int, ...]:
    """The valid P_Keys of ``port``'s table, in table order (invalid ones left out)."""
    t = port.pkeys
    keys = (int.from_bytes(t[i : i + 2], "big") for i in range(0, len(t), 2))
    return tuple(k for k in keys if k & PARTITION)


def all_default(ports: Iterable[SimPort | None]) -> bool:
    """Whether every table of ``ports`` holds the default partition's full key 0xFFFF
    alone (or is empty): every packet then passes every check, and none need run."""
    for p in ports:
        if p is None:
            continue
        t = p.pkeys
        if t and (t[0] != 0xFF or t[1] != 0xFF or t.count(0) != len(t) - 2):
            return False
    return True


def keys_match(a: int, b: int) -> bool:
    """Whether P_Keys ``a`` and ``b`` let their holders talk: one partition, and at
    least one full member (10.9.3)."""
    return bool(a & PARTITION) and (a & PARTITION) == (b & PARTITION) and bool((a | b) & FULL)


def _match_any(key: int, table: Iterable[int]) -> bool:
    return any(keys_match(key, k) for k in table)


def share_partition(src: SimPort, dst: SimPort) -> bool:
    """Whether end ports ``src`` and ``dst`` share a partition by their P_Key tables:
    a common partition with at least one of them a full member in it."""
    theirs = pkeys(dst)
    return any(_match_any(k, theirs) for k in pkeys(src))


def admit(src: SimPort, dst: SimPort) -> bool:
    """The traffic engine's admission hook: whether a flow from ``src`` to ``dst`` gets
    through (``enforce`` says where it stops when it does not)."""
    return share_partition(src, dst)


def carried_pkey(src: SimPort, dst: SimPort) -> int | None:
    """The P_Key ``src``'s packets to ``dst`` carry: the first of its keys that matches
    one of ``dst``'s; when none does, its first key outside the default partition (the
    tenant it belongs to), else its first key; None with an empty table."""
    mine, theirs = pkeys(src), pkeys(dst)
    for k in mine:
        if _match_any(k, theirs):
            return k
    own = [k for k in mine if k & PARTITION != PARTITION]
    return own[0] if own else (mine[0] if mine else None)


@dataclass(frozen=True)
class Drop:
    """Where a packet was discarded for its P_Key, and what that port counts."""

    port: SimPort
    counter: str | None  # PortRcvConstraintErrors / PortXmitConstraintErrors; None at a CA
    trap: int | None  # 257 / 259, or None when the node sends none
    pkey: int


def _in_partition(key: int, port: SimPort) -> bool:
    part = key & PARTITION
    return any(k & PARTITION == part for k in pkeys(port))


def enforce(path: Sequence[SimPort], pkey: int) -> Drop | None:
    """Run a packet carrying ``pkey`` along ``path`` - the ports it crosses in order:
    the sending CA port, then for each switch its ingress and egress port, then the
    receiving CA port - and say where it is discarded (None: it arrives)."""
    for i, port in enumerate(path[1:-1], start=1):
        ingress = i % 2 == 1
        enabled = port.part_enf_in if ingress else port.part_enf_out
        if enabled and not _in_partition(pkey, port):
            port0 = port.node.ports[0]
            traps = port0 is not None and port0.cap_mask & CAP_IS_PKEY_SW_EXT_PORT_TRAP
            return Drop(
                port,
                "PortRcvConstraintErrors" if ingress else "PortXmitConstraintErrors",
                TRAP_BAD_PKEY_SWITCH if traps else None,
                pkey,
            )
    dst = path[-1]
    if not _match_any(pkey, pkeys(dst)):
        return Drop(dst, None, TRAP_BAD_PKEY, pkey)
    return None


def count(drop: Drop, packets: int = 1) -> None:
    """Count ``packets`` discarded at ``drop``'s port: its constraint-error counter (the
    PMA views saturate it at the field's width), or a CA's P_KeyViolations (16 bits,
    stops at its maximum)."""
    port = drop.port
    if drop.counter is not None:
        port.counters.add(drop.counter, packets)
    else:
        port.pkey_violations = min(_VIOLATIONS_MAX, port.pkey_violations + packets)
        # PortInfo encoded anew; not changed(): the routes do not depend on it
        port.pi = None
