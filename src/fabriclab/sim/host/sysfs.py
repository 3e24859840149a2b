"""A tray's /sys/class/infiniband, written from the running fabric's state (a
:mod:`.hostview` document) and kept live: the files a ConnectX host's kernel shows, in
the kernel's formats, each replaced atomically (written aside, then renamed) so a reader
never sees half a value.

The tree is a sys root: ``DIR/class/infiniband/mlx5_N/...`` and
``DIR/class/infiniband_mad/...``, what ``node_exporter --path.sysfs=DIR`` reads.

Formats (Linux ``drivers/infiniband/core/sysfs.c`` unless noted):

- device: ``node_type`` ``"%u: %s"`` (``1: CA``); ``node_guid``/``sys_image_guid``
  ``"%04x:%04x:%04x:%04x"``; ``node_desc`` ``"%.64s"``; mlx5 (``hw/mlx5/main.c``):
  ``fw_ver`` ``"%d.%d.%04d"``, ``hw_rev`` ``"%x"`` of the PCI revision, ``hca_type``
  ``"MT%d"`` of the decimal PCI device id, ``board_id`` the PSID.
- port: ``state`` ``"%d: %s"`` (NOP DOWN INIT ARMED ACTIVE); ``phys_state`` ``"%u: %s"``;
  ``rate`` ``"%d%s Gb/sec (%dX%s)"`` from the per-lane rate in deci-Gb/s (SDR 25 ...
  NDR 1000, XDR 2000) times the lanes; ``lid``/``sm_lid`` ``"0x%x"``;
  ``lid_mask_count``/``sm_sl`` ``"%u"``; ``cap_mask`` ``"0x%08x"``; ``link_layer``;
  ``gids/0`` ``"%pI6"`` (8 groups of 4 hex digits); ``pkeys/<i>`` ``"0x%04x"``.
- ``counters/``: ``pma_attrs_ext``, the set the kernel uses when the PMA's ClassPortInfo
  has IsExtendedWidthSupported (a ConnectX's 0x5A00 has it): the error counters and
  PortXmitWait from PortCounters, the data and packet counters 64-bit from
  PortCountersExtended, data in 4-octet words (node_exporter multiplies by 4, procfs
  ``sysfs/class_infiniband.go``).  Mainline has no ``counters_ext/`` (it was the old
  qib driver's), so none is written; procfs treats it as optional.
- ``hw_counters/`` (mlx5 ``hw/mlx5/counters.c``): the InfiniBand port's Q counters
  (``basic_q_cnts``, ``out_of_seq_q_cnts``, ``retrans_q_cnts``, ``extended_err_cnts``)
  and ``lifespan``; the RoCE and congestion ones are absent on an IB port.  Nothing
  in the fabric drives them (there are no queue pairs), so they read 0; ``lifespan``
  is the core's default of 10 ms (``core/counters.c``).  node_exporter 1.9 requires the
  directory for ``mlx5_*`` devices.
- ``class/infiniband_mad`` (``core/user_mad.c``): ``abi_version`` 5; ``umad<N>`` and
  ``issm<N>`` with ``ibdev`` and ``port``, N in device and port order.
"""

from __future__ import annotations

import stat
import time
from collections.abc import Callable
from pathlib import Path

from ... import safedir
from ...errors import InputError, Problem

MARK = ".fabriclab-sysfs"  # in DIR: the tree is ours to replace

