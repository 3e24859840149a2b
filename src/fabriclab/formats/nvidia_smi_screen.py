"""``nvidia-smi`` with no arguments: its summary screen of a tray's GPUs.

The layout is driver 565's (CUDA 12.7): a date line, the version banner, a three-column
box per GPU (name and persistence mode, bus id and display, ECC; fan, temperature,
performance state and power; memory; utilization and compute mode; MIG mode) and the
processes box.  Sources: ``nvidia-smi`` captures of driver 565.57.01 / CUDA 12.7 (H100,
H200, A100 on public GitHub READMEs: the ``|---…+`` line under the banner of drivers
before 580, the blank line before the processes box) and of GB200 trays (NVIDIA GB200,
``1200W`` cap, ``189471MiB``, MIG ``Disabled``; SlinkyProject/slurm-operator's docs,
driver 590.48.01, the same columns).  What fabriclab does not model is shown as an idle
GPU: 0 MiB used, 0 % utilization, no processes.
"""

from __future__ import annotations

import time

from ..model.cluster import Tray
from .nvidia_smi import pci_bus_id

DRIVER = "565.57.01"
CUDA = "12.7"
GPU_NAME = "NVIDIA GB200"
POWER_CAP_W = 1200  # a GB200's power limit as nvidia-smi shows it
MEMORY_MIB = 189471  # a GB200's memory as nvidia-smi shows it
WIDTH = 91  # the box's width, its corners included

_RULE = "+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+"
_HEAD = (
    "+" + "-" * (WIDTH - 2) + "+",
    f"| NVIDIA-SMI {DRIVER:<23}Driver Version: {DRIVER:<15}CUDA Version: {CUDA:<9}|",
    "|" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+",
    "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
    "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
    "|                                         |                        |               MIG M. |",
    "|" + "=" * 41 + "+" + "=" * 24 + "+" + "=" * 22 + "|",
)
_PROCESSES = (
    " " * WIDTH,
    "+" + "-" * (WIDTH - 2) + "+",
    "| Processes:" + " " * (WIDTH - 13) + "|",
    "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |",
    "|        ID   ID                                                               Usage      |",
    "|" + "=" * (WIDTH - 2) + "|",
    "|  No running processes found" + " " * (WIDTH - 30) + "|",
    "+" + "-" * (WIDTH - 2) + "+",
)


def gpu_rows(index: int) -> list[str]:
    """The three lines of GPU ``index``'s box and the rule under it."""
    temp = 36 + index % 3  # an idle GPU's few tens of degrees
    power = 150 + 7 * index  # an idle GB200 draws 150-180 W (the captures)
    return [
        f"|{index:>4}  {GPU_NAME:<29}{'On':>4}  |{pci_bus_id(index):>19} Off |{'0':>21} |",
        f"| N/A {temp:>4}C    P0 {power:>14}W / {POWER_CAP_W:>4}W "
        f"|{0:>8}MiB / {MEMORY_MIB:>6}MiB |{0:>7}%{'Default':>13} |",
        f"|{'':41}|{'':24}|{'Disabled':>21} |",
        _RULE,
    ]


def render_summary(tray: Tray, now: float | None = None) -> str:
    """What ``nvidia-smi`` with no arguments prints on this tray (``now``: the time on
    its first line, default the clock's)."""
    stamp = time.strftime("%a %b %e %H:%M:%S %Y", time.localtime(now))
    lines = [stamp + " " * 7, *_HEAD]
    for g in tray.gpus:
        lines += gpu_rows(g.index)
    lines += _PROCESSES
    return "".join(line + "\n" for line in lines)
