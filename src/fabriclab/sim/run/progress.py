"""How ``up`` shows its phases: building the model, serving, OpenSM sweeping (its state
and the MADs answered so far), ready.

On a terminal, rich's progress display (a spinner and the time spent per phase); else one
timestamped line per phase on stderr, and one per change while OpenSM sweeps (at most
every few seconds).  A detached ``up`` (the same command run in the background) sends
its phases to the ``up`` that started it through a pipe (``FABRICLAB_PROGRESS_FD``), one
JSON object a line, which that one shows as its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import time
from typing import TextIO

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn

ENV = "FABRICLAB_PROGRESS_FD"  # the pipe a detached up reports its phases on
LABELS = {
    "building": "building the model",
    "serving": "serving",
    "sweeping": "OpenSM sweeping",
    "ready": "ready",
}
UPDATE_EVERY = 5.0  # seconds between plain lines of one phase whose detail changes
# a plain phase line ("12:00:01 [   0.4 s] serving: ..."), as Plain writes it
PHASE_LINE = re.compile(r"\d\d:\d\d:\d\d \[ *\d+\.\d s\] ")


class Phases:
    """Where ``up`` reports its phases: a phase begins (:meth:`phase`), its detail
    changes (:meth:`update`), it is over (:meth:`close`).  This one shows nothing."""

    def phase(self, name: str, detail: str = "") -> None:
        """Phase ``name`` (a key of LABELS) begins; what it is at."""

    def update(self, detail: str) -> None:
        """What the current phase is at now."""

    def close(self) -> None:
        """No more phases."""


class Lines(Phases):
    """Timestamped lines on ``stream``: ``HH:MM:SS [  0.4 s] serving: …`` (seconds
    since the first phase).  The first phase's line waits for the second: a spec or an
    option refused while the model is built is the one line of its error alone."""

    def __init__(self, stream: TextIO | None = None):
        self.stream = stream
        self.start: float | None = None
        self.current = ""
        self.said = ("", 0.0)  # the last detail line and when
        self.held: str | None = None  # the first phase's line, until the second begins

    def _line(self, text: str, hold: bool = False) -> None:
        now = time.monotonic()
        self.start = now if self.start is None else self.start
        line = f"{time.strftime('%H:%M:%S')} [{now - self.start:6.1f} s] {text}\n"
        if hold:
            self.held = line
            return
        stream = self.stream or sys.stderr
        with contextlib.suppress(OSError, ValueError):
            stream.write((self.held or "") + line)
            stream.flush()
        self.held = None

    def phase(self, name: str, detail: str = "") -> None:
        self.current = LABELS.get(name, name)
        first = self.start is None
        self._line(f"{self.current}: {detail}" if detail else self.current, hold=first)
        self.said = (detail, time.monotonic())

    def update(self, detail: str) -> None:
        last, when = self.said
        state = detail.split(",", 1)[0]
        if detail == last or (
            state == last.split(",", 1)[0] and time.monotonic() - when < UPDATE_EVERY
        ):
            return
        self._line(f"{self.current}: {detail}")
        self.said = (detail, time.monotonic())


class Display(Phases):
    """rich's progress display on a terminal: a line per phase, the current one
    spinning, each with the time it took."""

    def __init__(self, console: Console | None = None):
        self.progress = Progress(
            SpinnerColumn(finished_text="[green]✓"),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            console=console or Console(stderr=True),
        )
        self.task: TaskID | None = None
        self.label = ""
        self.progress.start()

    def _finish(self) -> None:
        if self.task is not None:
            self.progress.update(self.task, total=1, completed=1)
            self.progress.stop_task(self.task)

    def phase(self, name: str, detail: str = "") -> None:
        self._finish()
        self.label = LABELS.get(name, name)
        if name == "ready":
            self.task = self.progress.add_task(self._text(detail), total=1, completed=1)
            self.close()
            return
        self.task = self.progress.add_task(self._text(detail), total=None)

    def _text(self, detail: str) -> str:
        from rich.markup import escape

        return escape(f"{self.label}: {detail}" if detail else self.label)

    def update(self, detail: str) -> None:
        if self.task is not None:
            self.progress.update(self.task, description=self._text(detail))

    def close(self) -> None:
        self._finish()
        self.task = None
        self.progress.stop()


class Pipe(Phases):
    """JSON lines on a pipe to the ``up`` that started this one (see :func:`relay`)."""

    def __init__(self, fd: int):
        self.fd: int | None = fd

    def _send(self, doc: dict) -> None:
        if self.fd is None:
            return
        try:
            os.write(self.fd, (json.dumps(doc) + "\n").encode())
        except OSError:  # the parent has gone: nobody to tell
            self.close()

    def phase(self, name: str, detail: str = "") -> None:
        self._send({"phase": name, "detail": detail})

    def update(self, detail: str) -> None:
        self._send({"detail": detail})

    def close(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None


class Both(Phases):
    """Each report to several."""

    def __init__(self, *sinks: Phases):
        self.sinks = sinks

    def phase(self, name: str, detail: str = "") -> None:
        for s in self.sinks:
            s.phase(name, detail)

    def update(self, detail: str) -> None:
        for s in self.sinks:
            s.update(detail)

    def close(self) -> None:
        for s in self.sinks:
            s.close()


def shown(stream: TextIO | None = None) -> Phases:
    """Phases as this process shows them: rich's display on a terminal, else lines."""
    stream = stream or sys.stderr
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError, OSError):
        tty = False
    return Display() if tty else Lines(stream)


def for_server() -> Phases:
    """The phases of a serving ``up``: lines on stderr (its log when detached), and the
    pipe to the ``up`` that started it, if one did."""
    fd = os.environ.pop(ENV, None)
    own = shown()
    if fd is None or not fd.isdigit():
        return own
    return Both(own if isinstance(own, Lines) else Lines(), Pipe(int(fd)))


class Relay:
    """The reading end of a detached ``up``'s pipe: its reports shown as ours."""

    def __init__(self, fd: int, into: Phases, current: str = "building"):
        os.set_blocking(fd, False)
        self.fd: int | None = fd
        self.into = into
        self.buf = b""
        self.last = current  # the phase ``into`` shows now (the same again: its detail)

    def pump(self) -> str:
        """Show what has come; the last phase begun ('' before any)."""
        while self.fd is not None:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            except OSError:
                data = b""
            if not data:
                os.close(self.fd)
                self.fd = None
                break
            self.buf += data
        *lines, self.buf = self.buf.split(b"\n")
        for line in lines:
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if not isinstance(doc, dict):
                continue
            if "phase" in doc and doc["phase"] != self.last:
                self.last = str(doc["phase"])
                self.into.phase(self.last, str(doc.get("detail", "")))
            else:
                self.into.update(str(doc.get("detail", "")))
        return self.last

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
