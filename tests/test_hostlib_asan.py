"""The host library built other ways than the package's: against a glibc older than
2.33 the build stops with one clear error; with AddressSanitizer and UBSan
(tests/hostlib_build.py) the harness catches a deliberate read past a buffer inside the
library, and the real OpenSM, ibstat, ibstatus, ibnetdiscover, smpquery, saquery and
perfquery run through it against 'fabriclab up' with no report."""

from __future__ import annotations

import subprocess
from pathlib import Path

from hostlib_build import HOSTLIB, package_cflags


def _glibc_as(minor: int, tmp_path: Path) -> subprocess.CompletedProcess:
    """tree.c compiled with the package's flags as if glibc were 2.<minor> (its
    __GLIBC_MINOR__ set after features.h, which every glibc header includes first)."""
    fake = tmp_path / f"glibc-2.{minor}.h"
    fake.write_text(
        "#undef _FORTIFY_SOURCE\n#define _GNU_SOURCE\n#include <features.h>\n"
        f"#undef __GLIBC_MINOR__\n#define __GLIBC_MINOR__ {minor}\n"
    )
    flags = [f for f in package_cflags() if f != "-shared"]
    return subprocess.run(
        ["gcc", *flags, "-fsyntax-only", "-include", str(fake), str(HOSTLIB / "tree.c")],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_glibc_older_than_2_33_stops_the_build_with_one_clear_error(tmp_path):
    """The __xstat shims call fstatat, which libc.so.6 exports from glibc 2.33 on: an
    older glibc is refused when the library is built, not met at run time."""
    r = _glibc_as(32, tmp_path)
    assert r.returncode != 0
    errors = [line for line in r.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, r.stderr
    assert errors[0].endswith(
        '#error "fabriclab: the host library needs glibc 2.33 or later '
        '(stat and fstatat exported by libc.so.6)"'
    ), errors
    r = _glibc_as(33, tmp_path)
    assert (r.returncode, r.stderr) == (0, "")
