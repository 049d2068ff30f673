"""CEL for DRA selectors: each expression compiled once, each (expression, device) outcome memoised.

Restored from the CEL section of :mod:`custom_scheduler.plugins.dra_allocator` (HEAD), where part A
of issue #26 had moved it; the Kubernetes functions the ``cel`` library lacks (``quantity``,
``semver``, cel-go's string/list/set/math extensions) come from
:mod:`custom_scheduler.plugins.dra_cel_functions` and are attached only to expressions that call
one of them. Error messages are upstream's causes (``compile error: ...``, ``runtime error: ...``);
the allocator prefixes them with the claim or class and the selector's index. An expression whose
worst-case cost exceeds Kubernetes' limit is refused before it is evaluated (``cost error: ...``,
see :mod:`custom_scheduler.plugins.dra_cel_cost`).
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Any

from custom_scheduler.api.dra import Device
from custom_scheduler.plugins import dra_cel_cost, dra_cel_functions

_DOMAIN_LOOKUP = re.compile(r"""\b(attributes|capacity)\s*\[\s*["']([^"']+)["']\s*\]""")


class CELError(Exception):
    """A selector that does not compile or fails on a device; the message is upstream's cause."""


@dataclass(frozen=True, slots=True)
class Compiled:
    program: Any
    error: str
    domains: tuple[tuple[str, str], ...]
    """(``attributes``/``capacity``, domain) pairs the expression indexes: upstream's maps return an
    empty map for an unknown domain, so those are filled in before evaluating."""
    functions: bool = False
    """The expression calls a function of :mod:`dra_cel_functions` (evaluated with them attached)."""
    kind: str = "compile"
    """What ``error`` is: ``compile`` (does not compile) or ``cost`` (over the cost limit)."""

    @property
    def cause(self) -> str:
        """The error as upstream words a cause (``compile error: ...``)."""
        return f"{self.kind} error: {self.error}"


#: Selector outcomes kept per device (Device.cel_results) before that memo starts over.
DEVICE_MEMO_MAX = 64


class CELCache:
    """Compile each selector once (per process, shared by every cycle); thread-safe."""

    def __init__(self, max_size: int = 10_000) -> None:
        self._lock = threading.Lock()
        self._cache: dict[str, Compiled] = {}
        self._max = max_size

    def get(self, expr: str) -> Compiled:
        got = self._cache.get(expr)
        if got is not None:
            return got
        try:
            # Imported on first use: the package loads its interactive CLI (prompt_toolkit) on
            # import, ~0.1 s of every start-up that clusters without DRA would pay for nothing.
            import cel

            domains = tuple(sorted(set(_DOMAIN_LOOKUP.findall(expr))))
            c = Compiled(cel.compile(expr), "", domains, dra_cel_functions.uses_functions(expr))
        except Exception as e:  # the library raises ValueError; anything else is as bad
            c = Compiled(None, _first_line(str(e)) or type(e).__name__, ())
        else:
            too_costly = dra_cel_cost.over_limit(expr)
            if too_costly:
                c = Compiled(None, too_costly, (), kind="cost")
        with self._lock:
            if len(self._cache) >= self._max:
                self._cache.clear()
            self._cache[expr] = c
        return c

    def matches(self, expr: str, device: Device) -> bool:
        """Evaluate ``expr`` on ``device`` (memoised on the device); raises CELError (message: the
        cause) on failure, every time it is asked, as the evaluation would."""
        memo = device.cel_results
        got = memo.get(expr)
        if got is None:
            got = self._evaluate(expr, device)
            if len(memo) >= DEVICE_MEMO_MAX:
                memo.clear()  # a device sees few distinct selectors; bound it anyway
            memo[expr] = got
        if got is True or got is False:
            return got
        raise CELError(got)

    def _evaluate(self, expr: str, device: Device) -> bool | str:
        """The outcome of ``expr`` on ``device``: the bool, or the CELError message."""
        try:
            return self._execute(expr, device)
        except CELError as e:
            return str(e)

    def _execute(self, expr: str, device: Device) -> bool:
        c = self.get(expr)
        if c.program is None:
            raise CELError(c.cause)
        inp = device.cel_input
        dev = inp["device"]
        missing = [(m, d) for m, d in c.domains if d not in dev[m]]
        if missing:
            dev = {**dev, "attributes": dict(dev["attributes"]), "capacity": dict(dev["capacity"])}
            for m, d in missing:
                dev[m][d] = {}
            inp = {"device": dev}
        try:
            out = c.program.execute(dra_cel_functions.activation(inp) if c.functions else inp)
        except KeyError as e:
            raise CELError(f"runtime error: no such key: {e.args[0] if e.args else e}") from None
        except Exception as e:
            raise CELError(f"runtime error: {_first_line(str(e)) or type(e).__name__}") from None
        if not isinstance(out, bool):
            raise CELError(f"runtime error: expression must evaluate to bool, got {type(out).__name__}")
        return out


def _first_line(s: str) -> str:
    return s.strip().splitlines()[0] if s.strip() else ""
