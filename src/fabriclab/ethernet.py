"""Ethernet facts the other networks are built from: switch models (their ports and
speeds) and the interface names endpoints use by default.

Switch models (NVIDIA Spectrum datasheets):

- ``sn2201``: Spectrum, 48 x 1GbE RJ45 and 4 x 100GbE QSFP28: the out-of-band
  management switch of NVIDIA's GB200 and DGX SuperPOD reference architectures;
- ``sn4600c``: Spectrum-2, 64 x 100GbE QSFP28;
- ``sn5600``: Spectrum-4, 64 x 800GbE OSFP: the front-end and storage switch of the
  GB200 SuperPOD reference architecture.

A switch's ports are named ``swp1`` ... as Cumulus Linux and NVUE name a Spectrum
switch's front-panel ports.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SwitchModel:
    """An Ethernet switch: its name, and each port's speed (Mb/s), port 1 first."""

    key: str
    name: str
    speeds: tuple[int, ...]

    @property
    def ports(self) -> int:
        return len(self.speeds)


SWITCH_MODELS = {
    m.key: m
    for m in (
        SwitchModel("sn2201", "NVIDIA SN2201", (1_000,) * 48 + (100_000,) * 4),
        SwitchModel("sn4600c", "NVIDIA SN4600C", (100_000,) * 64),
        SwitchModel("sn5600", "NVIDIA SN5600", (800_000,) * 64),
    )
}


def port_name(num: int) -> str:
    """Switch port ``num`` as the switch names it."""
    return f"swp{num}"


# an endpoint's interface on each kind of network when the spec names none: a tray's
# BlueField-3 ports (front end, storage; mlx5_core's predictable names), a BMC's one
# port, a service node's on-board ports
DEFAULT_INTERFACE = {
    ("tray", "frontend"): "enp1s0f0np0",
    ("tray", "storage"): "enp1s0f1np1",
    ("tray", "pod"): "enp1s0f0np0",
    ("tray", "inband"): "eno1",
    ("tray", "oob"): "eno1",
    ("bmc", "oob"): "eth0",
    ("nvswitch", "oob"): "eth0",  # an NVLink switch tray's management port (NVOS)
    ("service", "frontend"): "eno1",
    ("service", "storage"): "eno2",
    ("service", "oob"): "eno3",
    ("service", "pod"): "eno1",
    ("service", "inband"): "eno4",
}
