"""The requeue rules of the two plugins that count other pods: InterPodAffinity and PodTopologySpread.

Upstream's queueing hints (interpodaffinity/plugin.go and podtopologyspread/plugin.go at v1.37.2),
pure functions of the rejected pod and the changed object, with the plugin's compiled terms or
constraints passed in. Each answers whether the change can alter what the plugin counted when it
rejected the pod:

- InterPodAffinity, an assigned pod added, relabelled or deleted: QUEUE when it now matches all of
  the pod's required affinity terms (it may be the missing peer), or when it matched one of the
  pod's anti-affinity terms before and no longer does (or was deleted), or when the deleted pod's
  own anti-affinity matched the pod. A node added or relabelled: QUEUE when it gained or changed a
  topology key of an affinity term, or lost or changed one of an anti-affinity term.
- PodTopologySpread, an assigned pod of the same namespace added, relabelled or deleted: QUEUE when
  its labels match a constraint's selector (or stopped or started matching). A node: QUEUE when it
  starts or stops carrying every topology key, or changes a key's value or its taints. The pod's
  own labels or tolerations: QUEUE when a selector's verdict on it changed, or tolerations changed
  under ``nodeTaintsPolicy: Honor``.

InterPodAffinity's pod events also carry keys (:func:`affinity_peer_keys`, :func:`added_pod_keys`):
an added pod can only help a pod whose required affinity it satisfies, so the queue asks the hint
only of the pods waiting on one of the added pod's labels (a thousand pods waiting each for its
own peer was a thousand hints per added pod).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence

from custom_scheduler.api.model import Node, Pod
from custom_scheduler.framework.cluster_events import Hint
from custom_scheduler.plugins.affinity_terms import AffinityTerm, PodTerms, compile_pod_terms, in_gate
from custom_scheduler.plugins.spread_tally import Constraint

NamespaceLabels = Callable[[str], Mapping[str, str]]
TermsOf = Callable[[Pod], PodTerms]


def _bound_or_nominated(p: Pod | None) -> bool:
    return p is None or bool(p.node_name or p.nominated_node_name)


def _all_match(terms: Sequence[AffinityTerm], p: Pod, ns: NamespaceLabels) -> bool:
    return bool(terms) and all(t.matches(p, ns) for t in terms)


def _any_match(terms: Sequence[AffinityTerm], p: Pod, ns: NamespaceLabels) -> bool:
    return any(t.matches(p, ns) for t in terms)


def _compile(pod: Pod) -> PodTerms:
    return compile_pod_terms(pod, strict=False)


def affinity_after_assigned_pod_change(
    pod: Pod, old: Pod | None, new: Pod | None, ns: NamespaceLabels, terms_of: TermsOf = _compile
) -> Hint:
    """``terms_of`` gives a pod's compiled terms (the plugin passes its cache: every assigned pod's
    event asks this of every pod InterPodAffinity rejected, so compiling each time dominated)."""
    if not (_bound_or_nominated(old) and _bound_or_nominated(new)):
        return Hint.SKIP
    terms = terms_of(pod)
    affinity, anti = terms.required_affinity, terms.required_anti_affinity
    if old is not None and new is not None:  # relabelled
        if not _all_match(affinity, old, ns) and _all_match(affinity, new, ns):
            return Hint.QUEUE
        return Hint.QUEUE if _any_match(anti, old, ns) and not _any_match(anti, new, ns) else Hint.SKIP
    if new is not None:  # added: only a missing peer can help
        return Hint.QUEUE if _all_match(affinity, new, ns) else Hint.SKIP
    assert old is not None  # deleted: a pod the rejected one repelled, or that repelled it
    if _any_match(anti, old, ns):
        return Hint.QUEUE
    theirs = terms_of(old).required_anti_affinity
    return Hint.QUEUE if _any_match(theirs, pod, ns) else Hint.SKIP


def affinity_peer_keys(terms: PodTerms) -> frozenset[Hashable] | None:
    """The ``(label, value)`` pairs of which an added pod must carry one to satisfy every required
    affinity term: those of the first term's In requirement (matchLabels included); None when no
    term has one. Empty when no added pod can help (no required affinity, or a null selector)."""
    if not terms.required_affinity or any(t.selector.nothing for t in terms.required_affinity):
        return frozenset()
    gate = in_gate(terms.required_affinity)
    return None if gate is None else frozenset((gate[0], v) for v in gate[1])


def added_pod_keys(old: Pod | None, new: Pod | None) -> frozenset[Hashable] | None:
    """An added pod's labels as ``(label, value)`` pairs; None for a relabel or a delete (those
    may concern any waiting pod: anti-affinity)."""
    return frozenset(new.labels.items()) if old is None and new is not None else None


def affinity_after_node_change(pod: Pod, old: Node | None, new: Node, terms_of: TermsOf = _compile) -> Hint:
    terms = terms_of(pod)
    for t in terms.required_affinity:
        if old is None:
            if t.topology_key in new.labels:
                return Hint.QUEUE
            continue
        before, after = old.labels.get(t.topology_key), new.labels.get(t.topology_key)
        if after is not None and before != after:
            return Hint.QUEUE
    for t in terms.required_anti_affinity:
        if old is None:
            return Hint.QUEUE
        before, after = old.labels.get(t.topology_key), new.labels.get(t.topology_key)
        if before is not None and before != after:
            return Hint.QUEUE
    return Hint.SKIP


def _selectors_differ(constraints: Sequence[Constraint], old: Pod, new: Pod) -> bool:
    return old.labels != new.labels and any(
        c.selector.matches(old.labels) != c.selector.matches(new.labels) for c in constraints
    )


def spread_after_assigned_pod_change(
    pod: Pod, old: Pod | None, new: Pod | None, constraints: Sequence[Constraint]
) -> Hint:
    for p in (old, new):
        if p is not None and (not p.node_name or p.namespace != pod.namespace):
            return Hint.SKIP  # not counted by the pod's constraints
    if old is not None and new is not None:
        return Hint.QUEUE if _selectors_differ(constraints, old, new) else Hint.SKIP
    changed = new if new is not None else old
    assert changed is not None
    return Hint.QUEUE if any(c.selector.matches(changed.labels) for c in constraints) else Hint.SKIP


def _has_keys(node: Node, constraints: Sequence[Constraint]) -> bool:
    return all(c.topology_key in node.labels for c in constraints)


def spread_after_node_change(pod: Pod, old: Node | None, new: Node | None, constraints: Sequence[Constraint]) -> Hint:
    was = old is not None and _has_keys(old, constraints)
    now = new is not None and _has_keys(new, constraints)
    if old is not None and new is not None:
        if was != now:
            return Hint.QUEUE
        keys_changed = any(old.labels.get(c.topology_key) != new.labels.get(c.topology_key) for c in constraints)
        return Hint.QUEUE if now and (keys_changed or old.taints != new.taints) else Hint.SKIP
    return Hint.QUEUE if (now if new is not None else was) else Hint.SKIP


def spread_after_target_pod_change(pod: Pod, old: Pod, new: Pod, constraints: Sequence[Constraint]) -> Hint:
    if old.tolerations != new.tolerations and any(c.honor_taints for c in constraints):
        return Hint.QUEUE
    return Hint.QUEUE if _selectors_differ(constraints, old, new) else Hint.SKIP
