"""fabriclab's tables as tests read them: run in a pseudo-terminal of a given width (the
boxed table a terminal shows) and read back cell by cell, or piped (plain columns)."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Mapping

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def in_terminal(
    args: list[str], columns: int, env: Mapping[str, str] | None = None, timeout: float = 120
) -> tuple[int, str]:
    """``fabriclab ARGS`` with stdout and stderr a pseudo-terminal ``columns`` wide (no
    COLUMNS in its environment: it asks the terminal); its exit status and what it
    wrote, without colours and with ``\\n`` line ends."""
    env = dict(os.environ if env is None else env)
    env.pop("COLUMNS", None)
    env.pop("LINES", None)
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "fabriclab.cli", *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
        )
    finally:
        os.close(slave)
    data = b""
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                proc.kill()
                raise AssertionError(f"fabriclab {' '.join(args)}: no end within {timeout:g} s")
            if not select.select([master], [], [], left)[0]:
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every writer has closed the terminal
                break
            if not chunk:
                break
            data += chunk
    finally:
        os.close(master)
    code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    return code, _ANSI.sub("", data.decode()).replace("\r\n", "\n")


def boxed_column(text: str, index: int) -> str:
    """What column ``index`` (0 = the first) of a boxed table's body holds, top to bottom,
    its pieces joined without the spaces between them: every character of its cells,
    in order, however the terminal's width folded them."""
    pieces: list[str] = []
    body = False
    for line in text.splitlines():
        if line.startswith(("┡", "├", "┌")):
            body = True
        elif body and line.startswith("│"):
            pieces.append(line.split("│")[1 + index])
    return "".join("".join(pieces).split())


def plain_rows(text: str, title: str | None = None) -> list[dict[str, str]]:
    """A plain table's rows (after its ``title`` line, when given) as header -> cell:
    the columns are where every line has two or more spaces between text."""
    lines = text.splitlines()
    if title is not None:
        lines = lines[lines.index(title) + 1 :]
    width = max(map(len, lines))
    gap = [all(i >= len(ln) or ln[i] == " " for ln in lines) for i in range(width)]
    # a column ends where two or more spaces run down every line
    sep = [
        g and ((i > 0 and gap[i - 1]) or (i + 1 < width and gap[i + 1])) for i, g in enumerate(gap)
    ]
    spans: list[tuple[int, int]] = []
    for i in range(width):
        if sep[i]:
            continue
        if spans and spans[-1][1] == i:
            spans[-1] = (spans[-1][0], i + 1)
        else:
            spans.append((i, i + 1))
    header = [lines[0][a:b].strip() for a, b in spans]
    return [
        {h: ln[a:b].strip() for h, (a, b) in zip(header, spans, strict=True)} for ln in lines[1:]
    ]
