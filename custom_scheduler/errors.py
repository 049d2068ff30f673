"""Errors that cross module boundaries.

``ConfigError`` collects every problem found in a configuration, each with the field path it
concerns (``profiles[0].pluginConfig[1].args.scoringStrategy.type``), so an operator fixes a bad
file in one pass. The CLI prints them and exits with code 2; the daemon's config reload logs them
and keeps the running config.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FieldError:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class ConfigError(ValueError):
    """One or more invalid fields in a configuration."""

    def __init__(self, errors: Iterable[FieldError] | str, path: str = "") -> None:
        if isinstance(errors, str):
            errors = [FieldError(path, errors)]
        self.errors: list[FieldError] = list(errors)
        super().__init__("; ".join(str(e) for e in self.errors))