_STATE = {0: "NOP", 1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE", 5: "ACTIVE_DEFER"}
_PHYS = (
    "<unknown>",
    "Sleep",
    "Polling",
    "Disabled",
    "PortConfigurationTraining",
    "LinkUp",
    "LinkErrorRecovery",
    "Phy Test",
)
# core/sysfs.c rate_show: each speed's per-lane rate in deci-Gb/s
_LANE_DECI_GB = {
    "SDR": 25,
    "DDR": 50,
    "QDR": 100,
    "FDR10": 100,
    "FDR": 140,
    "EDR": 250,
    "HDR": 500,
    "NDR": 1000,
    "XDR": 2000,
}
# sysfs counters/ name -> (PMA counter, from PortCountersExtended): core/sysfs.c pma_attrs_ext
COUNTERS = {
    "symbol_error": ("SymbolErrorCounter", False),
    "link_error_recovery": ("LinkErrorRecoveryCounter", False),
    "link_downed": ("LinkDownedCounter", False),
    "port_rcv_errors": ("PortRcvErrors", False),
    "port_rcv_remote_physical_errors": ("PortRcvRemotePhysicalErrors", False),
    "port_rcv_switch_relay_errors": ("PortRcvSwitchRelayErrors", False),
    "port_xmit_discards": ("PortXmitDiscards", False),
    "port_xmit_constraint_errors": ("PortXmitConstraintErrors", False),
    "port_rcv_constraint_errors": ("PortRcvConstraintErrors", False),
    "local_link_integrity_errors": ("LocalLinkIntegrityErrors", False),
    "excessive_buffer_overrun_errors": ("ExcessiveBufferOverrunErrors", False),
    "VL15_dropped": ("VL15Dropped", False),
    "port_xmit_data": ("PortXmitData", True),
    "port_rcv_data": ("PortRcvData", True),
    "port_xmit_packets": ("PortXmitPkts", True),
    "port_xmit_wait": ("PortXmitWait", False),
    "port_rcv_packets": ("PortRcvPkts", True),
    "unicast_rcv_packets": ("PortUnicastRcvPkts", True),
    "unicast_xmit_packets": ("PortUnicastXmitPkts", True),
    "multicast_rcv_packets": ("PortMulticastRcvPkts", True),
    "multicast_xmit_packets": ("PortMulticastXmitPkts", True),
}
# mlx5 hw/mlx5/counters.c: basic_q_cnts, out_of_seq_q_cnts, retrans_q_cnts,
# extended_err_cnts (an InfiniBand port of a ConnectX-5 or later has all four)
HW_COUNTERS = (
    "rx_write_requests",
    "rx_read_requests",
    "rx_atomic_requests",
    "rx_dct_connect",
    "out_of_buffer",
    "out_of_sequence",
    "duplicate_request",
    "rnr_nak_retry_err",
    "packet_seq_err",
    "implied_nak_seq_err",
    "local_ack_timeout_err",
    "resp_local_length_error",
    "resp_cqe_error",
    "req_cqe_error",
    "req_remote_invalid_request",
    "req_remote_access_errors",
    "resp_remote_access_errors",
    "resp_cqe_flush_error",
    "req_cqe_flush_error",
)
LIFESPAN_MS = 10
# Firmware by PCI device id.  ConnectX-7: a real NDR cluster's ibdiagnet run (fixture
# ibdiagnet2.log: "Devid: 4129(0x1021), PSID: MT_0000000970, Latest FW
# Version:28.41.1000"); ConnectX-5: real ibstat ("Firmware version: 16.24.1000",
# fixture ibstat.txt).  ConnectX-6 and ConnectX-8 carry their families' firmware major
# numbers (20, 40); their minor numbers are not taken from a captured host.
FIRMWARE = {0x1021: "28.41.1000", 0x1017: "16.24.1000", 0x101B: "20.41.1000", 0x1023: "40.44.1000"}
# board_id is the card's PSID; only the ConnectX-7's is known from a real host (above),
# the others read as a PSID of zeros.
BOARD = {0x1021: "MT_0000000970"}
_BOARD_OTHER = "MT_0000000000"
_FIRMWARE_OTHER = "1.0.0000"


def guid_text(guid: int) -> str:
    """A GUID as sysfs shows it: four be16 groups."""
    return ":".join(f"{guid >> s & 0xFFFF:04x}" for s in (48, 32, 16, 0))


def gid_text(prefix: int, guid: int) -> str:
    """A GID as ``%pI6`` prints it: eight groups of four hex digits."""
    v = prefix << 64 | guid
    return ":".join(f"{v >> s & 0xFFFF:04x}" for s in range(112, -16, -16))


def rate_text(speed: str, lanes: int) -> str:
    """The ``rate`` file: ``400 Gb/sec (4X NDR)``."""
    rate = _LANE_DECI_GB.get(speed, 25) * lanes
    name = speed if speed in _LANE_DECI_GB else "SDR"  # the kernel's default
    return f"{rate // 10}{'.5' if rate % 10 else ''} Gb/sec ({lanes}X {name})"


def _port_files(p: dict) -> dict[str, str]:
    state, phys = p["state"], p["phys"]
    files = {
        "state": f"{state}: {_STATE.get(state, 'UNKNOWN')}",
        "phys_state": f"{phys}: {_PHYS[phys] if 0 <= phys < len(_PHYS) else '<unknown>'}",
        "rate": rate_text(p["speed"], p["lanes"]),
        "lid": f"0x{p['lid']:x}",
        "lid_mask_count": f"{p['lmc']}",
        "sm_lid": f"0x{p['sm_lid']:x}",
        "sm_sl": f"{p['sm_sl']}",
        "cap_mask": f"0x{p['cap_mask']:08x}",
        "link_layer": "InfiniBand",
        "gids/0": gid_text(p["gid_prefix"], p["guid"]),
    }
    for i, pkey in enumerate(p["pkeys"]):
        files[f"pkeys/{i}"] = f"0x{pkey:04x}"
    for name, (counter, ext) in COUNTERS.items():
        files[f"counters/{name}"] = str((p["counters_ext"] if ext else p["counters"])[counter])
    for name in HW_COUNTERS:
        files[f"hw_counters/{name}"] = "0"
    files["hw_counters/lifespan"] = str(LIFESPAN_MS)
    return files


def render(view: dict) -> dict[str, str]:
    """Every file of the tray ``view`` (:func:`.hostview.tray_view`): path under the sys
    root -> content (each ends in a newline, as the kernel's do)."""
    files: dict[str, str] = {"class/infiniband_mad/abi_version": "5"}
    umad = 0
    for hca in view["hcas"]:
        fw = FIRMWARE.get(hca["device_id"], _FIRMWARE_OTHER)
        board = BOARD.get(hca["device_id"], _BOARD_OTHER)
        d = f"class/infiniband/{hca['name']}"
        files.update(
            {
                f"{d}/node_type": "1: CA",
                f"{d}/node_guid": guid_text(hca["node_guid"]),
                f"{d}/sys_image_guid": guid_text(hca["sys_image_guid"]),
                f"{d}/node_desc": hca["desc"].encode()[:64].decode(errors="ignore"),
                f"{d}/fw_ver": fw,
                f"{d}/hw_rev": f"{hca['revision']:x}",
                f"{d}/hca_type": f"MT{hca['device_id']}",
                f"{d}/board_id": board,
            }
        )
        for p in hca["ports"]:
            for rel, text in _port_files(p).items():
                files[f"{d}/ports/{p['num']}/{rel}"] = text
            for kind in ("umad", "issm"):
                files[f"class/infiniband_mad/{kind}{umad}/ibdev"] = hca["name"]
                files[f"class/infiniband_mad/{kind}{umad}/port"] = str(p["num"])
            umad += 1
    return {k: v + "\n" for k, v in files.items()}


class Tree:
    """The tree under ``root`` (a sys root), rewritten file by file as values change,
    through :mod:`fabriclab.safedir`: ``root`` must be the caller's own directory, nothing
    in it another user's, and no symbolic link in it is followed."""

    def __init__(self, root: Path):
        self.root = root
        self.written: dict[str, str] = {}
        self._ident: tuple[int, int] | None = None  # the directory claimed
        self._prune = False  # an old tree was taken over: remove what it has beyond ours

    def claim(self) -> None:
        """Make ``root`` ours: it must be missing, empty, or a tree written before (then
        its files stay readable until the first update replaces them, and what that
        update does not write goes); anything else is refused."""
        with safedir.open_dir(self.root) as d:
            d.check_entries()
            names = d.names()
            mark = d.entry(MARK)
            if names and (mark is None or not stat.S_ISREG(mark.st_mode)):
                raise InputError(
                    [
                        Problem(
                            str(self.root),
                            "is not empty and not a tree fabriclab wrote; pick another",
                        )
                    ]
                )
            d.check_entries(_OURS, deep=True)
            d.remove(_ASIDE)  # only what a writer that died left half written
            self._prune = mark is not None
            _sweep(d, "", None)  # no link in the old tree is followed, nor kept
            d.write(MARK, b"written by fabriclab sysfs\n")
            d.sub(_ASIDE).close()  # beside the tree, on its file system: renames are atomic
            self._ident = d.ident()
        self.written = {}

    def update(self, files: dict[str, str]) -> int:
        """Write the files whose content changed since the last update (each by rename,
        never in place); how many were written.  The directory must still be the one
        claimed."""
        changed = [(rel, text) for rel, text in files.items() if self.written.get(rel) != text]
        if not changed:
            return 0
        if self._ident is None:
            self.claim()
        with safedir.open_dir(self.root, create=False) as root:
            if root.ident() != self._ident:
                raise safedir.UnsafeDir(
                    [Problem(str(self.root), "was replaced since it was written: stopping")]
                )
            dirs = {"": root}
            try:
                aside = dirs[_ASIDE] = root.sub(_ASIDE)
                for rel, text in changed:
                    parent, _, name = rel.rpartition("/")
                    d = dirs.get(parent) or _enter(dirs, parent)
                    d.write(name, text.encode(), aside=aside)
                    self.written[rel] = text
                if self._prune:
                    keep = set(files)
                    keep.update(r[: i + 1] for r in files for i, c in enumerate(r) if c == "/")
                    _sweep(root, "", keep)
                    self._prune = False
            finally:
                for rel, d in dirs.items():
                    if rel:
                        d.close()
        return len(changed)


_ASIDE = ".tmp"
_OURS = ("class", _ASIDE)  # what a tree holds beside its mark


def _sweep(d: safedir.Dir, rel: str, keep: set[str] | None) -> None:
    """Remove under ``d`` (at ``rel`` in the tree) every entry that is neither a file
    nor a directory (a symbolic link is removed, never followed) and, given ``keep``
    (files, and directories as ``a/b/``), every file or directory not in it; the mark
    and the aside directory stay."""
    for name in d.names():
        if not rel and name in (MARK, _ASIDE):
            continue
        path = f"{rel}{name}"
        st = d.entry(name)
        if st is None:
            continue
        if stat.S_ISDIR(st.st_mode):
            below = path + "/"
            if keep is None or below in keep:
                with d.sub(name, create=False) as sub:
                    _sweep(sub, below, keep)
                continue
        elif stat.S_ISREG(st.st_mode) and (keep is None or path in keep):
            continue
        d.remove(name)


def _enter(dirs: dict[str, safedir.Dir], rel: str) -> safedir.Dir:
    """The open directory ``rel`` under the root (made when missing), entered one
    component at a time from the nearest one open."""
    parent, _, name = rel.rpartition("/")
    up = dirs.get(parent) or _enter(dirs, parent)
    d = dirs[rel] = up.sub(name)
    return d


def keep_live(
    fetch: Callable[[], dict | None],
    root: Path,
    period: float,
    once: bool = False,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Write the tree from ``fetch()`` (a :func:`.hostview.tray_view` document, or None
    when the fabric has gone) every ``period`` seconds until the fabric goes (or once);
    how many times it was written."""
    tree = Tree(root)
    rounds = 0
    while True:
        view = fetch()
        if view is None:
            return rounds
        if not rounds:
            tree.claim()  # after the first answer: a bad tray or fabric touches nothing
        tree.update(render(view))
        rounds += 1
        if once:
            return rounds
        sleep(period)
