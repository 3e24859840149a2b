"""Reading the files a user names (specs, scenarios, dumps, node lists, OpenSM files): one
routine, with one-line errors for paths that are not readable regular files, sizes
checked before and while reading, text checked before parsing (JSON's nesting and number
lengths too, for what arrives on a socket)."""

from __future__ import annotations

import errno
import os
import re
import socket
import stat
from itertools import accumulate

from .errors import InputError, Problem

# What stat() says about a command-line argument that is not a path to anything: such an
# argument may still be a preset name or a hostlist.
_NOT_A_PATH = {errno.ENOENT, errno.ENOTDIR, errno.ENAMETOOLONG, errno.EINVAL}


def path_kind(arg: str, where: str | None = None, error=InputError) -> str | None:
    """What ``arg`` names: "file", "dir", or None when nothing is there (or the text
    cannot be a path at all, e.g. longer than NAME_MAX, so it may be a preset name or a
    hostlist); an error when something is there that cannot be looked at (a path
    through an unreadable directory)."""
    try:
        st = os.stat(arg)
    except OSError as e:
        if e.errno in _NOT_A_PATH:
            return None
        raise error([Problem(where or arg, f"cannot read: {e.strerror}")]) from None
    except ValueError:  # an embedded NUL byte
        return None
    return "dir" if stat.S_ISDIR(st.st_mode) else "file"


def read_bytes(
    path: str, max_bytes: int, what: str, error=InputError, *, prefix: str = ""
) -> bytes:
    """The file's bytes, or a one-line error: unreadable, not a regular file (a FIFO, a
    device, a socket: refused before any read, as one could hang or never end), larger
    than ``max_bytes`` (checked on the open file before reading, and while reading), or
    binary (a NUL byte: every input fabriclab reads is text; checked chunk by chunk).
    Every file a user names is read here."""
    chunks: list[bytes] = []
    size = 0
    try:  # O_NONBLOCK: opening a FIFO with no writer returns at once (no effect on a file)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise error([Problem(path, f"cannot read: {e.strerror}")]) from None
    except ValueError:  # an embedded NUL byte
        raise error([Problem(repr(path), "cannot read: not a path (a NUL byte)")]) from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise error([Problem(path, f"is {_kind(st.st_mode)}, not a regular file")])
    with os.fdopen(fd, "rb") as f:
        try:
            if st.st_size > max_bytes:
                raise error(
                    [
                        Problem(
                            path,
                            f"{_mib(st.st_size)} is too large for {what} "
                            f"(at most {_mib(max_bytes)})",
                        )
                    ]
                )
            while True:
                chunk = f.read(min(1 << 20, max_bytes + 1 - size))
                if not chunk:
                    break
                nul = chunk.find(b"\0")
                if nul >= 0:
                    raise error(
                        [
                            Problem(
                                path,
                                f"{prefix}a binary file (NUL byte at offset {size + nul}), "
                                f"not {what}",
                            )
                        ]
                    )
                size += len(chunk)
                if size > max_bytes:  # it grew while being read
                    raise error(
                        [Problem(path, f"more than {_mib(max_bytes)}: too large for {what}")]
                    )
                chunks.append(chunk)
        except OSError as e:
            raise error([Problem(path, f"cannot read: {e.strerror}")]) from None
    return b"".join(chunks)


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a file"


def decode_text(
    data: bytes, source: str, what: str, *, strict: bool = True, error=InputError
) -> str:
    """Bytes as text: a NUL byte means a binary file; with ``strict`` the text must be
    UTF-8 (YAML is), otherwise undecodable bytes become U+FFFD (tools print raw bytes)."""
    nul = data.find(b"\0")
    if nul >= 0:
        line = data.count(b"\n", 0, nul) + 1
        raise error(
            [Problem(f"{source}:{line}", f"a binary file (NUL byte at offset {nul}), not {what}")]
        )
    if not strict:
        return data.decode("utf-8", errors="replace")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise error(
            [
                Problem(
                    f"{source}:{line}",
                    f"not UTF-8 text (byte 0x{data[e.start]:02x} at "
                    f"offset {e.start}); {what} is UTF-8",
                )
            ]
        ) from None


def read_text(
    path: str, max_bytes: int, what: str, *, strict: bool = True, error=InputError, prefix: str = ""
) -> str:
    data = read_bytes(path, max_bytes, what, error, prefix=prefix)
    return decode_text(data, path, what, strict=strict, error=error)


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.0f} MiB" if n >= 1 << 20 else f"{n} bytes"


# --- JSON text within bounds ----------------------------------------------------------
# Python's json module recurses once per nesting level (RecursionError past ~1,000) and
# converts integers through str -> int (ValueError past sys.get_int_max_str_digits(),
# 4,300 digits, and quadratic time before that), and it has no option to bound either.
# Hence a scan before any parsing, with regular expressions that run in linear time.

# A JSON string from its opening quote to its closing one, or to the end of the text if
# it is never closed.  Possessive quantifiers (Python 3.11) keep each match linear, and
# as a match always succeeds at a quote, the scan never restarts inside a string.
_JSON_STRING = re.compile(r'"[^"\\]*+(?:\\.?[^"\\]*+)*+"?', re.S)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def json_bounds(text: str, max_depth: int, max_digits: int) -> str | None:
    """What is wrong with JSON ``text`` (nested deeper than ``max_depth`` levels, or a
    number of more than ``max_digits`` digits), without parsing it; None: nothing.
    Brackets and digits inside strings do not count."""
    bare = _JSON_STRING.sub('""', text)
    if re.search(rf"[0-9]{{{max_digits + 1}}}", bare):
        return f"has a number of more than {max_digits} digits"
    brackets = _NOT_BRACKET.sub("", bare)
    if max(accumulate(map(_STEP.__getitem__, brackets)), default=0) > max_depth:
        return f"nests deeper than {max_depth} levels"
    return None


def parse_host_port(text: str, where: str) -> tuple[str, int]:
    """``[HOST:]PORT`` for a TCP listener (HOST an IPv4 address, [IPv6] or a name;
    default 127.0.0.1; PORT 0: any free one): the address and port, or an InputError
    naming ``where`` (the option)."""
    host, sep, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        p = int(port)
        if not 0 <= p < 65536:
            raise ValueError
    except ValueError:
        raise InputError(
            [Problem(where, f"{text!r}: want [HOST:]PORT with a port 0-65535")]
        ) from None
    host = host if sep and host else "127.0.0.1"
    try:
        info = socket.getaddrinfo(host, p, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        raise InputError(
            [Problem(where, f"{host!r}: not an address or a name this host resolves")]
        ) from None
    return (str(info[0][4][0]), p)
