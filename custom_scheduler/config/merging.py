"""A profile's ``plugins`` section → the effective, ordered plugins per extension point.

kube-scheduler's rules (``pkg/scheduler/apis/config/v1/default_plugins.go`` and the framework's
multiPoint expansion), applied here once so nothing downstream has to know them:

1. **multiPoint** is merged with the default multiPoint list like any plugin set: names in its
   ``disabled`` (or ``*``) drop defaults, an ``enabled`` entry naming a default replaces it in
   place, other ``enabled`` entries are appended.
2. Each extension point starts from the merged multiPoint list, keeping the plugins that implement
   the point (:attr:`.types.PluginInfo.extension_points`, which the runtime reads off the class),
   in multiPoint order.
3. That point's ``disabled`` names drop plugins from it; ``*`` drops all of them.
4. That point's ``enabled`` entries then apply: one naming a plugin still in the list replaces it
   **in place** (an explicit per-point entry wins over multiPoint, e.g. to change a score weight);
   the others are appended in the order given.

One deliberate difference: upstream's v1 framework moves per-point overrides of multiPoint plugins
to the *front* of the point's list; we keep them in place, as the documented merge rule (and the
pre-multiPoint v1beta1 behaviour) says. Only the run order of filters can differ, never the result.

Score weights are upstream's (the framework's ``getValidScoreWeights``; v1 validation checks none):
a plugin's weight is that of its entry in the profile's ``score.enabled`` if it has one, else that
of its (merged) ``multiPoint`` entry, where the default list carries the default weights
(``TaintToleration`` 3, ...); a weight left out or 0 is 1, never the multiPoint or default weight
(``score: {enabled: [{name: TaintToleration}]}`` weighs 1, as in kube-scheduler). Any int32 is
accepted, negative ones included; what is not an int32 gets the decoder's message
(``json: cannot unmarshal number 3000000000 into Go struct field
Plugin.profiles.plugins.score.enabled.weight of type int32``). The overflow guard runs over the
score plugins of ``score.enabled`` then ``multiPoint`` (each once) in Go's int64 arithmetic, so it
refuses what upstream refuses, including a later plugin after a negative running total
(``score plugins: total score of Score plugins could overflow``).

Errors (unknown plugin, a plugin at a point it does not implement, the same plugin twice in one
``enabled`` list, a bad weight) are recorded with the entry's path and the entry is left out.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from custom_scheduler.config import defaults, schema
from custom_scheduler.config.decoding import Errors, Reader, index, join

__all__ = ["INT32_MAX", "INT32_MIN", "OVERFLOW_MESSAGE", "effective_plugins", "total_score_overflows"]

#: A weight is a v1 ``*int32``.
INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
#: ``fwk.MaxScore`` and ``fwk.MaxTotalScore`` (math.MaxInt64), the guard's two constants.
MAX_NODE_SCORE = 100
MAX_TOTAL_SCORE = 2**63 - 1
OVERFLOW_MESSAGE = "score plugins: total score of Score plugins could overflow"
MULTI_POINT = "multiPoint"


def _int64(value: int) -> int:
    """``value`` wrapped into Go's int64, as Go's arithmetic wraps."""
    return (value + 2**63) % 2**64 - 2**63


def total_score_overflows(weights: Iterable[int]) -> bool:
    """Upstream's guard, in its int64 arithmetic: ``weight x MaxScore > MaxTotalScore - total``
    for each weight in turn. A running total below zero makes the subtraction wrap negative, so
    any plugin after it "could overflow": upstream refuses such profiles, and so do we."""
    total = 0
    for weight in weights:
        weighted = weight * MAX_NODE_SCORE  # an int32 times 100 always fits an int64
        if weighted > _int64(MAX_TOTAL_SCORE - total):
            return True
        total = _int64(total + weighted)
    return False


def _json_kind(value: object) -> str:
    """What Go's JSON decoder names a value it cannot put in an int32 (a number with its text)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return f"number {value}"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "object"
    return "array" if isinstance(value, list) else type(value).__name__


def _weight(r: Reader, point: str, section: str) -> int | None:
    """An entry's ``weight``: None when unset; an int32, or the decoder's error."""
    value = r.raw("weight")
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and INT32_MIN <= value <= INT32_MAX:
        return value
    field = f"Plugin.profiles.plugins.{point}.{section}.weight"
    r.errors.add(
        r.path_of("weight"), f"json: cannot unmarshal {_json_kind(value)} into Go struct field {field} of type int32"
    )
    return None


@dataclass(frozen=True, slots=True)
class _Entry:
    name: str
    weight: int | None
    path: str


@dataclass(frozen=True, slots=True)
class _PluginSet:
    enabled: tuple[_Entry, ...] = ()
    disabled: frozenset[str] = frozenset()


