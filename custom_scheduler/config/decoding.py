"""Strict, error-collecting reads of raw YAML values, with field paths.

kube-scheduler decodes its config strictly: an unknown field, a duplicated key or a value of the
wrong type is an error, not something silently dropped. We do the same, but instead of stopping at
the first problem every read records a :class:`~custom_scheduler.errors.FieldError` and returns a
placeholder (the default), so one pass reports everything wrong with a file. The placeholder never
escapes: the loader raises if any error was recorded.

Paths use the YAML's camelCase names with ``.`` between fields and ``[i]`` for list items
(``profiles[0].plugins.score.enabled[1].weight``), which is what the operator searches the file for.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping
from typing import Any, TypeVar

from custom_scheduler.config import durations
from custom_scheduler.errors import ConfigError, FieldError

__all__ = ["Errors", "Reader", "index", "join", "type_name"]

T = TypeVar("T")


def join(path: str, key: str) -> str:
    """``path.key`` (just ``key`` at the top level)."""
    return f"{path}.{key}" if path else key


def index(path: str, i: int) -> str:
    """``path[i]``."""
    return f"{path}[{i}]"


def type_name(value: object) -> str:
    """The YAML-ish name of a value's type, for messages (``"a string"``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


class Errors:
    """An append-only list of field errors."""

    def __init__(self) -> None:
        self.items: list[FieldError] = []

    def add(self, path: str, message: str) -> None:
        self.items.append(FieldError(path, message))

    def absorb(self, error: ConfigError) -> None:
        """Take over every error of a :class:`ConfigError` (e.g. from a plugin's args parser)."""
        self.items.extend(error.errors)

    def __bool__(self) -> bool:
        return bool(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def raise_if_any(self) -> None:
        if self.items:
            raise ConfigError(self.items)


class Reader:
    """Typed access to one mapping of the document, remembering which keys were read.

    A value that is absent or null reads as "unset" (the default); a value of the wrong type is
    recorded as an error and also reads as the default. :meth:`finish` reports every key nobody
    read as an unknown field.
    """

    def __init__(self, raw: object, path: str, errors: Errors) -> None:
        self.path = path
        self.errors = errors
        self._seen: set[str] = set()
        if raw is None:
            self._raw: Mapping[Any, Any] = {}
        elif isinstance(raw, Mapping):
            self._raw = raw
        else:
            errors.add(path, f"expected a mapping, got {type_name(raw)}")
            self._raw = {}

    def raw(self, key: str) -> Any:
        """The raw value of ``key`` (None when absent), marked as read."""
        self._seen.add(key)
        return self._raw.get(key)

    def path_of(self, key: str) -> str:
        return join(self.path, key)

    def _typed(self, key: str, default: T, ok: tuple[type, ...], what: str) -> Any:
        value = self.raw(key)
        if value is None:
            return default
        # bool is an int subclass; "qps: true" must not read as 1.
        if not isinstance(value, ok) or (isinstance(value, bool) and bool not in ok):
            self.errors.add(self.path_of(key), f"expected {what}, got {type_name(value)}")
            return default
        return value

    def integer(self, key: str, default: int) -> int:
        value: int = self._typed(key, default, (int,), "an integer")
        return value

    def opt_integer(self, key: str) -> int | None:
        value: int | None = self._typed(key, None, (int,), "an integer")
        return value

    def number(self, key: str, default: float) -> float:
        value: float = self._typed(key, default, (int, float), "a number")
        return float(value)

    def boolean(self, key: str, default: bool) -> bool:
        value: bool = self._typed(key, default, (bool,), "a boolean (true or false)")
        return value

    def string(self, key: str, default: str) -> str:
        value: str = self._typed(key, default, (str,), "a string")
        return value

    def opt_string(self, key: str) -> str | None:
        value: str | None = self._typed(key, None, (str,), "a string")
        return value

    def duration(self, key: str, default: float) -> float:
        """A Go duration string (``"15s"``) as seconds."""
        value = self.raw(key)
        if value is None:
            return default
        if not isinstance(value, str):
            self.errors.add(
                self.path_of(key), f'expected a duration string like "15s", got {type_name(value)} {value!r}'
            )
            return default
        try:
            return durations.parse_duration(value)
        except ValueError as e:
            self.errors.add(self.path_of(key), str(e))
            return default

    def sequence(self, key: str) -> list[Any]:
        """A list (absent or null → empty)."""
        value = self.raw(key)
        if value is None:
            return []
        if not isinstance(value, list):
            self.errors.add(self.path_of(key), f"expected a list, got {type_name(value)}")
            return []
        return value

    def child(self, key: str) -> Reader:
        """A reader for the nested mapping ``key`` (absent or null → empty)."""
        return Reader(self.raw(key), self.path_of(key), self.errors)

    def items(self) -> Iterator[tuple[str, Any]]:
        """Every (key, value) pair, all marked as read (for free-form mappings)."""
        for key, value in self._raw.items():
            self._seen.add(key)
            yield key, value

    def finish(self, *, hints: Mapping[str, str] | None = None) -> None:
        """Report every key that was never read as an unknown field.

        ``hints`` maps a known-but-unsupported field to an explanation used instead of the generic
        "unknown field" message.
        """
        hints = hints or {}
        known = sorted(k for k in self._seen if isinstance(k, str))
        for key in self._raw:
            if key in self._seen:
                continue
            name = str(key)
            if name in hints:
                self.errors.add(join(self.path, name), hints[name])
                continue
            message = f'unknown field "{name}"'
            close = difflib.get_close_matches(name, known, n=1)
            if close:
                message += f' (did you mean "{close[0]}"?)'
            self.errors.add(join(self.path, name), message)
