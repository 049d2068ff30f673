"""The package's import graph: no cycles between modules, and the layer rules hold.

The graph is read from the source with :mod:`ast` (nothing is imported), so it sees imports the
interpreter never runs in a given process, e.g. one inside a function that only a CLI command calls.

What counts as an edge ``A → B``:

- every ``import``/``from … import`` statement in ``A``, at module level (class bodies included) *and*
  inside functions: a deferred import hides a dependency from the interpreter, not from the design,
  and the cycles this check exists for (``config.types → config.render`` in a method,
  ``loadmetrics → plugins.load_aware`` in a function) were function-level;
- except those under ``if TYPE_CHECKING:`` (annotations only; the ``else:`` branch does count);
- ``import a.b.c`` is an edge to ``a.b.c``; ``from a.b import c`` is an edge to the module
  ``a.b.c`` when it is one, else to ``a.b`` (``c`` is a name defined in ``a/b/__init__.py``);
  relative imports are resolved the same way.
- Importing ``a.b.c`` runs ``a/__init__`` and ``a/b/__init__`` first; that implicit parent load is
  *not* an edge. So a submodule importing a sibling (``from custom_scheduler.plugins import helpers``)
  does not depend on ``plugins/__init__``; one importing a *name* from it does.

Cycles: the graph restricted to these edges has no strongly connected component of more than one
module, with one allowance: a package ``__init__`` importing one of its own submodules *inside a
function* (``tools/__init__`` loading a command's module on demand) is not an edge. So a submodule
that imports a name from its own package's ``__init__`` forms a cycle only if that ``__init__``
imports the submodule back at module level.

Layer rules (both module-level and deferred imports; from issues 14 and 23). Each top-level
part of the package may import only the parts listed for it in :data:`ALLOWED`, so the folders
show the layers::

    errors                      what crosses every boundary (ConfigError)
    api, kube, config           projections of API objects; the HTTP client; the configuration
    framework                   the plugin API, the runtime and the services a Handle lends
    plugins | core              the plugins (cluster only through the Handle, never kube/) | the
                                queue, cache, cycles and informers (never a plugin)
    server | tools              running the daemon | explain, simulate, snapshot (never each other)
    devenv                      the local control plane and demo
    cli, __main__               the command line

A module at the root other than ``cli``, ``__main__`` and ``errors`` fails the layout test.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = "custom_scheduler"
ROOT = Path(__file__).resolve().parents[2] / PACKAGE

_BASE = ("errors",)
_MODEL = (*_BASE, "api", "kube", "config")
_RUNTIME = (*_MODEL, "framework")
_ENGINE = (*_RUNTIME, "plugins", "core")

#: layer → the layers it may import (besides itself). A layer is a top-level module or package.
ALLOWED: dict[str, tuple[str, ...]] = {
    "errors": (),
    "api": _BASE,
    "kube": _BASE,
    "config": _BASE,
    "framework": _MODEL,
    "plugins": (*_BASE, "api", "config", "framework"),
    "core": _RUNTIME,
    "server": _ENGINE,
    "tools": _ENGINE,
    "devenv": (*_ENGINE, "tools"),
    "cli": (*_ENGINE, "server", "tools", "devenv"),
    "__main__": ("cli",),
}

#: What may sit at the package root (everything else belongs to a layer's folder).
ROOT_MODULES = frozenset({"cli", "__main__", "errors"})


@dataclasses.dataclass(frozen=True)
class Edge:
    src: str
    dst: str
    deferred: bool
    line: int


def _module_name(path: Path) -> str:
    parts = [PACKAGE, *path.relative_to(ROOT).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: dict[str, Path] = {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _enclosing(name: str) -> str | None:
    """The deepest module of ours that ``name`` (``a.b.c``) is or lies in; None for other packages."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _targets(node: ast.Import | ast.ImportFrom, package: str) -> Iterator[str]:
    if isinstance(node, ast.Import):
        for alias in node.names:
            if (t := _enclosing(alias.name)) is not None:
                yield t
        return
    if node.level:
        parts = package.split(".")
        base = ".".join(parts[: len(parts) - (node.level - 1)])
        module = f"{base}.{node.module}" if node.module else base
    else:
        module = node.module or ""
    for alias in node.names:
        sub = f"{module}.{alias.name}"
        t = sub if sub in MODULES else _enclosing(module)
        if t is not None:
            yield t


