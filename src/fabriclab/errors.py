"""User-facing errors: each problem is one line, ``error: <where>: <what>``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    where: str
    what: str

    def __str__(self) -> str:
        return f"{self.where}: {self.what}" if self.where else self.what


class FabriclabError(Exception):
    """An error the CLI reports as ``error:`` lines and exit status 2, never a traceback.
    ``warnings`` are what was noticed on the way, printed first."""

    def __init__(self, problems: list[Problem] | str, where: str = "",
                 warnings: list[Problem] | None = None):
        if isinstance(problems, str):
            problems = [Problem(where, problems)]
        self.problems = problems
        self.warnings = warnings or []
        super().__init__("; ".join(str(p) for p in problems))


class SpecError(FabriclabError):
    """The spec is invalid."""


class InputError(FabriclabError):
    """An input file (a dump, a node name on the command line) cannot be used."""
