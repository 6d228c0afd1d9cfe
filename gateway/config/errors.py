"""The one exception every config loader failure becomes, and the one for other refusals.

A user fixing a config wants every problem at once, each pointing at a file and a line, so a
`ConfigError` carries a list of `Problem`s instead of stopping at the first.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a config file, located as precisely as the loader can."""

    file: str
    line: int | None
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        field = f" {self.field}:" if self.field else ""
        return f"{where}:{field} {self.message}"


class ConfigError(Exception):
    """Raised for any invalid config or rule pack; `str()` is one `FILE:LINE: field: …` per line."""

    def __init__(self, problems: list[Problem]) -> None:
        # Sorted by file and line, so a long report reads top to bottom through each file.
        self.problems = sorted(problems, key=lambda p: (p.file, p.line or 0))
        self.files: tuple[str, ...] = ()
        """The files the failed load named (absolute paths, those it could not read among
        them), filled in by the loader: a reload watches them until one fixes the error."""
        super().__init__("\n".join(str(p) for p in self.problems))

    @classmethod
    def single(cls, file: str, line: int | None, field: str, message: str) -> ConfigError:
        return cls([Problem(file, line, field, message)])


class Refused(Exception):
    """Input or an environment the command refuses, said in one line (exit status 1, no
    traceback): a sample no route matches, a runtime unsafe to expose. `mendpoint` catches it
    without importing the module that raised it."""
