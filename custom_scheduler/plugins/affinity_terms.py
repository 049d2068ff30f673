"""Compiled pod (anti-)affinity terms: what InterPodAffinity evaluates, and their cache.

Kept apart from the plugin (:mod:`custom_scheduler.plugins.inter_pod_affinity`) because compiling
a ``PodAffinityTerm`` is a role of its own, with its own rules (``labelSelector`` null matches
nothing; ``namespaces`` and ``namespaceSelector`` both unset mean the pod's own namespace;
``matchLabelKeys``/``mismatchLabelKeys`` AND the pod's values into the selector) and its own cache
(an existing pod's terms depend only on the pod, so they are compiled once per pod version, not
once per cycle). The plugin's counting and scoring read only these compiled values.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from custom_scheduler.api.labels import IN, NOT_IN, Requirement, Selector, SelectorError, compile_selector
from custom_scheduler.api.model import Pod
from custom_scheduler.framework.interface import Handle

_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    """A compiled ``PodAffinityTerm`` (``weight`` is set for preferred terms)."""

    selector: Selector
    topology_key: str
    namespaces: frozenset[str]
    namespace_selector: Selector
    weight: int = 0

    def matches(self, pod: Pod, ns_labels: Callable[[str], Mapping[str, str]]) -> bool:
        """Whether ``pod`` is selected; ``ns_labels(ns)`` gives a namespace's labels."""
        if pod.namespace not in self.namespaces:
            sel = self.namespace_selector
            if sel.nothing or not (sel.is_empty or sel.matches(ns_labels(pod.namespace))):
                return False
        return self.selector.matches(pod.labels)


@dataclass(frozen=True, slots=True)
class PodTerms:
    """All pod (anti-)affinity terms of one pod, compiled."""

    required_affinity: tuple[AffinityTerm, ...] = ()
    required_anti_affinity: tuple[AffinityTerm, ...] = ()
    preferred_affinity: tuple[AffinityTerm, ...] = ()
    preferred_anti_affinity: tuple[AffinityTerm, ...] = ()


NO_TERMS = PodTerms()


def compile_term(doc: Mapping[str, Any], pod: Pod, weight: int = 0) -> AffinityTerm:
    """Compile one ``PodAffinityTerm`` of ``pod``. Raises SelectorError on an invalid selector."""
    selector_doc = doc.get("labelSelector")
    selector = compile_selector(selector_doc)
    if selector_doc is not None:
        extra = [
            Requirement(k, IN, frozenset([pod.labels[k]])) for k in doc.get("matchLabelKeys") or () if k in pod.labels
        ]
        extra += [
            Requirement(k, NOT_IN, frozenset([pod.labels[k]]))
            for k in doc.get("mismatchLabelKeys") or ()
            if k in pod.labels
        ]
        if extra:
            selector = Selector(selector.requirements + tuple(extra))
    namespaces = doc.get("namespaces") or ()
    ns_selector_doc = doc.get("namespaceSelector")
    if not namespaces and ns_selector_doc is None:
        namespaces = (pod.namespace,)
    return AffinityTerm(
        selector=selector,
        topology_key=str(doc.get("topologyKey") or ""),
        namespaces=frozenset(namespaces),
        namespace_selector=compile_selector(ns_selector_doc),
        weight=weight,
    )


def compile_pod_terms(pod: Pod, *, strict: bool = True) -> PodTerms:
    """Compile every (anti-)affinity term of ``pod``.

    With ``strict`` an invalid selector raises SelectorError (the incoming pod is unschedulable);
    without it the offending group of terms is dropped (an existing pod must not break others).
    """
    affinity = pod.affinity or {}
    if not affinity:
        return NO_TERMS
    groups: list[tuple[AffinityTerm, ...]] = []
    for kind in ("podAffinity", "podAntiAffinity"):
        section = affinity.get(kind) or {}
        for key in (_REQUIRED, _PREFERRED):
            try:
                if key == _REQUIRED:
                    groups.append(tuple(compile_term(t, pod) for t in section.get(key) or ()))
                else:
                    groups.append(
                        tuple(
                            compile_term(w.get("podAffinityTerm") or {}, pod, int(w.get("weight") or 0))
                            for w in section.get(key) or ()
                        )
                    )
            except SelectorError:
                if strict:
                    raise
                groups.append(())
    return PodTerms(groups[0], groups[2], groups[1], groups[3])


class TermCache:
    """Compiled terms of pods by UID, valid while the pod object (or its resourceVersion) is the
    same. Two generations bound memory: when the current one fills up it becomes the old one, and
    entries still in use are promoted back on their next lookup."""

    __slots__ = ("_current", "_limit", "_old")

    def __init__(self, limit: int = 20_000) -> None:
        self._limit = limit
        # uid -> (pod, terms, whether every term compiled)
        self._current: dict[str, tuple[Pod, PodTerms, bool]] = {}
        self._old: dict[str, tuple[Pod, PodTerms, bool]] = {}

    def get(self, pod: Pod, *, strict: bool = False) -> PodTerms:
        """``pod``'s compiled terms. ``strict`` raises SelectorError for an invalid pod (the
        incoming pod); otherwise invalid groups of terms are dropped (existing pods)."""
        entry = self._current.get(pod.uid)
        if entry is None or not _same_version(entry[0], pod):
            entry = self._old.get(pod.uid)
            if entry is None or not _same_version(entry[0], pod):
                entry = None
        if entry is None or (strict and not entry[2]):
            try:
                entry = (pod, compile_pod_terms(pod), True)
            except SelectorError:
                if strict:
                    raise
                entry = (pod, compile_pod_terms(pod, strict=False), False)
        if self._current.get(pod.uid) is not entry:
            if len(self._current) >= self._limit:
                self._old, self._current = self._current, {}
            self._current[pod.uid] = entry
        return entry[1]


def _same_version(cached: Pod, pod: Pod) -> bool:
    return cached is pod or (bool(pod.resource_version) and cached.resource_version == pod.resource_version)


class NamespaceLabels:
    """Namespace labels fetched through the Handle at most once per cycle (unknown → no labels)."""

    __slots__ = ("_cache", "_handle")

    def __init__(self, handle: Handle) -> None:
        self._handle = handle
        self._cache: dict[str, Mapping[str, str]] = {}

    def __call__(self, namespace: str) -> Mapping[str, str]:
        labels = self._cache.get(namespace)
        if labels is None:
            labels = self._cache[namespace] = self._handle.namespace_labels(namespace) or {}
        return labels


def matches_all(terms: tuple[AffinityTerm, ...], pod: Pod, ns_labels: Callable[[str], Mapping[str, str]]) -> bool:
    """Whether ``pod`` matches every term (False for no terms, as upstream)."""
    return bool(terms) and all(t.matches(pod, ns_labels) for t in terms)


#: A label and the values one of which a pod must carry to match (see :func:`in_gate`).
Gate = tuple[str, frozenset[str]]


def in_gate(terms: Sequence[AffinityTerm]) -> Gate | None:
    """The first In requirement (matchLabels included) of any of ``terms``' selectors: a pod that
    lacks every one of its values matches none of the terms together (``matches_all``), nor that
    term alone. A label lookup, where a full match costs a call per term and requirement: counting
    scans every pod of every node for each pending pod. None when no term has one."""
    for t in terms:
        for r in t.selector.requirements:
            if r.operator == IN:
                return r.key, r.values
    return None
