"""Label selectors and node selector terms, compiled once and matched many times.

Why compile: the same selector (a topology spread constraint, an affinity term) is matched against
thousands of pods or nodes per scheduling cycle. Parsing the JSON into a tuple of requirements once
per pod keeps each match a few tuple comparisons.

Semantics follow ``k8s.io/apimachinery/pkg/labels`` and ``k8s.io/component-helpers/scheduling/corev1``:

- ``LabelSelector`` (``metav1.LabelSelector``): all of ``matchLabels`` and ``matchExpressions``
  (In, NotIn, Exists, DoesNotExist) must hold. An *empty* selector ``{}`` matches everything; a
  *null* selector matches nothing (callers pass None for that, see :func:`compile_selector`).
- Node selector terms (``v1.NodeSelector``): terms are ORed; inside a term, ``matchExpressions``
  (also Gt and Lt, which compare integers) and ``matchFields`` (only ``metadata.name``) are ANDed;
  a term with no requirements matches nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

IN, NOT_IN, EXISTS, DOES_NOT_EXIST, GT, LT = "In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"


class SelectorError(ValueError):
    """A selector that the API server would have rejected (bad operator or values)."""


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.operator
        if op == IN:
            return labels.get(self.key) in self.values
        if op == NOT_IN:
            v = labels.get(self.key)
            return v is None or v not in self.values
        if op == EXISTS:
            return self.key in labels
        if op == DOES_NOT_EXIST:
            return self.key not in labels
        if op in (GT, LT):
            v = labels.get(self.key)
            if v is None:
                return False
            try:
                have = int(v)
                want = int(next(iter(self.values)))
            except (ValueError, StopIteration):
                return False
            return have > want if op == GT else have < want
        return False


def _requirement(expr: Mapping[str, Any], *, allow_gt_lt: bool) -> Requirement:
    op = expr.get("operator", "")
    values = frozenset(str(v) for v in expr.get("values") or ())
    allowed = (IN, NOT_IN, EXISTS, DOES_NOT_EXIST, GT, LT) if allow_gt_lt else (IN, NOT_IN, EXISTS, DOES_NOT_EXIST)
    if op not in allowed:
        raise SelectorError(f"{op!r} is not a valid label selector operator")
    if op in (IN, NOT_IN) and not values:
        raise SelectorError(f"operator {op} needs at least one value")
    if op in (EXISTS, DOES_NOT_EXIST) and values:
        raise SelectorError(f"operator {op} takes no values")
    if op in (GT, LT) and len(values) != 1:
        raise SelectorError(f"operator {op} needs exactly one value")
    return Requirement(str(expr.get("key", "")), op, values)


@dataclass(frozen=True, slots=True)
class Selector:
    """A compiled ``metav1.LabelSelector``. ``Selector(())`` matches everything."""

    requirements: tuple[Requirement, ...] = ()
    nothing: bool = False

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.nothing:
            return False
        for r in self.requirements:  # noqa: SIM110 - per pod x node: a loop beats a generator
            if not r.matches(labels):
                return False
        return True

    @property
    def is_empty(self) -> bool:
        return not self.nothing and not self.requirements


EVERYTHING = Selector()
NOTHING = Selector(nothing=True)


def compile_selector(doc: Mapping[str, Any] | None) -> Selector:
    """Compile a LabelSelector's JSON. ``None`` (a null selector) matches nothing."""
    if doc is None:
        return NOTHING
    reqs = [Requirement(str(k), IN, frozenset([str(v)])) for k, v in (doc.get("matchLabels") or {}).items()]
    reqs += [_requirement(e, allow_gt_lt=False) for e in doc.get("matchExpressions") or ()]
    return Selector(tuple(reqs))


def selector_from_set(labels: Mapping[str, str]) -> Selector:
    """``labels.SelectorFromSet``: every key must equal its value (an empty map matches everything)."""
    return Selector(tuple(Requirement(k, IN, frozenset([v])) for k, v in labels.items()))


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    expressions: tuple[Requirement, ...] = ()
    fields: tuple[Requirement, ...] = ()  # only metadata.name

    def matches(self, node_name: str, labels: Mapping[str, str]) -> bool:
        if not self.expressions and not self.fields:
            return False
        for r in self.expressions:
            if not r.matches(labels):
                return False
        if self.fields:
            fields = {"metadata.name": node_name}
            for r in self.fields:
                if not r.matches(fields):
                    return False
        return True


def compile_node_selector_term(doc: Mapping[str, Any]) -> NodeSelectorTerm:
    exprs = tuple(_requirement(e, allow_gt_lt=True) for e in doc.get("matchExpressions") or ())
    fields = []
    for f in doc.get("matchFields") or ():
        r = _requirement(f, allow_gt_lt=True)
        if r.key != "metadata.name" or r.operator not in (IN, NOT_IN):
            raise SelectorError(f"matchFields supports only metadata.name with In or NotIn, got {r.key} {r.operator}")
        fields.append(r)
    return NodeSelectorTerm(exprs, tuple(fields))


@dataclass(frozen=True, slots=True)
class NodeSelector:
    """Compiled ``v1.NodeSelector``: terms ORed."""

    terms: tuple[NodeSelectorTerm, ...]

    def matches(self, node_name: str, labels: Mapping[str, str]) -> bool:
        for t in self.terms:  # noqa: SIM110 - hot path
            if t.matches(node_name, labels):
                return True
        return False


def compile_node_selector(doc: Mapping[str, Any]) -> NodeSelector:
    return NodeSelector(tuple(compile_node_selector_term(t) for t in doc.get("nodeSelectorTerms") or ()))


def compile_preferred_terms(docs: Sequence[Mapping[str, Any]]) -> tuple[tuple[int, NodeSelectorTerm], ...]:
    """``preferredDuringSchedulingIgnoredDuringExecution``: (weight, term) pairs."""
    return tuple((int(d.get("weight") or 0), compile_node_selector_term(d.get("preference") or {})) for d in docs)
