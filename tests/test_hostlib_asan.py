"""The host library built other ways than the package's: against a glibc older than
2.33 the build stops with one clear error; with AddressSanitizer and UBSan
(tests/hostlib_build.py) the harness catches a deliberate read past a buffer inside the
library, and the real OpenSM, ibstat, ibstatus, ibnetdiscover, smpquery, saquery and
perfquery run through it against 'fabriclab up' with no report."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

import pytest
from fabric_server import fabric_up
from helpers import stop_process, wait_for
from hostlib_build import HOSTLIB, AsanLibrary, asan_build, build_probe, package_cflags

from fabriclab.sim.run import tools

TRAY, OTHER = "sched-worker1", "sched-worker2"


@pytest.fixture(scope="module")
def asan_library(tmp_path_factory) -> AsanLibrary:
    return asan_build(tmp_path_factory)


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


# A program not built with ASan (as the tools are) hands stat() a path with no NUL after
# "/sys/class/infiniband": the library's own code reads the byte past the heap buffer.
_READ_PAST = r"""
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
int main(void)
{
    static const char p[] = "/sys/class/infiniband";
    char *path = malloc(sizeof p - 1);
    struct stat st;
    memcpy(path, p, sizeof p - 1);
    stat(path, &st);
    return 0;
}
"""

# Undefined behaviour: a signed overflow, in a probe built with the same flags.
_OVERFLOW = r"""
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv)
{
    int big = INT_MAX - 1 + argc; /* INT_MAX with no argument */
    (void)argv;
    printf("%d\n", big + 1);
    return 0;
}
"""


def test_the_harness_catches_a_deliberate_bug(asan_library: AsanLibrary, tmp_path):
    """Proof the ASan runs below would see a bug: the library's read past a buffer
    handed to it aborts the program with a report naming the library's function, and
    undefined behaviour stops a program at once under the harness's UBSan options."""
    asan_library.clear()
    probe = build_probe(_READ_PAST, tmp_path / "read_past")
    env = asan_library.env({"PATH": "/usr/bin:/bin", "FABRICLAB_SOCKNAME": "nobody"})
    r = subprocess.run([str(probe)], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == -signal.SIGABRT, (r.returncode, r.stderr)
    report = asan_library.found()
    assert "ERROR: AddressSanitizer: heap-buffer-overflow" in report, report
    # the first of the library's functions to look at the path (which one is the
    # library's business: the device check or the tree's rewrite)
    frame = r"READ of size \d+ .*\n(\s+#\d .*\n)*?\s+#\d .* in \w+ .*/hostlib/\w+\.c:\d+"
    assert re.search(frame, report), report
    asan_library.clear()
    probe = build_probe(_OVERFLOW, tmp_path / "overflow", sanitize=True)
    r = subprocess.run([str(probe)], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == -signal.SIGABRT and r.stdout == "", (r.returncode, r.stdout)
    # UBSan beside ASan writes to stderr (its log_path is ASan's, for ASan's reports)
    assert "overflow.c:9:5: runtime error: signed integer overflow" in r.stderr, r.stderr
    asan_library.clear()


def _clean(r: subprocess.CompletedProcess | int, lib: AsanLibrary, what: str) -> None:
    """No signal death and no sanitizer report."""
    code = r if isinstance(r, int) else r.returncode
    err = "" if isinstance(r, int) else r.stderr[-3000:]
    assert code >= 0, f"{what} died of signal {-code}:\n{err}\n{lib.found()}"
    assert lib.found() == "" and "runtime error:" not in err, f"{what}:\n{err}{lib.found()}"


def test_the_real_tools_and_opensm_run_clean_under_asan(
    real_tools, asan_library: AsanLibrary, tmp_path
):
    asan_library.clear()
    with fabric_up("lab", tmp_path / "lab") as f:
        inst = f.instance()

        def env(tray: str) -> dict[str, str]:
            return asan_library.env(tools.host_env(inst, tray, base=f.env))

        def run(tray: str, *argv: str) -> subprocess.CompletedProcess:
            r = subprocess.run(
                list(argv), env=env(tray), cwd=tmp_path, capture_output=True, text=True,
                timeout=60, stdin=subprocess.DEVNULL,
            )  # fmt: skip
            _clean(r, asan_library, " ".join(argv))
            assert r.returncode == 0, f"{' '.join(argv)} exited {r.returncode}: {r.stderr}"
            return r

        hca = f.cluster.tray(TRAY).hcas[2].ports[1]
        log = tmp_path / "opensm.log"
        conf = tmp_path / "opensm.conf"
        conf.write_text("force_log_flush TRUE\n")  # else SUBNET UP waits in its buffer
        sm_env = {**env(TRAY), "OSM_CACHE_DIR": str(tmp_path), "OSM_TMP_DIR": str(tmp_path)}
        sm = subprocess.Popen(
            ["opensm", "-F", str(conf), "-g", f"0x{hca.guid:016x}", "-e", "-f", str(log)],
            env=sm_env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:

            def up() -> bool:
                if sm.poll() is not None:
                    _clean(sm.returncode, asan_library, "opensm")
                    raise AssertionError(f"opensm exited {sm.returncode}")
                return log.exists() and "SUBNET UP" in log.read_text(errors="replace")

            wait_for(up, 90, "OpenSM (under ASan) logging SUBNET UP", interval=0.2)
            maps = run(TRAY, "cat", "/proc/self/maps").stdout  # what a tool here loads
            assert "/libasan.so" in maps and str(asan_library.path) in maps
            assert run(TRAY, "ibstat", "-l").stdout == "mlx5_0\nmlx5_1\nmlx5_2\nmlx5_3\n"
            assert run(OTHER, "ibstatus").stdout.count("rate:\t\t 400 Gb/sec (4X NDR)") == 4
            disc = run(OTHER, "ibnetdiscover", "-C", "mlx5_1").stdout
            assert len(re.findall(r"^Switch", disc, re.M)) == 2
            assert len(re.findall(r"^Ca", disc, re.M)) == 8
            out = run(OTHER, "smpquery", "-C", "mlx5_0", "nodeinfo", str(hca.lid)).stdout
            assert f"0x{hca.guid:016x}" in out
            nodes = run(OTHER, "saquery", "-C", "mlx5_3").stdout  # RMPP: a long answer
            assert nodes.count("NodeRecord dump:") == 10
            out = run(OTHER, "perfquery", "-x", "-C", "mlx5_2", str(hca.lid), "1").stdout
            assert re.search(r"^PortXmitData:\.+\d+$", out, re.M), out
            out = run(OTHER, "sminfo", "-C", "mlx5_0").stdout
            assert out.startswith(f"sminfo: sm lid {hca.lid} sm guid 0x{hca.guid:016x}"), out
        finally:
            stop_process(sm)
        # SIGTERM is how it was stopped; it exits by itself on it
        _clean(0 if sm.returncode == -signal.SIGTERM else sm.returncode, asan_library, "opensm")


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(pytest.main([__file__, "-q"]))


# One thread blocks reading a umad device; another closes it; then the server goes away
# and the read wakes.  The kernel keeps an open file alive while a call is in it
# (fdget in read(2), drivers/infiniband/core/user_mad.c's release only at the last
# reference): the read ends, on freed memory never.
_CLOSED_UNDER_A_READER = r"""
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int fd, tid;
static ssize_t got;
static int err;

static void *reader(void *arg)
{
    static char buf[64 + 256];
    (void)arg;
    __atomic_store_n(&tid, gettid(), __ATOMIC_RELEASE);
    got = read(fd, buf, sizeof buf);
    err = errno;
    return NULL;
}

/* Whether thread `t` sleeps in the kernel (proc(5): the state after the name). */
static int asleep(int t)
{
    char path[64], line[512];
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", t);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char *got_line = fgets(line, sizeof line, f);
    fclose(f);
    char *end = got_line ? strrchr(line, ')') : NULL;
    return end && end[1] == ' ' && end[2] == 'S';
}

int main(void)
{
    pthread_t t;
    fd = open("/dev/infiniband/umad0", O_RDWR);
    if (fd < 0) {
        perror("open");
        return 2;
    }
    pthread_create(&t, NULL, reader, NULL);
    int i = 0; /* wait, at most 5 s, until the reader sleeps in its read */
    for (; i < 500 && !(__atomic_load_n(&tid, __ATOMIC_ACQUIRE) && asleep(tid)); i++)
        usleep(10000);
    if (i == 500) {
        fprintf(stderr, "the reader never blocked\n");
        return 2;
    }
    close(fd);
    printf("closed\n");
    fflush(stdout);
    pthread_join(t, NULL);
    printf("read %zd %s\n", got, got < 0 ? strerror(err) : "");
    return 0;
}
"""


def test_a_device_closed_under_a_reader_then_the_server_gone(
    real_tools, asan_library: AsanLibrary, tmp_path
):
    """A umad fd closed by one thread while another reads it, then the server killed:
    the woken read ends cleanly on the file its reference keeps (before umad files were
    counted, it unlocked and freed memory close had freed: ASan heap-use-after-free)."""
    asan_library.clear()
    probe = build_probe(_CLOSED_UNDER_A_READER, tmp_path / "closed_under_reader")
    with fabric_up("lab", tmp_path / "lab") as f:
        inst = f.instance()
        env = asan_library.env(tools.host_env(inst, TRAY, base=f.env))
        p = subprocess.Popen(
            [str(probe)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            assert p.stdout is not None
            assert p.stdout.readline() == "closed\n"  # the probe's own sleep bounds this
            os.kill(inst.pid, signal.SIGKILL)
            out, err = p.communicate(timeout=30)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
    _clean(p.returncode, asan_library, "the probe")
    assert p.returncode == 0 and out.startswith("read -1 "), (out, err)
