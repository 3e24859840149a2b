"""What a data packet carries on an InfiniBand link: header sizes, the MTU encodings, and
the 4-byte words PortXmitData/PortRcvData count per packet (IBA Vol. 1, 5.2, 9.2 and
16.1.3.5).

PortXmitData/PortRcvData count "data octets, divided by 4 ... between (and not
including) the start of packet delimiter and the VCRC" (IBA 16.1.3.5, quoted in the
"InfiniBand Port Counters" page of NVIDIA UFM): LRH through ICRC.  ibsim counts a MAD as
72 words = LRH 8 + BTH 12 + DETH 8 + MAD 256 + ICRC 4 (ibsim sim_mad.c pc_updated),
which fixes the header sizes below.  A reliable-connection stream's packet carries LRH,
BTH, its payload (padded to 4 bytes, BTH PadCnt, IBA 9.2) and ICRC; the VCRC follows on
the wire but is not counted.
"""

from __future__ import annotations

LRH_BYTES = 8  # Local Route Header (IBA 7.7)
BTH_BYTES = 12  # Base Transport Header (IBA 9.2)
ICRC_BYTES = 4  # Invariant CRC (IBA 7.8.1)
VCRC_BYTES = 2  # Variant CRC (IBA 7.8.2): on the wire, not in the data counters
# 4-byte words a packet adds to PortXmitData/PortRcvData besides its payload
HEADER_WORDS = (LRH_BYTES + BTH_BYTES + ICRC_BYTES) // 4
# bytes a packet takes on the link besides its payload (for link capacity)
WIRE_OVERHEAD_BYTES = LRH_BYTES + BTH_BYTES + ICRC_BYTES + VCRC_BYTES

# PortInfo NeighborMTU / MtuCap encodings -> bytes (IBA 14.2.5.6, enum ib_mtu in
# rdma-core libibumad/umad_types.h: 1 = 256 ... 5 = 4096).
MTU_BYTES = {1: 256, 2: 512, 3: 1024, 4: 2048, 5: 4096}


def mtu_bytes(code: int) -> int:
    """The MTU an encoding stands for; an unknown code is the smallest, 256 bytes."""
    return MTU_BYTES.get(code, 256)


def words(payload: int) -> int:
    """The 4-byte words one packet with ``payload`` bytes adds to the data counters."""
    return -(-payload // 4) + HEADER_WORDS
