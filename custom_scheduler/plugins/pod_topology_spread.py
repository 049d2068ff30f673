"""PodTopologySpread: keep matching pods evenly spread over topology domains (zones, nodes, ...).

Why it exists: a Deployment's replicas should not all land in one zone or on one node. Each
``topologySpreadConstraint`` names a node label (the topology key), a selector for the pods that
count, and ``maxSkew``: how far any domain may run ahead of the emptiest one. ``DoNotSchedule``
constraints filter; ``ScheduleAnyway`` constraints only score. Pods without constraints get the
plugin's default constraints (``defaultingType: System`` spreads by hostname and zone with a
selector built from the Services and controllers that select the pod).

The semantics are kube-scheduler's (v1.28+, NodeInclusionPolicy, MinDomains and MatchLabelKeys on):

- *Counting* (:mod:`custom_scheduler.plugins.spread_tally`) happens once per pod, in PreFilter and
  PreScore, over every node of the snapshot: a node counts when it carries every constraint's key
  and passes the constraint's inclusion policies (``nodeAffinityPolicy`` default Honor: the pod's
  nodeSelector and required node affinity; ``nodeTaintsPolicy`` default Ignore; Honor skips nodes
  with an untolerated NoSchedule/NoExecute taint). Pods count when they are in the incoming pod's
  namespace, not terminating, and match.
- *Filter*: ``count(domain of node) + (1 if the pod matches itself) - globalMin <= maxSkew``, where
  globalMin is the smallest domain count, or 0 while there are fewer domains than ``minDomains``.
- *Score*: ``round(Σ count·ln(domains + 2) + maxSkew - 1)`` per node, then reversed so that the
  emptiest domains score 100.

PreFilter state is immutable: preemption's AddPod/RemovePod produce a new state holding a small
overlay of count changes over the shared PreFilter counts, because :class:`CycleState` clones are
shallow and must not see each other's changes. Filter then costs a few dict lookups per node.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np

from custom_scheduler.api.labels import IN, Requirement, Selector, SelectorError, compile_selector
from custom_scheduler.api.model import Pod
from custom_scheduler.framework import arrays
from custom_scheduler.framework import cluster_events as ce
from custom_scheduler.framework.arrays import NodeArrays
from custom_scheduler.framework.interface import Handle
from custom_scheduler.framework.registry import PluginSpec
from custom_scheduler.framework.types import (
    SKIP,
    SUCCESS,
    Code,
    CycleState,
    NodeInfo,
    NodeScore,
    Snapshot,
    StateKey,
    StateNotFoundError,
    Status,
)
from custom_scheduler.plugins import args_reader, pod_hints, spread_scoring, spread_tally
from custom_scheduler.plugins.spread_tally import Constraint

NAME = "PodTopologySpread"

ERR_REASON_CONSTRAINTS_NOT_MATCH = "node(s) didn't match pod topology spread constraints"
ERR_REASON_NODE_LABEL_NOT_MATCH = ERR_REASON_CONSTRAINTS_NOT_MATCH + " (missing required label)"

LABEL_HOSTNAME = spread_tally.LABEL_HOSTNAME
LABEL_ZONE = "topology.kubernetes.io/zone"
DO_NOT_SCHEDULE = "DoNotSchedule"
SCHEDULE_ANYWAY = "ScheduleAnyway"
HONOR = "Honor"
IGNORE = "Ignore"
SYSTEM_DEFAULTING = "System"
LIST_DEFAULTING = "List"

_CONSTRAINT_FIELDS = (
    "maxSkew",
    "topologyKey",
    "whenUnsatisfiable",
    "labelSelector",
    "minDomains",
    "nodeAffinityPolicy",
    "nodeTaintsPolicy",
    "matchLabelKeys",
)


# Shared, pre-stamped rejections (Filter returns them on many nodes per cycle).
_REJECT_LABEL = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (ERR_REASON_NODE_LABEL_NOT_MATCH,), NAME)
_REJECT_SKEW = Status(Code.UNSCHEDULABLE, (ERR_REASON_CONSTRAINTS_NOT_MATCH,), NAME)


@dataclass(frozen=True, slots=True)
class DefaultConstraint:
    """One ``defaultConstraints`` entry: a topology spread constraint without a selector (the
    selector is derived per pod from the Services and controllers that select it)."""

    max_skew: int
    """``maxSkew``: how many more matching pods a domain may hold than the emptiest one (> 0)."""
    topology_key: str
    """``topologyKey``: the node label whose values are the domains."""
    when_unsatisfiable: str
    """``whenUnsatisfiable``: DoNotSchedule (filter) or ScheduleAnyway (score only)."""
    min_domains: int | None = None
    """``minDomains``: below this many domains the global minimum counts as 0 (DoNotSchedule only)."""
    node_affinity_policy: str | None = None
    """``nodeAffinityPolicy``: Honor (default) or Ignore the pod's node affinity when counting."""
    node_taints_policy: str | None = None
    """``nodeTaintsPolicy``: Honor or Ignore (default) node taints when counting."""
    match_label_keys: tuple[str, ...] = ()
    """``matchLabelKeys``: pod label keys whose values are ANDed into the selector."""


