"""The devices fabriclab knows, with the identity they show in NodeInfo and NodeDescription.

Facts and where they come from:
- PCI device ids: pci.ids (0x1021 ConnectX-7, 0x1023 ConnectX-8, 0xd2f0 Quantum HDR,
  0xd2f2 Quantum-2 NDR, 0xd2f4 Quantum-3); vendor id 0x2c9 (Mellanox IEEE OUI as
  ibnetdiscover prints it).
- Quantum-2 reports 65 ports in NodeInfo: 64 external NDR ports plus port 65, the SHARP
  Aggregation Node (real ibdiagnet dump: ``Switch 65``, ``[65] "H-…" # "Mellanox
  Technologies Aggregation Node"``, AN devid 0xcf09, AN node GUID = switch GUID + 8,
  AN sysimgguid = switch GUID).  Quantum HDR likewise reports 41 (40 + 1).
- Managed Quantum-2 switches describe themselves ``MF0;<name>:MQM9701/U1`` and use an
  enhanced switch port 0; unmanaged ones say ``Quantum-2 Mellanox Technologies`` with a
  base port 0 (same dump).
- ibstat's "CA type" is the device's PCI id as MT<decimal>: ConnectX-7 = MT4129.
"""

from __future__ import annotations

from dataclasses import dataclass

from .caps import (
    CAP2_IS_EXT_SPEEDS_2,
    CAP2_IS_LINK_SPEED_HDR,
    CAP2_IS_LINK_SPEED_NDR,
    CAP2_IS_LINK_SPEED_XDR,
    CAP2_IS_LINK_WIDTH_2X,
    CAP_IS_CAP_MASK2,
    CAP_IS_CAP_MASK_NOTICE,
    CAP_IS_EXT_SPEEDS,
    CAP_IS_NOTICE,
    CAP_IS_SL_MAP,
    CAP_IS_SYS_IMAGE_GUID,
    CAP_IS_TRAP,
    PM2_ADDL_PORT_COUNTERS_EXT,
    PM_ALL_PORT_SELECT,
)

MELLANOX_VENDID = 0x2C9


@dataclass(frozen=True)
class SwitchModel:
    """A switch device: its NodeInfo identity, ports, native rate and description."""

    key: str
    vendid: int
    devid: int
    nports: int  # NumPorts in NodeInfo, including the AN port
    radix: int  # external ports usable for links
    rate: str  # native speed token
    width: str
    desc: str  # description template, {name} = switch name
    enhanced_port0: bool
    an_port: int | None  # port the SHARP Aggregation Node hangs on
    revision: int = 0xA0


@dataclass(frozen=True)
class CaModel:
    """An HCA device: its NodeInfo identity, native rate and ibstat "CA type"."""

    key: str
    vendid: int
    devid: int
    rate: str
    width: str
    ca_type: str  # ibstat "CA type"
    revision: int = 0


SWITCH_MODELS: dict[str, SwitchModel] = {
    m.key: m
    for m in (
        SwitchModel(
            "quantum-2",
            MELLANOX_VENDID,
            0xD2F2,
            65,
            64,
            "NDR",
            "4x",
            "MF0;{name}:MQM9701/U1",
            True,
            65,
        ),
        SwitchModel(
            "quantum-2-unmanaged",
            MELLANOX_VENDID,
            0xD2F2,
            65,
            64,
            "NDR",
            "4x",
            "Quantum-2 Mellanox Technologies",
            False,
            65,
        ),
        SwitchModel(
            "quantum",
            MELLANOX_VENDID,
            0xD2F0,
            41,
            40,
            "HDR",
            "4x",
            "MF0;{name}:MQM8700/U1",
            True,
            41,
        ),
        # Quantum-3 (Quantum-X800): 144 XDR ports; the AN port number follows the
        # Quantum/Quantum-2 pattern (radix + 1) and has not been checked on hardware.
        SwitchModel(
            "quantum-3",
            MELLANOX_VENDID,
            0xD2F4,
            145,
            144,
            "XDR",
            "4x",
            "MF0;{name}:Q3400/U1",
            True,
            145,
        ),
    )
}

