"""The native MAD core built with AddressSanitizer and UBSan (the package's flags and
sources, plus tests/hostlib_build.py's SANITIZE): the in-process comparison with the
Python path (tests/test_madcore.py, its mutated and garbage datagrams included) runs
against that build with no report."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

from hostlib_build import ROOT, SANITIZE, gcc, package_cflags, runtime

CORE = ROOT / "src" / "fabriclab" / "sim" / "wire" / "madcore"
# Run in a Python whose libasan was preloaded: the ASan build takes the place of the
# package's before anything imports it.
LOADER = """
import importlib.util, sys
path = sys.argv[1]
spec = importlib.util.spec_from_file_location("fabriclab.sim.wire._madcore", path)
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
sys.modules["fabriclab.sim.wire._madcore"] = mod
import pytest
from fabriclab.sim.wire import _madcore
assert _madcore.__file__ == path, _madcore.__file__
sys.exit(pytest.main(["-q", "-x", "-p", "no:cacheprovider", sys.argv[2]]))
"""


def test_the_core_under_asan_answers_as_python_with_no_report(tmp_path: Path):
    out = tmp_path / ("_madcore" + sysconfig.get_config_var("EXT_SUFFIX"))
    include = sysconfig.get_paths()["include"]
    sources = sorted(str(c) for c in CORE.glob("*.c"))
    gcc([*package_cflags(), *SANITIZE, f"-I{include}", "-o", str(out), *sources])
    reports = tmp_path / "reports"
    reports.mkdir()
    env = dict(os.environ)
    env["LD_PRELOAD"] = runtime("libasan.so")
    env["ASAN_OPTIONS"] = f"abort_on_error=1:halt_on_error=1:detect_leaks=0:log_path={reports}/asan"
    env["UBSAN_OPTIONS"] = (
        f"halt_on_error=1:abort_on_error=1:print_stacktrace=1:log_path={reports}/ubsan"
    )
    r = subprocess.run(
        [sys.executable, "-c", LOADER, str(out), str(ROOT / "tests" / "test_madcore.py")],
        env=env,
        cwd=ROOT / "tests",
        capture_output=True,
        text=True,
        timeout=600,
    )
    found = "".join(p.read_text(errors="replace")[-4000:] for p in reports.glob("*san.*"))
    assert r.returncode == 0 and not found, (r.stdout[-3000:], r.stderr[-3000:], found)
