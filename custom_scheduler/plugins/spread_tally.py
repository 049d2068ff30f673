"""Who counts where for PodTopologySpread: the compiled constraint, which nodes count for it,
and the number of matching pods per topology domain.

Kept apart from the plugin (:mod:`custom_scheduler.plugins.pod_topology_spread`) because counting
is a role of its own that PreFilter (once per pod over every node, or kept across cycles by
:class:`~custom_scheduler.framework.arrays.RowTally`), PreScore and Score all read: a node counts
for a constraint when it carries the topology key and passes the constraint's inclusion policies
(``nodeAffinityPolicy``, ``nodeTaintsPolicy``); a pod counts when it is in the incoming pod's
namespace, not terminating, and matches the selector. The plugin keeps the skew arithmetic.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from custom_scheduler.api.labels import Selector
from custom_scheduler.api.model import Node, Pod, tolerates_all
from custom_scheduler.framework import arrays
from custom_scheduler.framework.types import NodeInfo
from custom_scheduler.plugins import node_affinity

_NO_SCHEDULE_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


@dataclass(frozen=True, slots=True)
class Constraint:
    """A topology spread constraint with its selector compiled and its defaults applied."""

    max_skew: int
    topology_key: str
    selector: Selector
    min_domains: int = 1
    honor_affinity: bool = True
    honor_taints: bool = False


def has_required_node_affinity(pod: Pod) -> bool:
    if pod.node_selector:
        return True
    node_affinity = (pod.affinity or {}).get("nodeAffinity") or {}
    return bool(node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution"))


def inclusion(pod: Pod) -> Callable[[Constraint, Node], bool]:
    """``(constraint, node) -> bool``: whether ``node`` counts for ``constraint`` under its policies."""
    affinity_ok: Callable[[Node], bool] | None = None
    if has_required_node_affinity(pod):
        affinity_ok = node_affinity.compile_required_node_affinity(pod).matches

    def included(c: Constraint, node: Node) -> bool:
        if c.honor_affinity and affinity_ok is not None and not affinity_ok(node):
            return False
        return not (c.honor_taints and _has_untolerated_no_schedule_taint(pod, node))

    return included


def _has_untolerated_no_schedule_taint(pod: Pod, node: Node) -> bool:
    return any(t.effect in _NO_SCHEDULE_EFFECTS and not tolerates_all(pod.tolerations, t) for t in node.taints)


def contribution_fn(pod: Pod, constraints: Sequence[Constraint]) -> Callable[[NodeInfo], arrays.Entries]:
    """One node's part of the PreFilter counts: ((constraint index, domain value), matching pods)
    for each constraint the node is eligible for."""
    keys = [c.topology_key for c in constraints]
    included = inclusion(pod)
    ns = pod.namespace

    def contribution(ni: NodeInfo) -> arrays.Entries:
        node = ni.node
        if node is None:
            return ()
        labels = node.labels
        if any(k not in labels for k in keys):
            return ()
        active = [(i, c.selector, labels[c.topology_key]) for i, c in enumerate(constraints) if included(c, node)]
        if not active:
            return ()
        found = [0] * len(constraints)
        for p in ni.pods.values():
            if p.namespace != ns or p.deleting:
                continue
            for i, selector, _ in active:
                if selector.matches(p.labels):
                    found[i] += 1
        return tuple(((i, value), found[i]) for i, _, value in active)

    return contribution


def count_matching_pods(pod: Pod, constraints: Sequence[Constraint], nodes: Sequence[NodeInfo]) -> list[dict[str, int]]:
    """PreFilter's one pass over all nodes: per constraint, domain value -> matching pods.

    A domain appears (possibly with 0) as soon as one eligible node carries it: the number of
    domains matters for ``minDomains`` and the minimum.
    """
    by_domain: list[dict[str, int]] = [{} for _ in constraints]
    contribution = contribution_fn(pod, constraints)
    for ni in nodes:
        for (i, value), found in contribution(ni):
            d = by_domain[i]
            d[value] = d.get(value, 0) + found
    return by_domain


def tally_key(pod: Pod, constraints: Sequence[Constraint]) -> Any:
    """Everything a node's contribution depends on besides the node: the namespace, the
    constraints, and the pod's required node affinity and tolerations where policies use them."""
    affinity: Any = None
    if any(c.honor_affinity for c in constraints) and has_required_node_affinity(pod):
        required = ((pod.affinity or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        affinity = (tuple(sorted(pod.node_selector.items())), orjson.dumps(required, option=orjson.OPT_SORT_KEYS))
    tolerations = pod.tolerations if any(c.honor_taints for c in constraints) else None
    return (pod.namespace, tuple(constraints), affinity, tolerations)


def count_domains_for_scoring(
    pod: Pod,
    constraints: Sequence[Constraint],
    counts: list[dict[str, int]],
    nodes: Sequence[NodeInfo],
    *,
    require_all: bool,
) -> None:
    """PreScore's pass over all nodes, filling ``counts`` for the domains present among the
    feasible nodes (hostname constraints are counted per node at Score)."""
    included = inclusion(pod)
    for ni, node in scored_nodes(nodes, [c.topology_key for c in constraints], require_all=require_all):
        active: list[tuple[Selector, dict[str, int], str]] = []
        for i, c in enumerate(constraints):
            value = node.labels.get(c.topology_key, "")
            if value in counts[i] and included(c, node):
                active.append((c.selector, counts[i], value))
        for selector, d, value in active:
            d[value] += count_on_node(ni, selector, pod.namespace)


def scored_nodes(
    nodes: Sequence[NodeInfo], keys: Sequence[str], *, require_all: bool, ignored: set[str] | None = None
) -> Iterator[tuple[NodeInfo, Node]]:
    """The nodes PreScore counts and scores: those with a Node and, when ``require_all``, every
    key; the names of those without every key go into ``ignored`` (they score 0)."""
    for ni in nodes:
        node = ni.node
        if node is None:
            continue
        if require_all and any(k not in node.labels for k in keys):
            if ignored is not None:
                ignored.add(node.name)
            continue
        yield ni, node


def count_on_node(node_info: NodeInfo, selector: Selector, namespace: str) -> int:
    return sum(
        1 for p in node_info.pods.values() if p.namespace == namespace and not p.deleting and selector.matches(p.labels)
    )
