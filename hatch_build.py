"""The package's build step beyond Python: compiles the host library
(src/fabriclab/sim/host/hostlib/*.c, the preload a tool on an emulated tray runs with) into
libfabriclab-umad.so beside its sources.  An editable install uses it in place; a wheel
carries it (force-included: the built file is not tracked)."""

from __future__ import annotations

import subprocess
import sysconfig
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

SOURCE = Path("src/fabriclab/sim/host/hostlib")
LIBRARY = "libfabriclab-umad.so"
CFLAGS = ["-O2", "-fPIC", "-shared", "-pthread", "-fexceptions", "-Wall", "-Wextra", "-Werror"]


class CustomBuildHook(BuildHookInterface):
    """Builds the host library before the wheel (or the editable wheel) is made."""

    def initialize(self, version: str, build_data: dict) -> None:
        src = Path(self.root) / SOURCE
        out = src / LIBRARY
        sources = sorted(str(c) for c in src.glob("*.c"))
        cmd = ["gcc", *CFLAGS, "-o", str(out), *sources, "-ldl"]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True)
        except FileNotFoundError:
            raise RuntimeError("building the fabriclab host library needs gcc") from None
        if r.returncode != 0:
            raise RuntimeError(
                f"building the fabriclab host library failed: {' '.join(cmd)}\n{r.stderr}"
            )
        if version != "editable":
            build_data["force_include"][str(out)] = f"fabriclab/sim/host/hostlib/{LIBRARY}"
            build_data["pure_python"] = False
            # C only, no Python ABI: any Python 3 on this platform
            platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
            build_data["tag"] = f"py3-none-{platform}"
