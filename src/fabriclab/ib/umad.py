"""The kernel's user MAD interface (/dev/infiniband/umadN) as a program sees it: the
``ib_user_mad`` header a MAD is read and written with, the agent registration requests
and their ioctl numbers, and which MAD classes segment with RMPP.

Sources: ``include/uapi/rdma/ib_user_mad.h`` and ``rdma_user_ioctl.h`` (the same in
rdma-core 44 and 56 ``kernel-headers``), ``drivers/infiniband/core/user_mad.c``,
``mad.c`` and ``mad_rmpp.c``, ``include/rdma/ib_mad.h``.  fabriclab's host library
(``sim/host/hostlib``, in C) speaks the same ABI to the programs it is loaded into; the
tests check its constants against these.
"""

from __future__ import annotations

import struct

ABI_VERSION = 5  # IB_USER_MAD_ABI_VERSION: /sys/class/infiniband_mad/abi_version
MAX_AGENTS = 32  # IB_UMAD_MAX_AGENTS: agents one open umad file may register
MAX_CLASS_VERSION = 8  # MAX_MGMT_VERSION (mad_priv.h)

# struct ib_user_mad_hdr (64 bytes with the P_Key index; ENABLE_PKEY or REGISTER_AGENT2
# selects it): id, status, timeout_ms, retries, length in host order; qpn, qkey, lid,
# flow_label in network order.
HDR = struct.Struct("=IIIII4s4s2sBBBBBB16s4sH6x")
HDR_SIZE = HDR.size  # 64
HDR_FIELDS = (
    "id",
    "status",
    "timeout_ms",
    "retries",
    "length",
    "qpn",
    "qkey",
    "lid",
    "sl",
    "path_bits",
    "grh_present",
    "gid_index",
    "hop_limit",
    "traffic_class",
    "gid",
    "flow_label",
    "pkey_index",
)
STATUS_AT, LENGTH_AT, QPN_AT, LID_AT = 4, 16, 20, 28

# struct ib_user_mad_reg_req: id, method_mask[4] (u32 each: 128 bits), qpn, mgmt_class,
# mgmt_class_version, oui[3], rmpp_version
REG_REQ = struct.Struct("=I16sBBB3sBx")  # 28 bytes
# struct ib_user_mad_reg_req2: id, qpn, mgmt_class, mgmt_class_version, res, flags,
# method_mask[2] (u64 each), oui, rmpp_version, reserved[3]
REG_REQ2 = struct.Struct("=IIBBHI16sIB3x")  # 40 bytes
USER_RMPP = 1  # IB_USER_MAD_USER_RMPP: the only flag REGISTER_AGENT2 accepts

# ioctl numbers: _IOWR/_IOW/_IO on magic 0x1b (RDMA_IOCTL_MAGIC)
REGISTER_AGENT = 0xC01C1B01
UNREGISTER_AGENT = 0x40041B02
ENABLE_PKEY = 0x00001B03
REGISTER_AGENT2 = 0xC0281B04

# What a read returns for a request whose response never came (user_mad.c send_handler:
# the sent MAD's first IB_MGMT_MAD_HDR bytes with status ETIMEDOUT).
ETIMEDOUT = 110
MAD_HDR = 24  # IB_MGMT_MAD_HDR
TIMEOUT_SIZE = HDR_SIZE + MAD_HDR  # 88
MIN_WRITE = HDR_SIZE + 36  # IB_MGMT_RMPP_HDR: a shorter write is EINVAL

# RMPP (mad_rmpp.c, ib_mad.h): the classes the kernel segments, the header after the
# common MAD header, and each class's header length (ib_get_mad_data_offset).
RMPP_CLASSES = frozenset({0x03, 0x06, 0x10, 0x12, *range(0x30, 0x50)})
RMPP_AT = 24  # version, type, rtime_flags, status, seg_num (be32), paylen_newwin (be32)
RMPP_FLAGS_AT = 26
RMPP_ACTIVE, RMPP_FIRST, RMPP_LAST = 0x1, 0x2, 0x4
RMPP_TYPE_DATA = 1
RMPP_SEGMENT = 220  # IB_MGMT_RMPP_DATA: PayLen counts this much per segment


def class_header(mclass: int) -> int:
    """Where class ``mclass``'s data starts in a MAD (``ib_get_mad_data_offset``): the SA
    header 56, device management 64, vendor range 2's header 40, else 24."""
    if mclass == 0x03:
        return 56  # IB_MGMT_SA_HDR
    if mclass in (0x06, 0x10, 0x12):
        return 64  # IB_MGMT_DEVICE_HDR
    if 0x30 <= mclass <= 0x4F:
        return 40  # IB_MGMT_VENDOR_HDR
    return MAD_HDR
