"""GPU facts a collective's time depends on: NVLink links and their speed, and the
compute capability NCCL's tuning tables are indexed by, per GPU model a spec names.

Sources:

- GB200 and B200 (Blackwell, NVLink 5): 18 NVLinks per GPU, 1.8 TB/s per GPU both
  directions together, so 50 GB/s per link each way (NVIDIA GB200 NVL72 and DGX B200
  product pages; NVIDIA's health checks expect 18 links at 53,125 MB/s each,
  docs.nvidia.com/health-validation, "NVLink checks").  Compute capability 10.0.
- H100 SXM (Hopper, NVLink 4): 18 NVLinks, 900 GB/s per GPU both directions, 25 GB/s
  per link each way (NVIDIA H100 product page).  Compute capability 9.0.
- What NCCL counts of a link each way, after its protocol's overhead: 40.1 GB/s on
  Blackwell, 20.6 GB/s on Hopper (NCCL 2.30.7, src/graph/topo.h SM100_NVLINK_BW,
  SM90_NVLINK_BW); 18 x 20.6 = 371 GB/s is the ring bus bandwidth NVIDIA quotes for 8
  H100 ("NCCL can get an effective NVLink bandwidth of 370GB/s", NVIDIA/nccl-tests
  issue 212).
- NVLink switch trays: a GB200 NVL72 rack's NVLink domain is 18 compute trays and 9
  NVLink switch trays, each with its own management port (NVIDIA GB200 NVL72 product
  page and DGX SuperPOD GB200 reference architecture); an HGX B200 or H100 board
  carries its NVSwitch chips, so its domain has none.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuModel:
    """One GPU model: its name as nvidia-smi prints it, its NVLinks, their speed each
    way and what NCCL counts of it (GB/s, 1e9 bytes), and its compute capability (major
    * 10 + minor)."""

    key: str
    name: str
    nvlinks: int
    link_GBps: float
    nccl_link_GBps: float
    compute_capability: int
    switch_trays: int = 0  # NVLink switch trays in a domain of these (their own hosts)

    @property
    def nvlink_GBps(self) -> float:
        """What all of a GPU's NVLinks carry each way."""
        return self.nvlinks * self.link_GBps

    @property
    def nccl_nvlink_GBps(self) -> float:
        """What NCCL counts of them each way (its protocol's overhead off)."""
        return self.nvlinks * self.nccl_link_GBps


MODELS = {
    m.key: m
    for m in (
        GpuModel("gb200", "NVIDIA GB200", 18, 50.0, 40.1, 100, switch_trays=9),
        GpuModel("b200", "NVIDIA B200", 18, 50.0, 40.1, 100),
        GpuModel("h100", "NVIDIA H100 80GB HBM3", 18, 25.0, 20.6, 90),
    )
}
DEFAULT = "gb200"


def model(key: str) -> GpuModel:
    """The GPU model ``key`` (KeyError: no such model)."""
    return MODELS[key]
