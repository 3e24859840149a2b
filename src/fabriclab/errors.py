"""User-facing errors: each problem is one line, ``error: <where>: <what>``."""

from __future__ import annotations

from dataclasses import dataclass

from .limits import PROBLEMS_KEPT, PROBLEMS_SHOWN


@dataclass(frozen=True)
class Problem:
    where: str
    what: str

    def __str__(self) -> str:
        return f"{self.where}: {self.what}" if self.where else self.what


class FabriclabError(Exception):
    """An error the CLI reports as ``error:`` lines and exit status 2, never a traceback.
    ``warnings`` are what was noticed on the way, printed first."""

    def __init__(
        self,
        problems: list[Problem] | str,
        where: str = "",
        warnings: list[Problem] | None = None,
        warnings_dropped: int = 0,
        dropped: int = 0,
    ):
        if isinstance(problems, str):
            problems = [Problem(where, problems)]
        self.problems = problems
        self.dropped = dropped  # further problems, counted only
        self.warnings = warnings or []
        self.warnings_dropped = warnings_dropped
        super().__init__("; ".join(str(p) for p in problems))


class SpecError(FabriclabError):
    """The spec is invalid."""


class InputError(FabriclabError):
    """An input file (a dump, a node name on the command line) cannot be used."""


class ProblemLog:
    """Problems noticed while reading one input: the first ``keep`` are kept, the rest
    only counted, so that a file of a million bad lines costs no more than a thousand."""

    def __init__(self, keep: int | None = None):
        self.keep = PROBLEMS_KEPT if keep is None else keep
        self.items: list[Problem] = []
        self.dropped = 0

    def add(self, where: str, what: str) -> None:
        if len(self.items) < self.keep:
            self.items.append(Problem(where, what))
        else:
            self.dropped += 1

    def __len__(self) -> int:
        return len(self.items) + self.dropped

    def __bool__(self) -> bool:
        return bool(self.items) or self.dropped > 0


def shown(problems: list[Problem], kind: str, dropped: int = 0) -> list[str]:
    """The lines to print for ``problems`` (``kind`` is "error" or "warning"): the first
    PROBLEMS_SHOWN, then one line with the count of the rest."""
    out = [f"{kind}: {p}" for p in problems[:PROBLEMS_SHOWN]]
    rest = len(problems) - PROBLEMS_SHOWN + dropped if len(problems) > PROBLEMS_SHOWN else dropped
    if rest > 0:
        out.append(f"{kind}: … and {rest} more {kind}s like these")
    return out
