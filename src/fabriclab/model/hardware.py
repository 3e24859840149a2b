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

MELLANOX_VENDID = 0x2C9


@dataclass(frozen=True)
class SwitchModel:
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
        SwitchModel("quantum-2", MELLANOX_VENDID, 0xD2F2, 65, 64, "NDR", "4x",
                    "MF0;{name}:MQM9701/U1", True, 65),
        SwitchModel("quantum-2-unmanaged", MELLANOX_VENDID, 0xD2F2, 65, 64, "NDR", "4x",
                    "Quantum-2 Mellanox Technologies", False, 65),
        SwitchModel("quantum", MELLANOX_VENDID, 0xD2F0, 41, 40, "HDR", "4x",
                    "MF0;{name}:MQM8700/U1", True, 41),
        # Quantum-3 (Quantum-X800): 144 XDR ports; the AN port number follows the
        # Quantum/Quantum-2 pattern (radix + 1) and has not been checked on hardware.
        SwitchModel("quantum-3", MELLANOX_VENDID, 0xD2F4, 145, 144, "XDR", "4x",
                    "MF0;{name}:Q3400/U1", True, 145),
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
    try:
        return SWITCH_MODELS[key]
    except KeyError:
        raise KeyError(f"unknown switch model {key!r} (known: {', '.join(SWITCH_MODELS)})") from None


def ca_model(key: str) -> CaModel:
    try:
        return CA_MODELS[key]
    except KeyError:
        raise KeyError(f"unknown HCA model {key!r} (known: {', '.join(CA_MODELS)})") from None