SYSTEM_DEFAULT_CONSTRAINTS = (
    DefaultConstraint(3, LABEL_HOSTNAME, SCHEDULE_ANYWAY),
    DefaultConstraint(5, LABEL_ZONE, SCHEDULE_ANYWAY),
)


@dataclass(frozen=True, slots=True)
class PodTopologySpreadArgs:
    """``PodTopologySpreadArgs`` (kubescheduler.config.k8s.io/v1)."""

    default_constraints: tuple[DefaultConstraint, ...] = ()
    """``defaultConstraints``: used for pods without constraints when ``defaultingType`` is List."""
    defaulting_type: str = SYSTEM_DEFAULTING
    """``defaultingType``: System (built-in hostname/zone constraints) or List (``defaultConstraints``)."""


def parse_args(raw: Mapping[str, Any] | None, path: str) -> PodTopologySpreadArgs:
    """Read and validate ``PodTopologySpreadArgs``; raises ConfigError with every bad field."""
    r = args_reader.ArgsReader(path)
    doc = r.mapping(raw, path, fields=("defaultConstraints", "defaultingType"), kind="PodTopologySpreadArgs")
    defaulting = r.string(doc, "defaultingType", path, SYSTEM_DEFAULTING)
    items = r.items(doc, "defaultConstraints", path)
    if defaulting not in (SYSTEM_DEFAULTING, LIST_DEFAULTING):
        r.error(f"{path}.defaultingType", f'Unsupported value: "{defaulting}": supported values: "List", "System"')
    elif defaulting == SYSTEM_DEFAULTING and items:
        r.error(f"{path}.defaultingType", 'Invalid value: "System": when .defaultConstraints are not empty')
    out: list[DefaultConstraint] = []
    seen: set[tuple[str, str]] = set()
    for i, item in enumerate(items):
        out.append(_default_constraint(r, item, f"{path}.defaultConstraints[{i}]", seen))
    r.raise_errors()
    return PodTopologySpreadArgs(tuple(out), defaulting)


