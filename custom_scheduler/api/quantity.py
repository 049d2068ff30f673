"""Kubernetes resource quantities ("500m", "1.5Gi", "1e3", "2k") as exact integers.

Why integers: the filter compares sums of requests against allocatable, and kube-scheduler does that
in int64 milli-CPU and bytes. Floats would let rounding admit a pod that does not fit. We parse with
``decimal.Decimal`` (exact for every form Kubernetes accepts) and round *up*, as
``resource.Quantity.Value()`` / ``MilliValue()`` do.

Accepted grammar (``k8s.io/apimachinery/pkg/api/resource``): an optional sign, a decimal number, then
either a binary SI suffix (Ki Mi Gi Ti Pi Ei), a decimal SI suffix (n u m "" k M G T P E) or a
decimal exponent (e3, E-2).
"""

from __future__ import annotations

import functools
import re
from decimal import ROUND_CEILING, Decimal, InvalidOperation

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_RE = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$")


class QuantityError(ValueError):
    """A string that is not a valid Kubernetes quantity."""


#: The largest magnitude accepted, in the unit returned (bytes, counts, milli-CPU): int64, as
#: kube-scheduler's ``Value()``/``MilliValue()``. Checked on the Decimal *before* ``int()``, which
#: would otherwise build a billion-digit integer for ``"1e999999999"`` (a regex-valid quantity)
#: and hang the informer thread; and the node arrays are int64, which a larger value overflows.
MAX_VALUE = 2**63 - 1


def _bounded(d: Decimal, text: object) -> int:
    if not d.is_finite() or abs(d) > MAX_VALUE:
        raise QuantityError(f"quantity {text!r} is out of range")
    return int(d)


def parse(text: str | int | float) -> Decimal:
    """Parse a quantity into an exact Decimal in base units (cores, bytes, counts)."""
    if isinstance(text, bool):
        raise QuantityError(f"quantity must be a string or number, not {text!r}")
    if isinstance(text, int):
        return Decimal(text)
    if isinstance(text, float):
        return Decimal(repr(text))
    s = text.strip()
    m = _RE.match(s)
    if m is None:
        raise QuantityError(f"invalid quantity {text!r}")
    number, exponent, suffix = m.groups()
    try:
        value = Decimal(number)
        if exponent:
            return value.scaleb(int(exponent[1:]))
    except InvalidOperation as e:  # pragma: no cover - the regex admits only valid numbers
        raise QuantityError(f"invalid quantity {text!r}") from e
    if suffix in _BINARY:
        return value * _BINARY[suffix]
    return value * _DECIMAL[suffix or ""]


@functools.lru_cache(maxsize=4096, typed=True)  # a few distinct strings, parsed on every pod event
def to_int(text: str | int | float) -> int:
    """Base units rounded up: bytes for memory, counts for pods and extended resources."""
    try:
        return _bounded(parse(text).to_integral_value(rounding=ROUND_CEILING), text)
    except ArithmeticError as e:  # decimal.Overflow near the context's exponent limit
        raise QuantityError(f"quantity {text!r} is out of range") from e


@functools.lru_cache(maxsize=4096, typed=True)
def to_milli(text: str | int | float) -> int:
    """Milli-units rounded up: milli-CPU ("250m" → 250, "1.5" → 1500)."""
    try:
        return _bounded((parse(text) * 1000).to_integral_value(rounding=ROUND_CEILING), text)
    except ArithmeticError as e:  # "1E999997" * 1000 leaves the context's exponent range
        raise QuantityError(f"quantity {text!r} is out of range") from e


def format_milli_cpu(milli: int) -> str:
    """Render milli-CPU the way kubectl does ("250m", "2")."""
    return f"{milli // 1000}" if milli % 1000 == 0 else f"{milli}m"


def format_bytes(n: int) -> str:
    """Render bytes with the largest exact binary suffix ("512Mi", "1536Mi", "1Gi")."""
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = _BINARY[suffix]
        if n and n % unit == 0:
            return f"{n // unit}{suffix}"
    return str(n)