def _edges_of(module: str, path: Path) -> Iterator[Edge]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]

    def walk(node: ast.AST, deferred: bool) -> Iterator[Edge]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.orelse:
                    yield from walk(ast.Module(body=[stmt], type_ignores=[]), deferred)
            elif isinstance(child, ast.Import | ast.ImportFrom):
                for t in _targets(child, package):
                    if t != module:
                        yield Edge(module, t, deferred, child.lineno)
            else:
                yield from walk(
                    child, deferred or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
                )

    yield from walk(ast.parse(path.read_text(), filename=str(path)), False)


EDGES: list[Edge] = [e for m, p in MODULES.items() for e in _edges_of(m, p)]


def _counts_for_cycles(e: Edge) -> bool:
    # A package __init__ loading one of its own submodules on demand is no edge (module docstring).
    return not (e.deferred and e.dst.startswith(e.src + ".") and MODULES[e.src].name == "__init__.py")


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative; components of more than one node."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp: list[str] = []
                while True:
                    x = stack.pop()
                    on_stack.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def _short(module: str) -> str:
    return module.removeprefix(PACKAGE + ".")


def _in_layer(module: str, layer: str) -> bool:
    short = _short(module)
    return short == layer or short.startswith(layer + ".")


def test_the_graph_is_read() -> None:
    # Guards the reader itself: a few edges every version of the package has.
    pairs = {(_short(e.src), _short(e.dst)) for e in EDGES}
    assert ("framework.runtime", "framework.types") in pairs
    assert ("config.loading", "config.schema") in pairs
    assert len(MODULES) > 50


def test_no_import_cycles() -> None:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for e in EDGES:
        if _counts_for_cycles(e):
            graph[e.src].add(e.dst)
    cycles = _strongly_connected(graph)
    detail = [
        f"{_short(e.src)}:{e.line} -> {_short(e.dst)}{' (in a function)' if e.deferred else ''}"
        for comp in cycles
        for e in EDGES
        if e.src in comp and e.dst in comp and _counts_for_cycles(e)
    ]
    assert not cycles, "import cycles:\n" + "\n".join(detail)


def _layer(module: str) -> str:
    return _short(module).split(".")[0]


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_layer_rules(layer: str) -> None:
    bad = sorted(
        {
            f"{_short(e.src)}:{e.line} -> {_short(e.dst)}"
            for e in EDGES
            if _layer(e.src) == layer and _layer(e.dst) not in (layer, *ALLOWED[layer])
        }
    )
    assert not bad, f"{layer} may import only {', '.join(ALLOWED[layer]) or 'nothing of ours'}:\n" + "\n".join(bad)


def test_every_module_belongs_to_a_layer() -> None:
    loose = sorted(
        _short(m)
        for m, path in MODULES.items()
        if path.parent == ROOT and path.name != "__init__.py" and _short(m) not in ROOT_MODULES
    )
    assert not loose, f"modules at the package root: {loose}"
    assert {_layer(m) for m in MODULES if m != PACKAGE} <= set(ALLOWED)


def test_no_two_modules_share_a_name() -> None:
    # One name per concept: no twins such as dra.py / framework/dra.py across layers.
    names: dict[str, list[str]] = {}
    for m, path in MODULES.items():
        if path.name != "__init__.py":
            names.setdefault(m.rpartition(".")[2], []).append(_short(m))
    twins = {n: ms for n, ms in names.items() if len(ms) > 1}
    assert not twins, f"modules that share a name: {twins}"


def test_volume_hint_names_match_the_plugins() -> None:
    # volume_hints builds the four volume plugins' registrations by name.
    from custom_scheduler.plugins import (
        node_volume_limits,
        volume_binding,
        volume_hints,
        volume_restrictions,
        volume_zone,
    )

    assert (volume_hints.BINDING, volume_hints.RESTRICTIONS, volume_hints.ZONE, volume_hints.LIMITS) == (
        volume_binding.NAME,
        volume_restrictions.NAME,
        volume_zone.NAME,
        node_volume_limits.NAME,
    )


def test_core_names_no_plugin() -> None:
    """Requeue rules belong to the plugins (their events_to_register): core/ spells out no plugin
    name, except the ones it must act on itself (listed with the reason)."""
    import re

    from custom_scheduler.plugins import IN_TREE_SPECS

    allowed = {
        # The queue skips pods gated by SchedulingGates on events (only their own update helps).
        ("unschedulable_pods.py", "SchedulingGates"),
    }
    names = {s.name for s in IN_TREE_SPECS}
    found = set()
    for path in (ROOT / "core").glob("*.py"):
        for literal in re.findall(r'"([A-Za-z]+)"', path.read_text(encoding="utf-8")):
            if literal in names and (path.name, literal) not in allowed:
                found.add((path.name, literal))
    assert not found, f"plugin names spelled out in core/: {sorted(found)}"