def _default_constraint(r: args_reader.ArgsReader, item: Any, p: str, seen: set[tuple[str, str]]) -> DefaultConstraint:
    """One ``defaultConstraints`` entry, its errors recorded in ``r`` (upstream's messages, in
    upstream's order); ``seen`` holds the (topologyKey, whenUnsatisfiable) pairs before it."""
    c = r.mapping(item, p, fields=_CONSTRAINT_FIELDS)
    max_skew = r.integer(c, "maxSkew", p, 0)
    if max_skew <= 0:
        r.error(f"{p}.maxSkew", f"Invalid value: {max_skew}: not in valid range (0, inf)")
    key = r.string(c, "topologyKey", p)
    if not key:
        r.error(f"{p}.topologyKey", "Required value: can not be empty")
    for msg in args_reader.qualified_name_errors(key) if key else ():
        r.error(f"{p}.topologyKey", f'Invalid value: "{key}": {msg}')
    when = r.string(c, "whenUnsatisfiable", p)
    if not when:
        r.error(f"{p}.whenUnsatisfiable", "Required value: can not be empty")
    elif when not in (DO_NOT_SCHEDULE, SCHEDULE_ANYWAY):
        r.error(
            f"{p}.whenUnsatisfiable",
            f'Unsupported value: "{when}": supported values: "{DO_NOT_SCHEDULE}", "{SCHEDULE_ANYWAY}"',
        )
    if c.get("labelSelector") is not None:
        r.error(f"{p}.labelSelector", "Forbidden: constraint must not define a selector, as they deduced for each pod")
    min_domains: int | None = None
    if c.get("minDomains") is not None:
        min_domains = r.integer(c, "minDomains", p, 1)
        if min_domains <= 0:
            r.error(f"{p}.minDomains", f"Invalid value: {min_domains}: must be greater than 0")
        elif when != DO_NOT_SCHEDULE:
            r.error(f"{p}.minDomains", f"Invalid value: {min_domains}: can only use minDomains if {DO_NOT_SCHEDULE}")
    policies: list[str | None] = []
    for name in ("nodeAffinityPolicy", "nodeTaintsPolicy"):
        policy = r.string(c, name, p) or None
        if policy is not None and policy not in (HONOR, IGNORE):
            r.error(f"{p}.{name}", f'Unsupported value: "{policy}": supported values: "{HONOR}", "{IGNORE}"')
        policies.append(policy)
    if (key, when) in seen:
        r.error(p, f"Duplicate value: {{{key}, {when}}}")
    seen.add((key, when))
    return DefaultConstraint(
        max_skew, key, when, min_domains, policies[0], policies[1], r.strings(c, "matchLabelKeys", p)
    )


# --- compiled constraints and cycle state ----------------------------------------------------------


class _Counts:
    """Per-constraint domain counts from PreFilter. Never mutated once built; shared by every state
    derived from it. The ascending order is computed only when AddPod/RemovePod first needs it."""

    __slots__ = ("_ascending", "by_domain")

    def __init__(self, by_domain: list[dict[str, int]]) -> None:
        self.by_domain = by_domain
        self._ascending: list[list[tuple[int, str]] | None] = [None] * len(by_domain)

    def ascending(self, i: int) -> list[tuple[int, str]]:
        order = self._ascending[i]
        if order is None:
            order = self._ascending[i] = sorted((n, v) for v, n in self.by_domain[i].items())
        return order


@dataclass(frozen=True, slots=True)
class _FilterState:
    constraints: tuple[Constraint, ...] = ()
    self_match: tuple[int, ...] = ()
    counts: _Counts = field(default_factory=lambda: _Counts([]))
    delta: Mapping[tuple[int, str], int] = field(default_factory=dict)
    global_min: tuple[int, ...] = ()

    def count(self, i: int, value: str) -> int:
        n = self.counts.by_domain[i].get(value, 0)
        if self.delta:
            n += self.delta.get((i, value), 0)
        return n

    def with_changes(self, changes: Mapping[tuple[int, str], int]) -> _FilterState:
        """A new state with ``changes`` (``(constraint index, domain) -> ±n``) applied."""
        delta = dict(self.delta)
        for k, d in changes.items():
            delta[k] = delta.get(k, 0) + d
        mins = list(self.global_min)
        for i in {i for i, _ in changes}:
            mins[i] = self._global_min(i, delta)
        return replace(self, delta=delta, global_min=tuple(mins))

    def _global_min(self, i: int, delta: Mapping[tuple[int, str], int]) -> int:
        base = self.counts.by_domain[i]
        touched = {v: d for (j, v), d in delta.items() if j == i}
        domains = len(base) + sum(1 for v in touched if v not in base)
        lowest: int | None = None
        for v, d in touched.items():
            n = base.get(v, 0) + d
            lowest = n if lowest is None else min(lowest, n)
        for n, v in self.counts.ascending(i):
            if v not in touched:  # the smallest untouched domain; touched ones were handled above
                lowest = n if lowest is None else min(lowest, n)
                break
        if lowest is None or domains < self.constraints[i].min_domains:
            return 0
        return lowest