class _Merger:
    def __init__(self, registry: schema.PluginCatalog, errors: Errors) -> None:
        self.registry = registry
        self.errors = errors
        self._points: dict[str, frozenset[str]] = {}

    def points_of(self, name: str) -> frozenset[str]:
        if name not in self._points:
            self._points[name] = self.registry[name].extension_points
        return self._points[name]

    def unknown(self, name: str) -> str:
        message = f'unknown plugin "{name}"'
        close = difflib.get_close_matches(name, list(self.registry), n=1)
        if close:
            message += f' (did you mean "{close[0]}"?)'
        return message

    def decode_set(self, raw: object, path: str, point: str) -> _PluginSet:
        r = Reader(raw, path, self.errors)
        enabled: list[_Entry] = []
        first_at: dict[str, str] = {}
        for i, item in enumerate(r.sequence("enabled")):
            entry = self.decode_entry(item, index(r.path_of("enabled"), i), point)
            if entry is None:
                continue
            if entry.name in first_at:
                self.errors.add(
                    join(entry.path, "name"),
                    f'plugin "{entry.name}" is enabled twice at {point} (first at {first_at[entry.name]})',
                )
                continue
            first_at[entry.name] = entry.path
            enabled.append(entry)
        disabled: set[str] = set()
        for i, item in enumerate(r.sequence("disabled")):
            ir = Reader(item, index(r.path_of("disabled"), i), self.errors)
            name = ir.opt_string("name")
            _weight(ir, point, "disabled")  # allowed by the schema (an int32), meaningless when disabling
            ir.finish()
            if not name:
                self.errors.add(ir.path_of("name"), "required")
            elif name != "*" and name not in self.registry and name not in defaults.UPSTREAM_PLUGIN_NAMES:
                self.errors.add(ir.path_of("name"), self.unknown(name))
            else:
                disabled.add(name)
        r.finish()
        return _PluginSet(tuple(enabled), frozenset(disabled))

    def decode_entry(self, raw: object, path: str, point: str) -> _Entry | None:
        r = Reader(raw, path, self.errors)
        name = r.opt_string("name")
        weight = _weight(r, point, "enabled")
        r.finish()
        if not name:
            if isinstance(raw, Mapping):
                self.errors.add(r.path_of("name"), "required")
            return None
        if name == "*":
            self.errors.add(r.path_of("name"), '"*" is only valid in disabled')
            return None
        if name not in self.registry:
            self.errors.add(r.path_of("name"), self.unknown(name))
            return None
        implemented = self.points_of(name)
        if point == MULTI_POINT and not implemented:
            self.errors.add(r.path_of("name"), f'plugin "{name}" implements no extension point')
            return None
        if point != MULTI_POINT and point not in implemented:
            have = ", ".join(p for p in schema.EXTENSION_POINTS if p in implemented) or "none"
            self.errors.add(
                r.path_of("name"),
                f'plugin "{name}" does not implement the {point} extension point (it implements: {have})',
            )
            return None
        # A bad weight is reported (and reads as unset) but the entry kept, so it does not also
        # cascade into "no queueSort plugin" style errors.
        return _Entry(name, weight, path)


def _merge(base: list[_Entry], custom: _PluginSet) -> list[_Entry]:
    """kube-scheduler's mergePluginSet: disable, replace in place, append."""
    by_name = {e.name: e for e in custom.enabled}
    out: list[_Entry] = []
    replaced: set[str] = set()
    if "*" not in custom.disabled:
        for entry in base:
            if entry.name in custom.disabled:
                continue
            if entry.name in by_name:
                out.append(by_name[entry.name])
                replaced.add(entry.name)
            else:
                out.append(entry)
    out.extend(e for e in custom.enabled if e.name not in replaced)
    return out


def effective_plugins(
    raw: object, path: str, *, registry: schema.PluginCatalog, errors: Errors
) -> dict[str, tuple[schema.PluginRef, ...]]:
    """Merge a profile's raw ``plugins`` mapping (at ``path``) with the default profile.

    Returns every extension point of :data:`~custom_scheduler.config.schema.EXTENSION_POINTS`, each
    with its ordered plugins; problems go to ``errors``.
    """
    m = _Merger(registry, errors)
    r = Reader(raw, path, errors)
    sets = {p: m.decode_set(r.raw(p), r.path_of(p), p) for p in (MULTI_POINT, *schema.EXTENSION_POINTS)}
    r.finish()

    default_mp = [_Entry(name, weight, "") for name, weight in defaults.DEFAULT_MULTI_POINT]
    multi_point = _merge(default_mp, sets[MULTI_POINT])
    # A default plugin the registry lacks is an error, not silently dropped: the effective profile
    # must not depend on what happens to be registered. Disabling it in multiPoint is the way out.
    for e in multi_point:
        if e.name not in registry:
            errors.add(
                join(path, MULTI_POINT),
                f'default plugin "{e.name}" is not registered (disable it in multiPoint to run without it)',
            )
    multi_point = [e for e in multi_point if e.name in registry]
    if total_score_overflows(_weights(m, [*sets["score"].enabled, *multi_point])):
        errors.add(path, OVERFLOW_MESSAGE)

    out: dict[str, tuple[schema.PluginRef, ...]] = {}
    for point in schema.EXTENSION_POINTS:
        base = [e for e in multi_point if point in m.points_of(e.name)]
        merged = _merge(base, sets[point])
        # An entry at the score point is the score.enabled one when there is one, else the
        # multiPoint one: the first one upstream's weight map takes. Unset or 0 means 1.
        weigh = point == "score"
        out[point] = tuple(schema.PluginRef(e.name, (e.weight or 1) if weigh else 1) for e in merged)
    return out


def _weights(m: _Merger, entries: Iterable[_Entry]) -> list[int]:
    """The weights upstream's guard adds up: each score plugin once, at its first entry (the
    profile's ``score.enabled`` before ``multiPoint``), unset or 0 counted as 1."""
    seen: set[str] = set()
    out = []
    for e in entries:
        if e.name in seen or "score" not in m.points_of(e.name):
            continue
        seen.add(e.name)
        out.append(e.weight or 1)
    return out
