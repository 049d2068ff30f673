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

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from custom_scheduler.api.labels import Selector
from custom_scheduler.api.model import Node, Pod, tolerates_all
from custom_scheduler.framework import arrays
from custom_scheduler.framework.types import NodeInfo
from custom_scheduler.plugins import node_affinity

_NO_SCHEDULE_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
LABEL_HOSTNAME = "kubernetes.io/hostname"  # counted per node at Score, not per domain at PreScore


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
    counters: Sequence[Counter] | None = None,
) -> None:
    """PreScore's pass over all nodes, filling ``counts`` for the domains present among the
    feasible nodes (hostname constraints are counted per node at Score)."""
    for (i, value), n in _sum(scoring_contribution_fn(pod, constraints, require_all, counters), nodes).items():
        if value in counts[i]:
            counts[i][value] += n


def scoring_contribution_fn(
    pod: Pod, constraints: Sequence[Constraint], require_all: bool, counters: Sequence[Counter] | None = None
) -> Callable[[NodeInfo], arrays.Entries]:
    """One node's part of PreScore's sums: ((constraint index, domain value), matching pods) for
    each constraint other than hostname the node counts for (with ``require_all``, only nodes
    carrying every key count; otherwise a node without the key counts in the domain "", as
    upstream reads a missing label as "")."""
    keys = [c.topology_key for c in constraints]
    included = inclusion(pod)
    count: Sequence[Counter] = counters or [_plain_counter(c.selector, pod.namespace) for c in constraints]
    active = [(i, c) for i, c in enumerate(constraints) if c.topology_key != LABEL_HOSTNAME]

    def contribution(ni: NodeInfo) -> arrays.Entries:
        node = ni.node
        if node is None or not active:
            return ()
        labels = node.labels
        if require_all and any(k not in labels for k in keys):
            return ()
        return tuple(((i, labels.get(c.topology_key, "")), count[i](ni)) for i, c in active if included(c, node))

    return contribution


def _sum(row: Callable[[NodeInfo], arrays.Entries], nodes: Sequence[NodeInfo]) -> dict[Any, int]:
    out: dict[Any, int] = {}
    for ni in nodes:
        for k, v in row(ni):
            out[k] = out.get(k, 0) + v
    return out


def count_on_node(node_info: NodeInfo, selector: Selector, namespace: str) -> int:
    return sum(
        1 for p in node_info.pods.values() if p.namespace == namespace and not p.deleting and selector.matches(p.labels)
    )


#: A node's matching pods for one (selector, namespace).
Counter = Callable[[NodeInfo], int]


def _plain_counter(selector: Selector, namespace: str) -> Counter:
    return lambda ni: count_on_node(ni, selector, namespace)


class MatchCounts:
    """Per node, how many of its pods match a (selector, namespace), kept while the node's
    generation stays the same.

    Why: PreScore sums these over every node and Score reads each feasible node's hostname count,
    for every pod; replicas of one workload ask about the same selector, and between two of them
    only the node that took the last one changed, so recounting every node's pods (what the
    profile of DefaultTopologySpreading showed as half the cycle) is wasted. A NodeInfo whose
    generation is 0 (built by hand, never through the cache) is always recounted; the pod count
    is checked too, as a guard against a mutated copy that kept its generation.
    """

    def __init__(self, size: int = 16) -> None:
        self._size = size
        self._by_key: OrderedDict[tuple[Selector, str], dict[str, tuple[int, int, int]]] = OrderedDict()

    def counter(self, selector: Selector, namespace: str) -> Counter:
        key = (selector, namespace)
        known = self._by_key.get(key)
        if known is None:
            known = self._by_key[key] = {}
            if len(self._by_key) > self._size:
                self._by_key.popitem(last=False)
        else:
            self._by_key.move_to_end(key)

        def count(ni: NodeInfo) -> int:
            gen = ni.generation
            if gen <= 0:
                return count_on_node(ni, selector, namespace)
            name = ni.name
            hit = known.get(name)
            if hit is not None and hit[0] == gen and hit[1] == len(ni.pods):
                return hit[2]
            n = count_on_node(ni, selector, namespace)
            known[name] = (gen, len(ni.pods), n)
            return n

        return count