AGGREGATION_NODE = CaModel("aggregation-node", MELLANOX_VENDID, 0xCF09, "NDR", "4x", "MT53001")
AGGREGATION_NODE_DESC = "Mellanox Technologies Aggregation Node"
AN_GUID_OFFSET = 8

CA_MODELS: dict[str, CaModel] = {
    m.key: m
    for m in (
        CaModel("connectx-7", MELLANOX_VENDID, 0x1021, "NDR", "4x", "MT4129"),
        CaModel("connectx-8", MELLANOX_VENDID, 0x1023, "XDR", "4x", "MT4131"),
        CaModel("connectx-6", MELLANOX_VENDID, 0x101B, "HDR", "4x", "MT4123"),
        CaModel("connectx-5", MELLANOX_VENDID, 0x1017, "EDR", "4x", "MT4119"),
    )
}


def switch_model(key: str) -> SwitchModel:
    """The switch model ``key`` names; KeyError names the known ones."""
    try:
        return SWITCH_MODELS[key]
    except KeyError:
        raise KeyError(
            f"unknown switch model {key!r} (known: {', '.join(SWITCH_MODELS)})"
        ) from None


def ca_model(key: str) -> CaModel:
    """The HCA model ``key`` names; KeyError names the known ones."""
    try:
        return CA_MODELS[key]
    except KeyError:
        raise KeyError(f"unknown HCA model {key!r} (known: {', '.join(CA_MODELS)})") from None


# --- what the devices' management agents report about themselves --------------------

# The PMA's ClassPortInfo.CapabilityMask of a ConnectX (real ``perfquery -x`` header, see
# ManagementCaps): ExtendedWidth, SamplesOnly, XmitWait and bit 14.
_PM_CA = 0x5A00
_SWITCH_PORT0 = (
    CAP_IS_NOTICE
    | CAP_IS_TRAP
    | CAP_IS_SL_MAP
    | CAP_IS_SYS_IMAGE_GUID
    | CAP_IS_EXT_SPEEDS
    | CAP_IS_CAP_MASK2
    | CAP_IS_CAP_MASK_NOTICE
)
_C2_2X, _C2_HDR, _C2_NDR = CAP2_IS_LINK_WIDTH_2X, CAP2_IS_LINK_SPEED_HDR, CAP2_IS_LINK_SPEED_NDR
_C2_EXT2, _C2_XDR = CAP2_IS_EXT_SPEEDS_2, CAP2_IS_LINK_SPEED_XDR


@dataclass(frozen=True)
class ManagementCaps:
    """What a device's SMA and PMA say about their own capabilities.

    Where the numbers come from:
    - ``cap_mask``: real ``ibstat`` output: 0xa751e848 on a ConnectX-7 (MT4129),
      0x2651e848 on a ConnectX-5 (MT4119, fixture sparticlesteve/…/ibstat.txt).  A
      switch's port 0 mask has not been seen in a dump; the one here sets only the
      capabilities the fabric actually implements (notices, traps, SL mapping, system
      image GUID, extended speeds, CapabilityMask2, capability-change notices).
    - ``pma_cap_mask`` 0x5A00: real ``perfquery -x`` header of a ConnectX
      (fixture treydock/…/perfquery/0x7cfe9003003b4b96.out); switches add
      AllPortSelect, which ``perfquery -a`` relies on.  Additional extended counters
      (CapabilityMask2 bit 1) appear in real NDR ibdiagnet .pm dumps
      (``symbol_error_counter_extended`` …).
    - Table sizes a dump does not show (LinearFDBCap 49152, MulticastFDBCap 1024,
      PartitionEnforcementCap 64) are ibsim's defaults, which follow Mellanox switches.
    """

    cap_mask: int
    cap_mask2: int
    partition_cap: int = 128  # NodeInfo.PartitionCap: P_Key table of a CA / switch port 0
    guid_cap: int = 8
    mtu_cap: int = 5  # 4096 bytes
    vl_cap: int = 4  # VL0-7
    vl_arb_high_cap: int = 8
    vl_arb_low_cap: int = 8
    pma_cap_mask: int = _PM_CA
    pma_cap_mask2: int = PM2_ADDL_PORT_COUNTERS_EXT
    linear_fdb_cap: int = 0  # switches only
    mcast_fdb_cap: int = 0
    part_enforce_cap: int = 0


