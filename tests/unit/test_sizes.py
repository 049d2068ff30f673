"""Size limits of the package: no module over 600 lines, no function over 80, but the ones named
in :data:`LARGE` with the reason they may be.

Why: a module past a few hundred lines holds more than one role, and a function past a screen is
read by scrolling, where a missed case hides. The lint (C901, PLR0912, PLR0915 in pyproject.toml)
bounds a function's branching; these bound its length, and a module's, which no lint measures.

Read with :mod:`ast`, as ``test_import_graph`` reads imports (nothing is imported). A module's size
is its number of lines; a function's runs from its ``def`` line to its last line (decorators not
counted), nested functions and methods each counted on their own as well, named
``package.module.Class.method`` or ``package.module.outer.inner``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = "custom_scheduler"
ROOT = Path(__file__).resolve().parents[2] / PACKAGE

MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80

#: Qualified name of a module (``custom_scheduler.core.queue``) or function
#: (``custom_scheduler.core.cycle.SchedulingCycle._schedule_group``) → why it may be larger than the
#: limit. An entry whose module or function is gone or back under the limit fails
#: :func:`test_no_stale_exceptions`.
LARGE: dict[str, str] = {}


def _module_name(path: Path) -> str:
    parts = [PACKAGE, *path.relative_to(ROOT).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _functions(node: ast.AST, prefix: str) -> Iterator[tuple[str, int]]:
    """(qualified name, lines) of every function and method below ``node``."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            name = f"{prefix}.{child.name}"
            yield name, (child.end_lineno or child.lineno) - child.lineno + 1
            yield from _functions(child, name)
        elif isinstance(child, ast.ClassDef):
            yield from _functions(child, f"{prefix}.{child.name}")
        else:
            yield from _functions(child, prefix)


def _sizes() -> tuple[dict[str, int], dict[str, int]]:
    """(module → lines, function → lines) over the whole package."""
    modules: dict[str, int] = {}
    functions: dict[str, int] = {}
    for path in sorted(ROOT.rglob("*.py")):
        text = path.read_text()
        module = _module_name(path)
        modules[module] = len(text.splitlines())
        for name, lines in _functions(ast.parse(text, filename=str(path)), module):
            # Two definitions of one name (an overload, a redefinition): the longer one counts.
            functions[name] = max(lines, functions.get(name, 0))
    return modules, functions


MODULES, FUNCTIONS = _sizes()


def _over(sizes: dict[str, int], limit: int) -> dict[str, int]:
    return {name: n for name, n in sizes.items() if n > limit}


def test_the_sizes_are_read() -> None:
    # Guards the reader itself: a module and a method every version of the package has.
    assert f"{PACKAGE}.framework.runtime" in MODULES
    assert f"{PACKAGE}.framework.runtime.Framework.run_filter" in FUNCTIONS
    assert len(MODULES) > 50


def test_no_module_is_too_long() -> None:
    bad = {m: n for m, n in _over(MODULES, MAX_MODULE_LINES).items() if m not in LARGE}
    assert not bad, (
        f"modules over {MAX_MODULE_LINES} lines (split them by role, or name them in LARGE with why):\n"
        + "\n".join(f"{m}: {n}" for m, n in sorted(bad.items()))
    )


def test_no_function_is_too_long() -> None:
    bad = {f: n for f, n in _over(FUNCTIONS, MAX_FUNCTION_LINES).items() if f not in LARGE}
    assert not bad, (
        f"functions over {MAX_FUNCTION_LINES} lines (break out named steps, or name them in LARGE with why):\n"
        + "\n".join(f"{f}: {n}" for f, n in sorted(bad.items()))
    )


def test_every_exception_says_why() -> None:
    assert all(why.strip() for why in LARGE.values())


def test_no_stale_exceptions() -> None:
    # An entry stays only while its module or function exists and is still over the limit.
    over = set(_over(MODULES, MAX_MODULE_LINES)) | set(_over(FUNCTIONS, MAX_FUNCTION_LINES))
    stale = sorted(name for name in LARGE if name not in over)
    assert not stale, "entries of LARGE that are gone or within the limit now (remove them):\n" + "\n".join(stale)
