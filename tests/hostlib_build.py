"""The host library built for a test, the one place that says how: its sources and the
package's own flags (read from hatch_build.py, so they cannot drift), plain or with
AddressSanitizer and UBSan; small C probes compiled beside it; and the environment that
runs a program not built with ASan under the ASan library (libasan preloaded first).

``asan_build(tmp_path_factory)`` is the ASan build, made once per session in a temporary
directory (a test module's fixture returns it)."""

from __future__ import annotations

import ast
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from fabriclab.sim.host.hostlib import library_path

ROOT = Path(__file__).resolve().parent.parent
HOSTLIB = Path(library_path()).parent
# GCC's manual, "Program Instrumentation Options": -fsanitize=address,undefined; a frame
# pointer and -g give whole stack traces in the reports.  --param=asan-stack=0: heap
# checks only, as a thread cancelled inside the library (OpenSM cancels its receiver) is
# unwound through frames whose stack redzones nothing unpoisons, which ASan's next stack
# check would take for an overflow (its own hint: "a custom stack unwind mechanism")
SANITIZE = [
    "-fsanitize=address,undefined",
    "--param=asan-stack=0",
    "-fno-omit-frame-pointer",
    "-g",
]


def package_cflags() -> list[str]:
    """hatch_build.py's CFLAGS, the flags the package's build uses."""
    tree = ast.parse((ROOT / "hatch_build.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "CFLAGS" for t in node.targets
        ):
            return list(ast.literal_eval(node.value))
    raise AssertionError("hatch_build.py has no CFLAGS")


def sources() -> list[Path]:
    """The library's C sources, as the package's build takes them."""
    return sorted(HOSTLIB.glob("*.c"))


def gcc(argv: list[str]) -> None:
    r = subprocess.run(["gcc", *argv], capture_output=True, text=True, timeout=120)
    if r.returncode:
        raise AssertionError(f"gcc {' '.join(argv)} failed:\n{r.stderr[-4000:]}")


def build_library(out: Path, *, sanitize: bool) -> Path:
    """The library compiled into ``out`` (a .so): the package's flags, plus SANITIZE."""
    flags = package_cflags() + (SANITIZE if sanitize else [])
    gcc([*flags, "-o", str(out), *map(str, sources()), "-ldl"])
    return out


def build_probe(source: str, out: Path, *, sanitize: bool = False) -> Path:
    """A C probe (its text) compiled into the program ``out``; with ``sanitize`` it is
    instrumented too (the probe's own bugs reported as the library's are)."""
    src = out.with_suffix(".c")
    src.write_text(source)
    flags = ["-O1", "-pthread", "-Wall", "-Werror", *(SANITIZE if sanitize else [])]
    gcc([*flags, "-o", str(out), str(src)])
    return out


def runtime(name: str) -> str:
    """The sanitizer runtime ``name`` (libasan.so ...) gcc links, as a real file."""
    r = subprocess.run(
        ["gcc", f"-print-file-name={name}"], capture_output=True, text=True, check=True
    )
    path = os.path.realpath(r.stdout.strip())
    assert os.path.isfile(path), f"gcc has no {name}: install libasan8 and libubsan1"
    return path


# ASan checks the buffer of a write (from libibumad's umad_send) or of a sendmsg (the
# library's, intercept_send=0) after the call has returned
# (sanitizer_common_interceptors.inc), and by then OpenSM's receiver thread may have
# freed the request, its answer already in: OpenSM files a request before it sends it
# (libvendor/osm_vendor_ibumad.c: put_madw before umad_send).  The bytes were copied
# inside the call, as the kernel's write copies them; the library's own reads of the
# buffer are instrumented and still checked.
SUPPRESSIONS = "interceptor_via_fun:umad_send\n"


@dataclass
class AsanLibrary:
    """The ASan build and where its reports go."""

    path: Path
    reports: Path  # each process's report file: asan.<pid> or ubsan.<pid>
    suppressions: Path  # SUPPRESSIONS, as a file

    def env(self, base: dict[str, str]) -> dict[str, str]:
        """``base`` (a tool's environment through the plain library) made to run the ASan
        build: libasan first in LD_PRELOAD (a program not built with ASan must load the
        runtime before anything else), then this library in place of the plain one."""
        env = dict(base)
        env["LD_PRELOAD"] = f"{runtime('libasan.so')} {self.path}"
        # the sanitizers' runtime flags (compiler-rt's sanitizer_flags.inc, asan_flags.inc):
        # the first error aborts (a signal the test sees) and is written to a file per
        # process; no leak check, as the tools themselves are not built for it and leave
        # their memory to exit; and no look at a write's or sendmsg's buffer after the
        # call has returned (SUPPRESSIONS)
        env["ASAN_OPTIONS"] = ":".join(
            [
                "abort_on_error=1",
                "halt_on_error=1",
                "detect_leaks=0",
                "intercept_send=0",
                f"suppressions={self.suppressions}",
                f"log_path={self.reports}/asan",
            ]
        )
        env["UBSAN_OPTIONS"] = (
            f"halt_on_error=1:abort_on_error=1:print_stacktrace=1:log_path={self.reports}/ubsan"
        )
        return env

    def found(self) -> str:
        """Every report written so far (empty: none)."""
        return "".join(
            f"== {p.name}\n{p.read_text(errors='replace')[-6000:]}"
            for p in sorted(self.reports.glob("*san.*"))
        )

    def clear(self) -> None:
        for p in self.reports.glob("*san.*"):
            p.unlink()


_built: list[AsanLibrary] = []


def asan_build(tmp_path_factory) -> AsanLibrary:
    """The host library with AddressSanitizer and UBSan, built once per session."""
    if not _built:
        where = tmp_path_factory.mktemp("asan")
        reports = where / "reports"
        reports.mkdir()
        lib = build_library(where / "libfabriclab-umad-asan.so", sanitize=True)
        suppressions = where / "asan.supp"
        suppressions.write_text(SUPPRESSIONS)
        _built.append(AsanLibrary(lib, reports, suppressions))
    return _built[0]
