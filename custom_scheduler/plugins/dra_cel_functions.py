"""The CEL functions of Kubernetes' DRA environment that the ``cel`` library does not ship.

Upstream's selector environment (``k8s.io/dynamic-resource-allocation/cel``, built on the
apiserver's CEL base environment) has cel-go's string, list, set and math extensions and
Kubernetes' ``quantity`` and ``semver`` libraries. The Rust-backed ``cel`` package implements the
CEL core only; its :mod:`cel.stdlib` provides the cel-go extensions as Python functions, and this
module adds the two Kubernetes libraries, so a selector such as
``device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) >= 0`` or
``device.attributes["gpu.example.com"].driverVersion.isGreaterThan(semver("1.2.0"))`` evaluates
as it does in kube-scheduler.

How the values are carried: a device's capacities are integers in the CEL input (see
:mod:`custom_scheduler.api.dra`) and its version attributes strings, so ``quantity(s)`` is the
integer the capacity projection would give (base units, rounded up) and ``semver(s)`` the
validated version string; the comparison functions (``compareTo``, ``isGreaterThan``,
``isLessThan``) compare two integers as quantities and two strings as semantic versions. Functions
are only attached to the evaluations of expressions that call one of them (:func:`uses_functions`),
so the common selectors keep the library's native fast path.

Not provided: cel-go's estimated and actual cost accounting (``CELSelectorExpressionMaxCost``):
the ``cel`` library exposes no cost tracking, so an expression upstream stops with ``operation
cancelled: actual cost limit exceeded`` runs to its end here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from custom_scheduler.api import quantity

_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)


def _quantity(text: str) -> int:
    """``quantity(s)``: upstream errs on what ``resource.ParseQuantity`` refuses."""
    try:
        return quantity.to_int(str(text))
    except (quantity.QuantityError, ValueError) as e:
        raise ValueError(f"quantities must match the regular expression: {e}") from None


def _is_quantity(text: str) -> bool:
    try:
        quantity.to_int(str(text))
    except (quantity.QuantityError, ValueError):
        return False
    return True


def _semver_parts(text: str) -> tuple[int, int, int, tuple[Any, ...] | None]:
    m = _SEMVER.match(str(text))
    if m is None:
        raise ValueError(f"could not parse {text!r} as semver")
    pre: tuple[Any, ...] | None = None
    if m.group(4):
        pre = tuple(int(p) if p.isdigit() else p for p in m.group(4).split("."))
    return int(m.group(1)), int(m.group(2)), int(m.group(3)), pre


def _semver(text: str) -> str:
    _semver_parts(text)
    return str(text)


def _is_semver(text: str) -> bool:
    return _SEMVER.match(str(text)) is not None


def _semver_key(text: str) -> tuple[Any, ...]:
    """Semantic-version precedence: a pre-release sorts before its release; numeric identifiers
    before alphanumeric ones, each in its own order."""
    major, minor, patch, pre = _semver_parts(text)
    if pre is None:
        return (major, minor, patch, 1, ())
    ids = tuple((0, p, "") if isinstance(p, int) else (1, 0, p) for p in pre)
    return (major, minor, patch, 0, ids)


def _compare(a: Any, b: Any) -> int:
    if isinstance(a, str) and isinstance(b, str):
        ka, kb = _semver_key(a), _semver_key(b)
    elif isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool):
        ka, kb = (a,), (b,)
    else:
        raise TypeError(f"no such overload: compareTo({type(a).__name__}, {type(b).__name__})")
    return (ka > kb) - (ka < kb)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "quantity": _quantity,
    "isQuantity": _is_quantity,
    "semver": _semver,
    "isSemver": _is_semver,
    "compareTo": _compare,
    "isGreaterThan": lambda a, b: _compare(a, b) > 0,
    "isLessThan": lambda a, b: _compare(a, b) < 0,
    "asInteger": int,
    "asApproximateFloat": float,
    "isInteger": lambda q: isinstance(q, int),
    "sign": lambda q: (q > 0) - (q < 0),
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "major": lambda v: _semver_parts(v)[0],
    "minor": lambda v: _semver_parts(v)[1],
    "patch": lambda v: _semver_parts(v)[2],
}


def _all_functions() -> dict[str, Callable[..., Any]]:
    from cel import stdlib  # imported on first use, as the library itself (see CELCache.get)

    return {**stdlib.STDLIB_FUNCTIONS, **FUNCTIONS}


_BUILT: list[tuple[dict[str, Callable[..., Any]], re.Pattern[str]]] = []


def _table() -> tuple[dict[str, Callable[..., Any]], re.Pattern[str]]:
    """The function table and the pattern of a call to one of them, built on first use."""
    if not _BUILT:
        table = _all_functions()
        names = "|".join(re.escape(n) for n in sorted(table, key=len, reverse=True))
        # A call as ``f(x)`` or ``x.f()``: the name is not the tail of a longer identifier.
        _BUILT.append((table, re.compile(r"(?<!\w)(?:" + names + r")\s*\(")))
    return _BUILT[0]


def uses_functions(expr: str) -> bool:
    """Whether ``expr`` calls one of the functions registered here (as ``f(x)`` or ``x.f()``)."""
    return _table()[1].search(expr) is not None


def activation(variables: Mapping[str, Any]) -> Any:
    """A ``cel.Context`` holding ``variables`` and every function of the DRA environment."""
    import cel

    return cel.Context(variables=dict(variables), functions=_table()[0])
