"""The package's build step beyond Python: compiles the host library
(src/fabriclab/sim/host/hostlib/*.c, the preload a tool on an emulated tray runs with) into
libfabriclab-umad.so beside its sources, the native MAD core
(src/fabriclab/sim/wire/madcore/*.c, a CPython extension module) into
src/fabriclab/sim/wire/_madcore<EXT_SUFFIX>, and builds the web view's front-end (web/:
``npm ci``, then esbuild bundling cytoscape.js and the page) into
src/fabriclab/api/web/static/.  An editable install uses both in place; a wheel carries
them (force-included: the built files are not tracked)."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

SOURCE = Path("src/fabriclab/sim/host/hostlib")
LIBRARY = "libfabriclab-umad.so"
WEB = Path("web")
STATIC = Path("src/fabriclab/api/web/static")
CORE = Path("src/fabriclab/sim/wire/madcore")
CORE_MODULE = "_madcore"
CFLAGS = ["-O2", "-fPIC", "-shared", "-pthread", "-fexceptions", "-Wall", "-Wextra", "-Werror"]


class CustomBuildHook(BuildHookInterface):
    """Builds the host library before the wheel (or the editable wheel) is made."""

    def initialize(self, version: str, build_data: dict) -> None:
        self._library(version, build_data)
        self._core(version, build_data)
        self._web(version, build_data)

    def _library(self, version: str, build_data: dict) -> None:
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

    def _core(self, version: str, build_data: dict) -> None:
        """The native MAD core: C with the CPython API, for the Python building it (the
        wheel is then this interpreter's and platform's only)."""
        src = Path(self.root) / CORE
        name = CORE_MODULE + sysconfig.get_config_var("EXT_SUFFIX")
        out = src.parent / name
        sources = sorted(str(c) for c in src.glob("*.c"))
        include = sysconfig.get_paths()["include"]
        cmd = ["gcc", *CFLAGS, "-fno-strict-aliasing", f"-I{include}", "-o", str(out), *sources]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True)
        except FileNotFoundError:
            raise RuntimeError("building the fabriclab MAD core needs gcc") from None
        if r.returncode != 0:
            raise RuntimeError(
                f"building the fabriclab MAD core failed: {' '.join(cmd)}\n{r.stderr}"
            )
        if version != "editable":
            build_data["force_include"][str(out)] = f"fabriclab/sim/wire/{name}"
            build_data["pure_python"] = False
            platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
            impl = f"cp{sys.version_info.major}{sys.version_info.minor}"
            build_data["tag"] = f"{impl}-{impl}-{platform}"

    def _web(self, version: str, build_data: dict) -> None:
        web = Path(self.root) / WEB
        out = Path(self.root) / STATIC
        steps = (
            ["npm", "ci", "--no-audit", "--no-fund", "--prefer-offline"],
            ["npm", "run", "--silent", "build", "--", str(out)],
        )
        for cmd in steps:
            try:
                r = subprocess.run(cmd, cwd=web, capture_output=True, text=True)
            except FileNotFoundError:
                raise RuntimeError(
                    "building the fabriclab web view needs npm (Debian: apt-get install npm)"
                ) from None
            if r.returncode != 0:
                last = (r.stderr.strip() or r.stdout.strip() or "no output").splitlines()[-1]
                raise RuntimeError(
                    f"building the fabriclab web view failed: {' '.join(cmd)} (in web/): {last}"
                )
        if version != "editable":
            build_data["force_include"][str(out)] = "fabriclab/api/web/static"
