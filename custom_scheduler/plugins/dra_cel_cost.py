"""A worst-case cost for a DRA selector, against ``resourceapi.CELSelectorExpressionMaxCost``.

Kubernetes evaluates a selector with cel-go's cost limit (1,000,000 units, "roughly 0.1 second
for each expression evaluation"): an expression that reaches it fails (``operation cancelled:
actual cost limit exceeded``), and the API server refuses one whose estimated cost exceeds it.
The ``cel`` library we evaluate with counts no cost and cannot be interrupted, so an expression
that would run far past the limit would hold a scheduling cycle for as long as it runs. Here its
cost is estimated before it is ever evaluated, and an expression over the limit is refused like
one that does not compile (an error naming the claim or class and the selector's index).

The estimate follows cel-go's model where it matters: every operator, call, selection and
literal costs 1, and a comprehension (``all``, ``exists``, ``exists_one``, ``map``, ``filter``)
costs its body (plus the step) once per element of its range, so nesting multiplies. A range
written as a list literal has its own length; any other range (a device's attribute list, a
map of attributes or capacities, a string function's result) is taken at
:data:`DATA_RANGE_BOUND` elements. It reads tokens, not a parse tree: brackets are matched, so
nesting is exact, but an expression that does not compile gets whatever count its tokens give
(compilation reports it anyway). The estimate is an upper bound for what a selector over DRA's
bounded device data can do, not cel-go's exact figure.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

#: ``resourceapi.CELSelectorExpressionMaxCost``.
MAX_COST = 1_000_000
#: Elements assumed for a comprehension over anything but a list literal: a device has at most
#: 32 attributes and capacities together (``ResourceSliceMaxAttributesAndCapacitiesPerDevice``),
#: a list attribute at most as many entries.
DATA_RANGE_BOUND = 32

MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<str>[rRbB]?(?:'''.*?'''|\"\"\".*?\"\"\"|'(?:\\.|[^'\\])*'|"(?:\\.|[^"\\])*"))
      | (?P<num>\d[\w.]*)
      | (?P<id>[A-Za-z_]\w*)
      | (?P<op>&&|\|\||==|!=|<=|>=|[-+*/%<>!?:.,\[\](){}])
    )""",
    re.VERBOSE | re.DOTALL,
)
_OPEN = {"(": ")", "[": "]", "{": "}"}


def tokens(expr: str) -> list[str]:
    """The expression's tokens (strings and numbers as single tokens); unknown characters skipped."""
    out = []
    pos = 0
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if m is None or m.end() == pos:
            pos += 1
            continue
        out.append(m.group(m.lastgroup or "op"))
        pos = m.end()
    return out


def _close(toks: Sequence[str], i: int) -> int:
    """Index of the bracket closing ``toks[i]`` (the last token when unbalanced)."""
    depth = 0
    for j in range(i, len(toks)):
        if toks[j] in _OPEN:
            depth += 1
        elif toks[j] in (")", "]", "}"):
            depth -= 1
            if depth == 0:
                return j
    return len(toks) - 1


def _open(toks: Sequence[str], j: int) -> int:
    """Index of the bracket opening the one closing at ``toks[j]`` (-1 when unbalanced)."""
    depth = 0
    for i in range(j, -1, -1):
        if toks[i] in (")", "]", "}"):
            depth += 1
        elif toks[i] in _OPEN:
            depth -= 1
            if depth == 0:
                return i
    return -1


def _list_length(toks: Sequence[str], start: int, end: int) -> int:
    """Elements of the list literal ``toks[start..end]`` (its top-level commas + 1, 0 if empty)."""
    if end == start + 1:
        return 0
    depth, n = 0, 1
    for t in toks[start + 1 : end]:
        if t in _OPEN:
            depth += 1
        elif t in (")", "]", "}"):
            depth -= 1
        elif t == "," and depth == 0:
            n += 1
    return n


def _range_size(toks: Sequence[str], dot: int) -> int:
    """Elements of the range ending just before ``toks[dot]`` (the ``.`` of ``.all(``)."""
    end = dot - 1
    if end >= 0 and toks[end] == "]":
        start = _open(toks, end)
        literal = start == 0 or (
            start > 0 and toks[start - 1] not in (")", "]", "}") and not _is_value(toks[start - 1])
        )
        if start >= 0 and literal:
            return _list_length(toks, start, end)
    return DATA_RANGE_BOUND


def _is_value(tok: str) -> bool:
    """A token after which ``[`` indexes rather than opens a list literal."""
    return bool(tok) and (tok[0].isalnum() or tok[0] in "_'\"")


def cost(toks: Sequence[str], start: int = 0, end: int | None = None) -> int:
    """Worst-case cost of ``toks[start:end]``."""
    end = len(toks) if end is None else end
    total = 0
    i = start
    while i < end:
        t = toks[i]
        if t == "." and i + 2 < end and toks[i + 1] in MACROS and toks[i + 2] == "(":
            close = min(_close(toks, i + 2), end - 1)
            body_start = i + 3
            # The body follows the iteration variable and its comma: ``x, body``.
            while body_start < close and toks[body_start] != ",":
                body_start += 1
            body = cost(toks, body_start + 1, close) + 1
            total += 1 + _range_size(toks, i) * body
            i = close + 1
            continue
        if t not in (",", ")", "]", "}"):
            total += 1
        i += 1
    return total


def estimate(expr: str) -> int:
    return cost(tokens(expr))


def over_limit(expr: str, limit: int = MAX_COST) -> str:
    """Why ``expr`` may not be evaluated (its estimate is over ``limit``), or ""."""
    try:
        got = estimate(expr)
    except RecursionError:
        return f"nested too deeply to estimate its cost against the cost limit {limit}"
    if got > limit:
        return f"estimated cost {got} exceeds the cost limit {limit}"
    return ""