def _switch_caps(cap_mask2: int, pma2: int = PM2_ADDL_PORT_COUNTERS_EXT) -> ManagementCaps:
    return ManagementCaps(
        _SWITCH_PORT0,
        cap_mask2,
        partition_cap=1,
        guid_cap=1,
        pma_cap_mask=_PM_CA | PM_ALL_PORT_SELECT,
        pma_cap_mask2=pma2,
        linear_fdb_cap=49152,
        mcast_fdb_cap=1024,
        part_enforce_cap=64,
    )


# by PCI device id
MANAGEMENT_CAPS: dict[int, ManagementCaps] = {
    0xD2F0: _switch_caps(_C2_2X | _C2_HDR, pma2=0),  # Quantum (HDR)
    0xD2F2: _switch_caps(_C2_2X | _C2_HDR | _C2_NDR),  # Quantum-2 (NDR)
    0xD2F4: _switch_caps(_C2_2X | _C2_HDR | _C2_NDR | _C2_EXT2 | _C2_XDR),  # Quantum-3 (XDR)
    0x1017: ManagementCaps(0x2651E848, 0, pma_cap_mask2=0),  # ConnectX-5
    0x101B: ManagementCaps(0x2651E848, _C2_2X | _C2_HDR, pma_cap_mask2=0),  # ConnectX-6
    0x1021: ManagementCaps(0xA751E848, _C2_2X | _C2_HDR | _C2_NDR),  # ConnectX-7
    0x1023: ManagementCaps(
        0xA751E848, _C2_2X | _C2_HDR | _C2_NDR | _C2_EXT2 | _C2_XDR
    ),  # ConnectX-8
    0xCF09: ManagementCaps(
        0xA751E848, _C2_2X | _C2_HDR | _C2_NDR, partition_cap=1, guid_cap=1
    ),  # SHARP AN
}
_DEFAULT_CA = ManagementCaps(
    0x2651E848, _C2_2X | _C2_HDR | _C2_NDR | _C2_EXT2 | _C2_XDR, pma_cap_mask2=0
)
_DEFAULT_SWITCH = _switch_caps(_C2_2X | _C2_HDR | _C2_NDR | _C2_EXT2 | _C2_XDR, pma2=0)


def management_caps(devid: int, is_switch: bool) -> ManagementCaps:
    """The device's capabilities; devices fabriclab has no facts for (an imported dump's
    older hardware) get a generic CA or switch that can express every speed."""
    caps = MANAGEMENT_CAPS.get(devid)
    if caps is None or (caps.linear_fdb_cap > 0) != is_switch:
        return _DEFAULT_SWITCH if is_switch else _DEFAULT_CA
    return caps


# --- libibnetdisc's and OpenSM's list of devices with Mellanox ExtendedPortInfo -------

_BULL = 0x119F


def mlnx_ext_port_info_supported(vendid: int, devid: int) -> bool:
    """libibnetdisc's list of devices that answer Mellanox ExtendedPortInfo (and so can
    report FDR10): SwitchX/Switch-IB/Quantum-1 switches, ConnectX-3..6 CAs, and Bull's
    OEM versions.  Quantum-2 and ConnectX-7 are not on it."""
    d, v = devid & 0xFFFF, vendid
    if 0xC738 <= d <= 0xC73B or d in (0xC839, 0xCB20, 0xCF08, 0xCF09, 0xD2F0):
        return True
    if v == _BULL and (d in (0x1B02, 0x1B50, 0x1BA0, 0x1BF0) or 0x1BD0 <= d <= 0x1BD5):
        return True
    if 0x1003 <= d <= 0x101B or d == 0xA2D2:
        return True
    if v == _BULL and (
        d
        in (0x1B33, 0x1B73, 0x1B40, 0x1B41, 0x1B60, 0x1B61, 0x1B83, 0x1B93, 0x1B94, 0x1BB4, 0x1BB5)
        or 0x1BC4 <= d <= 0x1BC6
    ):
        return True
    return False
