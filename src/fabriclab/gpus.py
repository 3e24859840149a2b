"""GPU facts a collective's time depends on: NVLink links and their speed, and the
compute capability NCCL's tuning tables are indexed by, per GPU model a spec names.

Sources:

- GB200 and B200 (Blackwell, NVLink 5): 18 NVLinks per GPU, 1.8 TB/s per GPU both
  directions together, so 50 GB/s per link each way (NVIDIA GB200 NVL72 and DGX B200
  product pages; NVIDIA's health checks expect 18 links at 53,125 MB/s each,
  docs.nvidia.com/health-validation, "NVLink checks").  Compute capability 10.0.
- H100 SXM (Hopper, NVLink 4): 18 NVLinks, 900 GB/s per GPU both directions, 25 GB/s
  per link each way (NVIDIA H100 product page).  Compute capability 9.0.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuModel:
    """One GPU model: its name as nvidia-smi prints it, its NVLinks and their speed each
    way (GB/s, 1e9 bytes), and its compute capability (major * 10 + minor)."""

    key: str
    name: str
    nvlinks: int
    link_GBps: float
    compute_capability: int

    @property
    def nvlink_GBps(self) -> float:
        """What all of a GPU's NVLinks carry each way."""
        return self.nvlinks * self.link_GBps


MODELS = {
    m.key: m
    for m in (
        GpuModel("gb200", "NVIDIA GB200", 18, 50.0, 100),
        GpuModel("b200", "NVIDIA B200", 18, 50.0, 100),
        GpuModel("h100", "NVIDIA H100 80GB HBM3", 18, 25.0, 90),
    )
}
DEFAULT = "gb200"


def model(key: str) -> GpuModel:
    """The GPU model ``key`` (KeyError: no such model)."""
    return MODELS[key]
