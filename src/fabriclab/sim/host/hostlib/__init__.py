"""fabriclab's host library: the C preload that shows a tool on an emulated tray the
tray's HCAs, its /sys/class/infiniband and its umad devices, served by the fabric server
over :mod:`fabriclab.ib.hostwire`.  Its sources are the ``*.c`` files here, one job each
(``hostlib.h`` lists them); the package's build (hatch_build.py) compiles them into
``libfabriclab-umad.so`` here."""

from __future__ import annotations

from pathlib import Path

from ....errors import InputError, Problem

LIBRARY = "libfabriclab-umad.so"


def library_path() -> str:
    """The built host library (InputError when it was not built)."""
    path = Path(__file__).resolve().parent / LIBRARY
    if not path.is_file():
        raise InputError(
            [
                Problem(
                    str(path),
                    "the host library is not built: reinstall fabriclab "
                    "(`pip install -e .` or `./dev setup`), which compiles it with gcc",
                )
            ]
        )
    return str(path)
