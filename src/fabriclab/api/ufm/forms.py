"""UFM's value forms: severities, system roles and
models, and a port's label (``dname``), with where each comes from."""

from __future__ import annotations

import re

# UFM's severities, least first (NVIDIA "Events REST API": Info, Warning, Minor, Critical)
SEVERITIES = ("Info", "Warning", "Minor", "Critical")
INFO, WARNING, MINOR, CRITICAL = range(4)
ACTIVE = 4  # PortInfo PortState Active
LINK_UP = 5  # PortInfo PhysLinkState LinkUp
# what each fault kind makes of the ports it holds (the state shows a link down anyway)
FAULT_SEVERITY = {"errors": WARNING, "drop": WARNING, "flap": WARNING, "degrade": MINOR}
# UFM's system roles (fabiendupont/nvidia-ufm-api api/openapi.yaml: core, tor, endpoint)
UFM_ROLE = {"leaf": "tor", "spine": "core", "core": "core", "hca": "endpoint"}
TARGET = re.compile(r"^(?P<node>.+)\[(?P<num>\d+)\]$")


def ca_model(key: str) -> str:
    # "connectx-7" -> "ConnectX-7", as UFM's host records name the HCA
    return key.replace("connectx", "ConnectX") if key else "N/A"


def switch_model(desc: str, key: str) -> str:
    # the part number in a managed switch's NodeDescription "MF0;name:MQM9701/U1"
    m = re.search(r":([A-Za-z0-9]+)/", desc)
    return m.group(1) if m else key or "N/A"


def dname(model: str, kind: str, hca: str, num: int) -> str:
    """A port's label as UFM shows it: ``1/<cage>/<split>`` on a Quantum-2 switch (32
    OSFP cages of 2 ports: port 5 is cage 3, split 1, as the Links REST API page's
    ``"source_port":"5"``, ``"source_port_dname":"1/3/1"`` shows), ``HCA-<n>/<port>``
    on a host (NVIDIA "Unhealthy Ports REST API": ``"UnhealthyPortDname": "HCA-1/1"``),
    the number elsewhere (``"PeerPortDname": "6"``)."""
    if kind == "ca":
        idx = int(hca.rsplit("_", 1)[-1]) + 1 if hca[-1:].isdigit() else 1
        return f"HCA-{idx}/{num}"
    if model.startswith("quantum-2") and 1 <= num <= 64:
        return f"1/{(num + 1) // 2}/{2 - num % 2}"
    return str(num)
