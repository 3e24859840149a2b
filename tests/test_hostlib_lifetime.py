"""The host library's fd table and threads (sim/host/hostlib/slots.c): a umad file lives
while any fd or call holds it, a thread cancelled inside a call leaves no lock held, and
the dup family, close_range, closefrom and closes the library does not see keep the
table the kernel's.  A C probe (tests/probes/lifetime.c) runs under the library, plain
and built with AddressSanitizer, against test_hostlib's server end of the protocol."""

from __future__ import annotations

import errno
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from helpers import wait_for
from test_hostlib import HOSTLIB, Conn, Stub, answer_smp, send_message

from fabriclab.ib import hostwire

PROBE = Path(__file__).parent / "probes" / "lifetime.c"
DEADLINE = 30  # seconds for a probe; the probe itself gives up after 20


def _gcc(*argv: str) -> None:
    r = subprocess.run(["gcc", *argv], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path | str]:
    """The probe, and the library built from the current sources with AddressSanitizer
    (the package's own build is the plain one) and the runtime it needs preloaded."""
    d = tmp_path_factory.mktemp("lifetime")
    _gcc("-O1", "-g", "-Wall", "-Wextra", "-Werror", "-pthread", "-o", str(d / "probe"),
         str(PROBE))  # fmt: skip
    sources = sorted(str(c) for c in HOSTLIB.glob("*.c"))
    # heap checks only: a thread cancelled inside the library is unwound through frames
    # whose stack redzones nothing unpoisons, which ASan's next stack check takes for an
    # overflow (its own hint: "a custom stack unwind mechanism")
    _gcc("-O1", "-g", "-fsanitize=address", "--param=asan-stack=0", "-fno-omit-frame-pointer",
         "-fPIC", "-shared", "-pthread", "-fexceptions", "-o", str(d / "lib-asan.so"), *sources,
         "-ldl")  # fmt: skip
    asan = subprocess.run(
        ["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True
    ).stdout.strip()
    (d / "hello.txt").write_text("hello")
    return {"dir": d, "probe": d / "probe", "asan": f"{asan} {d / 'lib-asan.so'}"}


def _env(stub: Stub, built: dict, asan: bool) -> dict[str, str]:
    env = stub.env()
    if asan:
        env["LD_PRELOAD"] = str(built["asan"])
        env["ASAN_OPTIONS"] = "detect_leaks=1:exitcode=66"
    return env


def _probe(stub: Stub, built: dict, case: str, asan: bool) -> subprocess.CompletedProcess:
    argv = [str(built["probe"]), case, str(built["dir"] / "hello.txt")]
    return subprocess.run(
        argv, env=_env(stub, built, asan), capture_output=True, text=True, timeout=DEADLINE,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def _lines(r: subprocess.CompletedProcess) -> list[str]:
    assert "ERROR: AddressSanitizer" not in r.stderr, r.stderr
    assert "LeakSanitizer" not in r.stderr, r.stderr
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    assert "fabriclab:" not in r.stderr, r.stderr
    return r.stdout.splitlines()


@pytest.mark.parametrize("end", ["answer", "hangup"])
@pytest.mark.parametrize("asan", [False, True], ids=["plain", "asan"])
def test_a_read_blocked_while_another_thread_closes_the_fd_goes_on(built, asan, end):
    """As on Linux, the blocked read holds the file: the close takes the number away,
    the read goes on, and returns the answer the server sends after the close, or
    EIO with the one line (the device fails as a kernel umad file whose port went away) when the server hangs up then; the file is freed when it
    returns (AddressSanitizer: no use after free, no leak)."""
    held: list[tuple[Conn, bytes]] = []
    stub = Stub(None, lambda conn, msg: held.append((conn, msg)) or [])
    try:
        p = subprocess.Popen(
            [str(built["probe"]), "close-blocked", str(built["dir"] / "hello.txt")],
            env=_env(stub, built, asan), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        try:
            assert p.stdout is not None
            assert p.stdout.readline() == "ask 320\n"
            assert p.stdout.readline() == "close 0\n"
            wait_for(lambda: held, 10, "SubnGet at the server", interval=0.01)
            conn, msg = held[0]
            if end == "answer":
                send_message(conn.sock, answer_smp(conn, msg)[0])
            else:
                conn.sock.shutdown(socket.SHUT_RDWR)
            out, err = p.communicate(timeout=DEADLINE)
        finally:
            p.kill()
            p.wait()
    finally:
        stub.close()
    gone = f"fabriclab: the fabric server '{stub.name}' went away\n"
    if end == "hangup":
        assert err.count(gone) == 1, err
        err = err.replace(gone, "")
    r = subprocess.CompletedProcess(p.args, p.returncode, out, err)
    assert _lines(r) == ["read 320" if end == "answer" else f"read {-errno.EIO}"]


@pytest.mark.parametrize("asan", [False, True], ids=["plain", "asan"])
def test_a_thread_cancelled_in_read_leaves_the_fd_usable(built, asan):
    """OpenSM stops its receiver thread with pthread_cancel while it blocks in read: the
    receive lock and the call's reference go with it, and another thread then
    registers, writes, reads and closes the same fd without waiting."""
    stub = Stub(None, answer_smp)
    try:
        lines = _lines(_probe(stub, built, "cancel", asan))
    finally:
        stub.close()
    assert lines == ["cancelled 1", "reg 1", "ask 320", "read 320", "close 0"]


class HeldRegister(Stub):
    """The server end, answering no REGISTER until ``release`` is set."""

    def __init__(self) -> None:
        super().__init__(None, answer_smp)
        self.release = threading.Event()

    def _serve(self, c: socket.socket) -> None:
        try:
            raw = c.recv(hostwire.HELLO.size, socket.MSG_PEEK)
        except OSError:  # closed already: the test ended before this thread ran
            return
        if hostwire.HELLO.unpack_from(raw)[2] == hostwire.KIND_REGISTER:
            self.release.wait(DEADLINE)
            c.close()
            return
        super()._serve(c)


@pytest.mark.parametrize("asan", [False, True], ids=["plain", "asan"])
def test_a_thread_cancelled_in_a_registration_leaves_the_fd_usable(built, asan):
    """A registration told to the server holds the fd's agent lock while it waits for
    the answer (in poll): cancelled there, the thread leaves the lock free, and another
    registers, writes, reads and closes."""
    stub = HeldRegister()
    try:
        lines = _lines(_probe(stub, built, "cancel-register", asan))
    finally:
        stub.release.set()
        stub.close()
    assert lines == ["cancelled 1", "reg 0", "ask 320", "read 320", "close 0"]


@pytest.mark.parametrize("asan", [False, True], ids=["plain", "asan"])
def test_threads_cancelled_in_registrations_leave_no_socket_behind(built, asan):
    """Registration makes a connection of its own and waits for the server's answer in
    poll, a cancellation point: 40 threads cancelled there one after another leave the
    process with the fds it had (the library closes the socket as the thread unwinds)."""
    stub = HeldRegister()
    try:
        lines = _lines(_probe(stub, built, "cancel-register-fds", asan))
    finally:
        stub.release.set()
        stub.close()
    assert lines == ["fds 0 more after 40", "close 0"]


@pytest.mark.parametrize("asan", [False, True], ids=["plain", "asan"])
def test_dup_dup2_dup3_and_fcntl_share_the_umad_file(built, asan):
    """Each dup of a umad fd is the same file (the kernel's shared struct file): the
    agents registered through one are the others' (ids go on 0, 1, 2, 3, 4), a MAD goes out
    and its answer comes back through a dup after the first fd closed, and the
    connection lasts until the last of them closes.  A file dup2'ed onto a umad fd's
    number reads as the file and its ioctl is the kernel's ENOTTY."""
    stub = Stub(None, answer_smp)
    try:
        lines = _lines(_probe(stub, built, "dups", asan))
    finally:
        stub.close()
    enotty = -errno.ENOTTY
    assert lines == [
        "dup 0",
        "ask 320",
        "read 320",
        "dupfd 1 1",
        "dup2 2",
        "dup3 3",
        "dupfd64 1 4",
        "over 1",
        "file 5 hello",
        f"ioctl {enotty}",
        "ask51 320",
        "read51 320",
    ]
    assert len(stub.conns) == 1  # one open, one connection


@pytest.mark.parametrize("asan", [False, True], ids=["plain", "asan"])
def test_a_file_reusing_a_closed_umad_fds_number_is_the_file(built, asan):
    """close_range, closefrom, fclose(fdopen()) and a bare close system call each free
    a umad fd's number; the file that takes it next reads as itself (not as a umad
    device), and its ioctl is the kernel's.  close_range with CLOSE_RANGE_CLOEXEC closes
    nothing."""
    stub = Stub(None, answer_smp)
    try:
        lines = _lines(_probe(stub, built, "closes", asan))
    finally:
        stub.close()
    enotty = -errno.ENOTTY
    assert lines == [
        "range 0",
        "same 1",
        "file 5 hello",
        "cloexec 0",
        "still 0",
        "same 1",
        "file 5 hello",
        "same 1",
        f"ioctl {enotty}",
        "file 5 hello",
        "same 1",
        "file 5 hello",
    ]


_PYDUP = r"""
import fcntl, os, struct
fd = os.open("/dev/infiniband/umad0", os.O_RDWR)
d = os.dup(fd)  # fcntl(F_DUPFD_CLOEXEC) in CPython
os.close(fd)
req = bytearray(struct.pack("<I16sBBB3sB", 0, bytes(16), 0, 0x81, 1, bytes(3), 0))
print(fcntl.ioctl(d, 0xC01C1B01, req), struct.unpack_from("<I", req)[0])
os.close(d)
"""


def test_a_python_programs_os_dup_is_the_umad_file(tree_free_stub):
    """CPython's os.dup (fcntl with F_DUPFD_CLOEXEC, through fcntl64) gives an fd whose
    umad ioctl is the library's, after the first fd closed."""
    r = subprocess.run(
        [sys.executable, "-c", _PYDUP], env=tree_free_stub.env(), capture_output=True,
        text=True, timeout=DEADLINE, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert (r.returncode, r.stdout, r.stderr) == (0, "0 0\n", "")


@pytest.fixture
def tree_free_stub():
    stub = Stub(None, answer_smp)
    yield stub
    stub.close()
