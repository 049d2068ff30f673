"""Go duration strings (``"15s"``, ``"1m30s"``, ``"500ms"``) ⇄ float seconds.

kube-scheduler's ``leaderElection`` durations are ``metav1.Duration`` values, which decode only from
strings in Go's ``time.ParseDuration`` syntax: a sequence of decimal numbers, each with an optional
fraction and a unit (``ns``, ``us``/``µs``, ``ms``, ``s``, ``m``, ``h``), optionally signed, or a
bare ``"0"``. A YAML number is refused, as upstream refuses it, so a config never means "15
nanoseconds" when the operator wrote ``15``.

:func:`format_duration` writes what Go's ``Duration.String()`` writes (``"1h0m0s"``, ``"1.5s"``,
``"500ms"``), so the effective config printed by ``check-config`` reads like kube-scheduler's and
parses back to the same value. Arithmetic is done on integer nanoseconds (with exact fractions while
parsing) so ``"0.1s"`` is exactly 100 ms rather than a float approximation of it.
"""

from __future__ import annotations

import re
from fractions import Fraction

__all__ = ["format_duration", "parse_duration"]

_NS_PER_UNIT: dict[str, int] = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,  # U+00B5 micro sign
    "μs": 1_000,  # U+03BC Greek mu
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "h": 3600 * 1_000_000_000,
}

_COMPONENT = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_WHOLE = re.compile(r"[+-]?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:ns|us|µs|μs|ms|s|m|h))+")

_NS_PER_S = 1_000_000_000


def parse_duration(text: str) -> float:
    """Parse a Go duration string into seconds.

    Raises:
        ValueError: ``text`` is not in Go's duration syntax (the message quotes it).
    """
    s = text.strip()
    if s in {"0", "+0", "-0"}:
        return 0.0
    if not _WHOLE.fullmatch(s):
        raise ValueError(f'invalid duration "{text}" (expected e.g. "15s", "1m30s", "500ms")')
    sign = -1 if s.startswith("-") else 1
    total = Fraction(0)
    for number, unit in _COMPONENT.findall(s):
        total += Fraction(number) * _NS_PER_UNIT[unit]
    return float(sign * round(total)) / _NS_PER_S


def _fraction(value: int, unit: int) -> str:
    """``value / unit`` in decimal, without trailing zeros (Go's fmtFrac + fmtInt)."""
    whole, rest = divmod(value, unit)
    if not rest:
        return str(whole)
    digits = len(str(unit)) - 1
    return f"{whole}.{str(rest).rjust(digits, '0').rstrip('0')}"


def format_duration(seconds: float) -> str:
    """Render seconds as Go's ``time.Duration.String()`` does (``15.0`` → ``"15s"``)."""
    ns = round(seconds * _NS_PER_S)
    if ns == 0:
        return "0s"
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    if ns < _NS_PER_S:
        for unit, size in (("ms", 1_000_000), ("µs", 1_000), ("ns", 1)):
            if ns >= size:
                return f"{sign}{_fraction(ns, size)}{unit}"
    hours, rest = divmod(ns, _NS_PER_UNIT["h"])
    minutes, rest = divmod(rest, _NS_PER_UNIT["m"])
    secs = f"{_fraction(rest, _NS_PER_S)}s"
    if hours:
        return f"{sign}{hours}h{minutes}m{secs}"
    if minutes:
        return f"{sign}{minutes}m{secs}"
    return f"{sign}{secs}"
