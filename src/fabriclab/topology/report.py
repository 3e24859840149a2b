"""What a topology run could not use: the warnings its inputs and provider gave, and
whether any of them changed the output (``topology`` then exits 1)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import Problem


@dataclass
class Report:
    """Warnings, in order; ``left_out`` marks that one of them changed the output."""

    problems: list[Problem] = field(default_factory=list)
    left_out: bool = False

    def warn(self, where: str, what: str, *, left_out: bool = True) -> None:
        """Note a problem; ``left_out``: it changed the output."""
        self.problems.append(Problem(where, what))
        self.left_out = self.left_out or left_out