@dataclass(frozen=True, slots=True)
class _ScoreState:
    constraints: tuple[Constraint, ...] = ()
    ignored: frozenset[str] = frozenset()
    terms: tuple[spread_scoring.Term, ...] = ()  # per constraint, what scoring a node reads of it


_FILTER_KEY: StateKey[_FilterState] = StateKey("PreFilter" + NAME)
_SCORE_KEY: StateKey[_ScoreState] = StateKey("PreScore" + NAME)
#: Which of the nodes the last ``score_batch`` scored PreScore ignored (written only when some
#: node is): ``normalize_batch`` gets scores without names.
_IGNORED_KEY: StateKey[tuple[bool, ...]] = StateKey("ScoreIgnored" + NAME)


class PodTopologySpread:
    """The PodTopologySpread plugin: PreFilter, Filter, PreFilterExtensions, PreScore, Score."""

    #: Its ``sign_pod`` refuses some pods: the Signer asks it first.
    may_refuse_signing = True

    name: ClassVar[str] = NAME

    def __init__(self, args: PodTopologySpreadArgs | None, handle: Handle) -> None:
        args = args or PodTopologySpreadArgs()
        self._handle = handle
        self._system_defaulted = args.defaulting_type == SYSTEM_DEFAULTING
        self._defaults = SYSTEM_DEFAULT_CONSTRAINTS if self._system_defaulted else args.default_constraints
        self._tally = arrays.RowTally()
        self._matches = spread_tally.MatchCounts()
        self._hint_cache: dict[str, tuple[Pod, list[Constraint]]] = {}  # uid -> (pod, hard constraints)
        self._domain_ids = arrays.RowMemo()
        self._domains: dict[str, dict[str | None, int]] = {}  # topology key -> value -> id (None, 0: no label)

    @property
    def signs_no_pod(self) -> bool:
        """With default constraints (the system's or configured) :meth:`sign_pod` refuses every
        pod, so the profile's Signer skips signing altogether."""
        return bool(self._defaults)

    def sign_pod(self, pod: Pod) -> list[tuple[str, object]] | None:
        """Not signable with constraints of its own or default ones (so, with the system defaults,
        no pod is: upstream's rule)."""
        return None if pod.topology_spread_constraints or self._defaults else []

    def events_to_register(self) -> list[ce.ClusterEventWithHint]:
        """Assigned pods the constraints count, nodes carrying their topology keys, and the pod's
        own labels and tolerations (see :mod:`.pod_hints`)."""

        def constraints(pod: Pod) -> list[Constraint]:
            return self._hint_constraints(pod)

        pods = ce.ClusterEvent(ce.Resource.ASSIGNED_POD, ce.Action.ADD | ce.Action.UPDATE_POD_LABEL | ce.Action.DELETE)
        target = ce.ClusterEvent(ce.Resource.TARGET_POD, ce.Action.UPDATE_POD_TOLERATION | ce.Action.UPDATE_POD_LABEL)
        nodes = ce.ClusterEvent(
            ce.Resource.NODE,
            ce.Action.ADD | ce.Action.DELETE | ce.Action.UPDATE_NODE_LABEL | ce.Action.UPDATE_NODE_TAINT,
        )
        return [
            ce.ClusterEventWithHint(
                pods, lambda p, o, n: pod_hints.spread_after_assigned_pod_change(p, o, n, constraints(p))
            ),
            ce.ClusterEventWithHint(
                target, lambda p, o, n: pod_hints.spread_after_target_pod_change(p, o, n, constraints(p))
            ),
            ce.ClusterEventWithHint(nodes, lambda p, o, n: pod_hints.spread_after_node_change(p, o, n, constraints(p))),
        ]

    # -- filtering --------------------------------------------------------------------------------

    def pre_filter(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        try:
            constraints = self._constraints(pod, DO_NOT_SCHEDULE)
        except SelectorError as e:
            return Status.as_error(f"obtaining pod's hard topology spread constraints: {e}", NAME)
        if not constraints:
            state.write(_FILTER_KEY, _FilterState())
            return SKIP
        by_domain = self._count(pod, constraints)
        global_min = tuple(
            min(d.values()) if d and len(d) >= c.min_domains else 0 for c, d in zip(constraints, by_domain, strict=True)
        )
        self_match = tuple(int(c.selector.matches(pod.labels)) for c in constraints)
        state.write(_FILTER_KEY, _FilterState(tuple(constraints), self_match, _Counts(by_domain), {}, global_min))
        return SUCCESS

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        try:
            s = state.read(_FILTER_KEY)
        except StateNotFoundError as e:
            return Status.as_error(str(e), NAME)
        if not s.constraints:
            return SUCCESS
        node = node_info.node
        if node is None:
            return Status.as_error("node not found", NAME)
        labels = node.labels
        for i, c in enumerate(s.constraints):
            value = labels.get(c.topology_key)
            if value is None:
                return _REJECT_LABEL
            if s.count(i, value) + s.self_match[i] - s.global_min[i] > c.max_skew:
                return _REJECT_SKEW
        return SUCCESS

    def filter_mask(self, state: CycleState, pod: Pod, snap: Snapshot) -> arrays.Mask | bool | None:
        """:meth:`filter` for every snapshot node at once: the skew test is decided once per
        domain and looked up through a per-row domain id (memoised across cycles)."""
        s = state.get(_FILTER_KEY)
        if s is None:
            return None
        if not s.constraints:
            return True
        cols: NodeArrays = snap.arrays
        mask: arrays.Mask | None = None
        for i, c in enumerate(s.constraints):
            ids_of = self._domains.setdefault(c.topology_key, {None: 0})
            key = c.topology_key

            def domain_id(ni: NodeInfo, key: str = key, ids_of: dict[str | None, int] = ids_of) -> int:
                value = ni.node.labels.get(key) if ni.node is not None else None
                if value is None:
                    return 0
                got = ids_of.get(value)
                if got is None:
                    got = ids_of[value] = len(ids_of)
                return got

            ids = self._domain_ids.values(key, cols, snap.node_list, domain_id, np.int64)
            ok = np.zeros(len(ids_of), dtype=np.bool_)  # id 0 (no such label) stays False
            limit = c.max_skew + s.global_min[i] - s.self_match[i]
            for value, j in ids_of.items():
                if value is not None:
                    ok[j] = s.count(i, value) <= limit
            m = ok[ids]
            mask = m if mask is None else mask & m
        return mask

    def add_pod(self, state: CycleState, pod: Pod, pod_to_add: Pod, node_info: NodeInfo) -> Status:
        return self._update(state, pod, pod_to_add, node_info, 1)

    def remove_pod(self, state: CycleState, pod: Pod, pod_to_remove: Pod, node_info: NodeInfo) -> Status:
        return self._update(state, pod, pod_to_remove, node_info, -1)

    def _update(self, state: CycleState, pod: Pod, other: Pod, node_info: NodeInfo, delta: int) -> Status:
        s = state.get(_FILTER_KEY)
        node = node_info.node
        if s is None or not s.constraints or node is None or other.namespace != pod.namespace:
            return SUCCESS
        labels = node.labels
        if any(c.topology_key not in labels for c in s.constraints):
            return SUCCESS
        included = spread_tally.inclusion(pod)
        changes: dict[tuple[int, str], int] = {}
        for i, c in enumerate(s.constraints):
            if c.selector.matches(other.labels) and included(c, node):
                changes[(i, labels[c.topology_key])] = delta
        if changes:
            state.write(_FILTER_KEY, s.with_changes(changes))
        return SUCCESS

    # -- scoring ----------------------------------------------------------------------------------

    def pre_score(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        all_nodes = self._handle.snapshot_nodes()
        try:
            constraints = self._constraints(pod, SCHEDULE_ANYWAY) if all_nodes else []
        except SelectorError as e:
            return Status.as_error(f"obtaining pod's soft topology spread constraints: {e}", NAME)
        if not constraints:
            state.write(_SCORE_KEY, _ScoreState())
            return SKIP
        # Only explicit (or List-defaulted) constraints need every key; System defaults still
        # spread by hostname on nodes without a zone label.
        require_all = bool(pod.topology_spread_constraints) or not self._system_defaulted
        keys = [c.topology_key for c in constraints]
        counts, ignored = spread_scoring.scored_domains(nodes, keys, require_all=require_all)
        scored = len(nodes) - len(ignored)
        weights = tuple(math.log((scored if k == LABEL_HOSTNAME else len(counts[i])) + 2) for i, k in enumerate(keys))
        counters = tuple(self._matches.counter(c.selector, pod.namespace) for c in constraints)
        if any(counts):
            self._score_counts(pod, constraints, counts, all_nodes, require_all, counters)
        ts = spread_scoring.terms(constraints, counts, weights, counters)
        state.write(_SCORE_KEY, _ScoreState(tuple(constraints), frozenset(ignored), tuple(ts)))
        return SUCCESS

    def _score_counts(
        self,
        pod: Pod,
        constraints: Sequence[Constraint],
        counts: list[dict[str, int]],
        all_nodes: Sequence[NodeInfo],
        require_all: bool,
        counters: Sequence[spread_tally.Counter],
    ) -> None:
        """Fill PreScore's per-domain counts: kept across cycles on the daemon's snapshot (only the
        nodes that changed since the last pod of the same kind are re-read), else one pass."""
        snap = arrays.snapshot_of(self._handle)
        if snap is None or snap.node_list is not all_nodes:
            spread_tally.count_domains_for_scoring(
                pod, constraints, counts, all_nodes, require_all=require_all, counters=counters
            )
            return
        row = spread_tally.scoring_contribution_fn(pod, constraints, require_all, counters)
        key = ("score", require_all, spread_tally.tally_key(pod, constraints))
        totals = self._tally.totals(key, snap.arrays, all_nodes, row)
        for i, by_value in enumerate(counts):
            for value in by_value:
                by_value[value] = totals.get((i, value), 0)

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> int:
        s = state.read(_SCORE_KEY)
        node = node_info.node
        if node is None or not s.constraints or node.name in s.ignored:
            return 0
        return spread_scoring.node_score(s.terms, node_info)

    def score_batch(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> list[int]:
        """:meth:`score` of every node in one call (see :mod:`.spread_scoring`)."""
        s = state.read(_SCORE_KEY)
        if not s.constraints:
            return [0] * len(nodes)
        if s.ignored:
            state.write(_IGNORED_KEY, tuple(ni.name in s.ignored for ni in nodes))
        return spread_scoring.node_scores(s.terms, s.ignored, nodes)

    def normalize_score(self, state: CycleState, pod: Pod, scores: list[NodeScore]) -> Status:
        s = state.get(_SCORE_KEY)
        if s is None or not s.constraints:
            return SUCCESS
        ignored = [ns.name in s.ignored for ns in scores] if s.ignored else None
        for ns, v in zip(scores, spread_scoring.normalize([ns.score for ns in scores], ignored), strict=True):
            ns.score = v
        return SUCCESS

    def normalize_batch(self, state: CycleState, pod: Pod, raw: list[int]) -> list[int]:
        """:meth:`normalize_score` on the batch path, after :meth:`score_batch` in the same cycle."""
        s = state.get(_SCORE_KEY)
        if s is None or not s.constraints:
            return list(raw)
        return spread_scoring.normalize(raw, state.read(_IGNORED_KEY) if s.ignored else None)

    # -- constraints ------------------------------------------------------------------------------

    def _count(self, pod: Pod, constraints: Sequence[Constraint]) -> list[dict[str, int]]:
        """PreFilter's counts: kept across cycles on the daemon's snapshot (:class:`arrays.RowTally`,
        since only the nodes that changed since the last pod of the same kind need a recount),
        else one pass over all nodes."""
        nodes = self._handle.snapshot_nodes()
        snap = arrays.snapshot_of(self._handle)
        if snap is None or snap.node_list is not nodes:
            return spread_tally.count_matching_pods(pod, constraints, nodes)
        contribution = spread_tally.contribution_fn(pod, constraints)
        by_domain: list[dict[str, int]] = [{} for _ in constraints]
        for (i, value), n in self._tally.totals(
            spread_tally.tally_key(pod, constraints), snap.arrays, nodes, contribution
        ).items():
            by_domain[i][value] = n
        return by_domain

    def _hint_constraints(self, pod: Pod) -> list[Constraint]:
        """The hard constraints the hints read, compiled once per version of a pod that has its
        own (every assigned pod's event asks the hints of every pod this plugin rejected); the
        defaults are not kept, since their selector follows the pod's Services and controllers."""
        if not pod.topology_spread_constraints:
            return self._constraints(pod, DO_NOT_SCHEDULE)
        hit = self._hint_cache.get(pod.uid)
        if hit is not None and (
            hit[0] is pod or (pod.resource_version and hit[0].resource_version == pod.resource_version)
        ):
            return hit[1]
        compiled = self._constraints(pod, DO_NOT_SCHEDULE)
        if len(self._hint_cache) >= 20_000:
            self._hint_cache.clear()
        self._hint_cache[pod.uid] = (pod, compiled)
        return compiled

    def _constraints(self, pod: Pod, action: str) -> list[Constraint]:
        """The pod's constraints for ``action``, or the defaults when the pod has none at all."""
        if pod.topology_spread_constraints:
            return [
                _compile_constraint(doc, pod.labels)
                for doc in pod.topology_spread_constraints
                if doc.get("whenUnsatisfiable") == action
            ]
        defaults = [d for d in self._defaults if d.when_unsatisfiable == action]
        if not defaults:
            return []
        selector = self._handle.default_spread_selector(pod)
        if selector is None or selector.is_empty or selector.nothing:
            return []
        return [
            Constraint(
                d.max_skew,
                d.topology_key,
                selector,
                d.min_domains or 1,
                d.node_affinity_policy != IGNORE,
                d.node_taints_policy == HONOR,
            )
            for d in defaults
        ]


# --- pure helpers ----------------------------------------------------------------------------------


def _compile_constraint(doc: Mapping[str, Any], pod_labels: Mapping[str, str]) -> Constraint:
    """Compile one ``topologySpreadConstraint``; nil policies/minDomains take the API defaults."""
    selector = compile_selector(doc.get("labelSelector"))
    extra = tuple(
        Requirement(k, IN, frozenset([pod_labels[k]])) for k in doc.get("matchLabelKeys") or () if k in pod_labels
    )
    if extra:
        # As upstream: the pod's values are ANDed in; a null selector becomes just those values.
        selector = Selector(extra if selector.nothing else extra + selector.requirements)
    return Constraint(
        max_skew=int(doc.get("maxSkew") or 0),
        topology_key=str(doc.get("topologyKey") or ""),
        selector=selector,
        min_domains=int(doc.get("minDomains") or 1),
        honor_affinity=doc.get("nodeAffinityPolicy") != IGNORE,
        honor_taints=doc.get("nodeTaintsPolicy") == HONOR,
    )


SPEC = PluginSpec(NAME, factory=PodTopologySpread, parse_args=parse_args)
