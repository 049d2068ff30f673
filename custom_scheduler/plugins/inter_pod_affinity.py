"""InterPodAffinity: place pods near (affinity) or away from (anti-affinity) other pods.

Why it exists: co-locating a cache with its clients, or keeping two replicas of a database out of
the same zone, is a rule about *pods*, expressed in node topology: "a node whose ``zone`` label has
the same value as the node of some pod matching this selector". Required terms filter, preferred
terms score, and existing pods' terms apply symmetrically to the incoming pod.

Semantics are kube-scheduler's (v1.28+):

- A term selects pods by ``labelSelector`` (null matches nothing) in ``namespaces`` ∪ the
  namespaces matched by ``namespaceSelector`` (``{}`` matches all; both unset means the pod's own
  namespace). ``matchLabelKeys``/``mismatchLabelKeys`` AND ``key in/notin (the pod's value)`` into
  the selector, which is idempotent with the API server doing the same at admission.
- PreFilter counts, once per pod over every node of the snapshot, per ``(topologyKey, value)``:
  existing pods whose required anti-affinity matches the incoming pod, existing pods that match
  *all* of the incoming pod's required affinity terms, and existing pods matching each of its
  required anti-affinity terms. Filter is then a few dict lookups per node.
- Filter rejects, in this order: required affinity unsatisfied (UnschedulableAndUnresolvable; the
  first pod of a self-affine group passes when no pod matches anywhere), the pod's own
  anti-affinity, then existing pods' anti-affinity (both Unschedulable: preemption may help).
- Score sums weights per topology domain (incoming preferred terms matched by existing pods,
  existing pods' required affinity at ``hardPodAffinityWeight`` and preferred terms matched by the
  incoming pod) and min-max normalises to 0..100.

Existing pods' compiled terms (:mod:`custom_scheduler.plugins.affinity_terms`) are cached per UID
(an existing pod's terms depend only on the pod), so a cycle over 10,000 pods compiles only the
pods that changed. Cycle state is immutable:
AddPod/RemovePod (preemption) derive a new state with a small overlay of count changes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from custom_scheduler.api.labels import SelectorError
from custom_scheduler.api.model import Pod
from custom_scheduler.framework import arrays
from custom_scheduler.framework import cluster_events as ce
from custom_scheduler.framework.interface import Handle
from custom_scheduler.framework.pod_tally import PodRows, PodTally, row_entries
from custom_scheduler.framework.registry import PluginSpec
from custom_scheduler.framework.types import (
    MAX_NODE_SCORE,
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
from custom_scheduler.plugins import args_reader, pod_hints, signers
from custom_scheduler.plugins.affinity_terms import (
    AffinityTerm,
    NamespaceLabels,
    PodTerms,
    TermCache,
    in_gate,
    matches_all,
)

NAME = "InterPodAffinity"

ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH = "node(s) didn't satisfy existing pods anti-affinity rules"
ERR_REASON_AFFINITY_RULES_NOT_MATCH = "node(s) didn't match pod affinity rules"
ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH = "node(s) didn't match pod anti-affinity rules"


# Shared, pre-stamped rejections (Filter returns them on many nodes per cycle).
_REJECT_AFFINITY = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (ERR_REASON_AFFINITY_RULES_NOT_MATCH,), NAME)
_REJECT_ANTI = Status(Code.UNSCHEDULABLE, (ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH,), NAME)
_REJECT_EXISTING = Status(Code.UNSCHEDULABLE, (ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH,), NAME)


@dataclass(frozen=True, slots=True)
class InterPodAffinityArgs:
    """``InterPodAffinityArgs`` (kubescheduler.config.k8s.io/v1)."""

    hard_pod_affinity_weight: int = 1
    """``hardPodAffinityWeight``: score weight of an existing pod's *required* affinity term that
    matches the incoming pod (0..100; 0 disables)."""
    ignore_preferred_terms_of_existing_pods: bool = False
    """``ignorePreferredTermsOfExistingPods``: skip scoring entirely unless the incoming pod has
    preferred (anti-)affinity terms (a throughput optimisation)."""


def parse_args(raw: Mapping[str, Any] | None, path: str) -> InterPodAffinityArgs:
    """Read and validate ``InterPodAffinityArgs``; raises ConfigError with every bad field."""
    r = args_reader.ArgsReader(path)
    doc = r.mapping(
        raw, path, fields=("hardPodAffinityWeight", "ignorePreferredTermsOfExistingPods"), kind="InterPodAffinityArgs"
    )
    weight = r.integer(doc, "hardPodAffinityWeight", path, 1)
    if not 0 <= weight <= 100:
        r.error(f"{path}.hardPodAffinityWeight", f"Invalid value: {weight}: not in valid range [0, 100]")
    ignore = doc.get("ignorePreferredTermsOfExistingPods")
    if ignore is not None and not isinstance(ignore, bool):
        r.error(f"{path}.ignorePreferredTermsOfExistingPods", f"must be a boolean, got {type(ignore).__name__}")
    r.raise_errors()
    return InterPodAffinityArgs(weight, bool(ignore))


# --- cycle state -----------------------------------------------------------------------------------

Pair = tuple[str, str]
"""A topology domain: (topologyKey, the node's value for it)."""


class _PairCounts:
    """Counts per topology pair: a base built in PreFilter plus an overlay from AddPod/RemovePod.

    Immutable; ``nonzero`` is the number of pairs with a non-zero count (upstream's map length,
    which deletes entries that drop to zero).
    """

    __slots__ = ("_base", "_delta", "nonzero")

    def __init__(self, base: dict[Pair, int], delta: dict[Pair, int] | None = None, nonzero: int | None = None) -> None:
        self._base = base
        self._delta = delta or {}
        self.nonzero = sum(1 for n in base.values() if n) if nonzero is None else nonzero

    def get(self, pair: Pair) -> int:
        n = self._base.get(pair, 0)
        return n + self._delta.get(pair, 0) if self._delta else n

    def with_changes(self, changes: Mapping[Pair, int]) -> _PairCounts:
        if not changes:
            return self
        delta = dict(self._delta)
        nonzero = self.nonzero
        for pair, d in changes.items():
            old = self.get(pair)
            delta[pair] = delta.get(pair, 0) + d
            nonzero += (old + d != 0) - (old != 0)
        return _PairCounts(self._base, delta, nonzero)


@dataclass(frozen=True, slots=True)
class _FilterState:
    terms: PodTerms
    existing_anti: _PairCounts
    affinity: _PairCounts
    anti: _PairCounts
    self_affine: bool
    ns_labels: NamespaceLabels


@dataclass(frozen=True, slots=True)
class _ScoreState:
    topology_score: Mapping[str, Mapping[str, int]]


_FILTER_KEY: StateKey[_FilterState] = StateKey("PreFilter" + NAME)
_SCORE_KEY: StateKey[_ScoreState] = StateKey("PreScore" + NAME)


def _add(counts: dict[Pair, int], labels: Mapping[str, str], key: str, n: int) -> None:
    value = labels.get(key)
    if value is not None:
        pair = (key, value)
        counts[pair] = counts.get(pair, 0) + n


# --- per-pod contributions (summed directly, or kept across cycles by pod_tally.PodTally) -------


def _sum_rows(rows: PodRows, nodes: Sequence[NodeInfo]) -> dict[Any, int]:
    """The plain pass: every node's entries added up (explain, simulate, stub handles)."""
    row = row_entries(rows)
    out: dict[Any, int] = {}
    for ni in nodes:
        for k, v in row(ni):
            out[k] = out.get(k, 0) + v
    return out


def _incoming_key(pod: Pod, ns_labels: NamespaceLabels) -> Any:
    """What existing pods' terms can see of the incoming pod: its namespace, labels and namespace labels."""
    return (pod.namespace, frozenset(pod.labels.items()), frozenset(ns_labels(pod.namespace).items()))


def _reads_namespace_labels(terms: Sequence[AffinityTerm]) -> bool:
    """Whether matching these terms against *existing* pods reads other namespaces' labels, which
    can change without any node changing: such sums are kept only while no namespace changed."""
    return any(not t.namespace_selector.nothing for t in terms)


def _namespaces_read(terms: Sequence[AffinityTerm], version: int) -> int | None:
    """For a key of kept sums: the namespace labels' version when ``terms`` read other namespaces'
    labels (a relabelled namespace starts those sums afresh), else None (they never go stale)."""
    return version if _reads_namespace_labels(terms) else None


def _node_labels(ni: NodeInfo) -> Mapping[str, str] | None:
    return ni.node.labels if ni.node is not None else None


def _with_anti(ni: NodeInfo) -> Mapping[str, Pod]:
    return ni.pods_with_required_anti_affinity


def _with_affinity(ni: NodeInfo) -> Mapping[str, Pod]:
    return ni.pods_with_affinity


def _all_pods(ni: NodeInfo) -> Mapping[str, Pod]:
    return ni.pods


def _existing_anti_rows(terms_of: TermCache, pod: Pod, ns_labels: NamespaceLabels) -> PodRows:
    """Per existing pod: its required anti-affinity terms that select the incoming pod."""

    def entry(labels: Mapping[str, str], existing: Pod) -> arrays.Entries:
        return tuple(
            ((t.topology_key, labels[t.topology_key]), 1)
            for t in terms_of.get(existing).required_anti_affinity
            if t.topology_key in labels and t.matches(pod, ns_labels)
        )

    return PodRows(_with_anti, _node_labels, entry)


def _incoming_rows(
    req_aff: tuple[AffinityTerm, ...], req_anti: tuple[AffinityTerm, ...], ns_labels: NamespaceLabels
) -> PodRows:
    """Per existing pod: whether it matches all incoming required affinity terms (tag "a") and
    each incoming required anti-affinity term (tag "x"), per topology pair."""
    keys = {t.topology_key for t in req_aff + req_anti}
    # (label, values) a pod must carry to match, checked before the full match (see in_gate).
    aff_key, aff_values = in_gate(req_aff) or ("", None)
    anti = [(t, *(in_gate((t,)) or ("", None))) for t in req_anti]

    def gate(ni: NodeInfo) -> Mapping[str, str] | None:
        node = ni.node
        if node is None or not any(k in node.labels for k in keys):
            return None  # no term could count on this node
        return node.labels

    def entry(labels: Mapping[str, str], existing: Pod) -> arrays.Entries:
        theirs = existing.labels
        out: list[tuple[Any, int]] = []
        if (
            req_aff
            and (aff_values is None or theirs.get(aff_key) in aff_values)
            and matches_all(req_aff, existing, ns_labels)
        ):
            for t in req_aff:
                if t.topology_key in labels:
                    out.append((("a", t.topology_key, labels[t.topology_key]), 1))
        for t, key, values in anti:
            if (
                t.topology_key in labels
                and (values is None or theirs.get(key) in values)
                and t.matches(existing, ns_labels)
            ):
                out.append((("x", t.topology_key, labels[t.topology_key]), 1))
        return tuple(out)

    return PodRows(_all_pods, gate, entry)


def _score_rows(
    terms_of: TermCache,
    terms: PodTerms,
    pod: Pod,
    ns_labels: NamespaceLabels,
    hard_weight: int,
    has_preferred: bool,
) -> PodRows:
    """Per existing pod: PreScore's weights per topology pair, from the incoming pod's preferred
    terms over it and from its terms over the incoming pod. Without preferred terms of the
    incoming pod's own, only existing pods with affinity can contribute."""
    incoming = _weighted(terms, 0)

    def gate(ni: NodeInfo) -> Mapping[str, str] | None:
        return ni.node.labels if ni.node is not None and ni.node.labels else None

    def entry(labels: Mapping[str, str], existing: Pod) -> arrays.Entries:
        out: list[tuple[Any, int]] = []
        _add_matching(out, labels, incoming, existing, ns_labels)
        if existing.has_pod_affinity:
            _add_matching(out, labels, _weighted(terms_of.get(existing), hard_weight), pod, ns_labels)
        return tuple(out)

    return PodRows(_all_pods if has_preferred else _with_affinity, gate, entry)


def _weighted(terms: PodTerms, hard_weight: int) -> list[tuple[AffinityTerm, int]]:
    """The terms that score, with the weight each adds: required affinity at ``hard_weight``
    (existing pods' only; 0 leaves them out), preferred affinity at its weight, preferred
    anti-affinity at minus its weight."""
    out = [(t, hard_weight) for t in terms.required_affinity] if hard_weight > 0 else []
    out += [(t, t.weight) for t in terms.preferred_affinity]
    out += [(t, -t.weight) for t in terms.preferred_anti_affinity]
    return out


def _add_matching(
    out: list[tuple[Any, int]],
    labels: Mapping[str, str],
    weighted: Sequence[tuple[AffinityTerm, int]],
    target: Pod,
    ns_labels: NamespaceLabels,
) -> None:
    """Append (topology pair of the node, weight) for each term that selects ``target``."""
    for t, weight in weighted:
        if t.matches(target, ns_labels):
            value = labels.get(t.topology_key)
            if value is not None:
                out.append(((t.topology_key, value), weight))


class InterPodAffinity:
    """The InterPodAffinity plugin: PreFilter, Filter, PreFilterExtensions, PreScore, Score."""

    #: Its ``sign_pod`` refuses some pods: the Signer asks it first.
    may_refuse_signing = True

    name: ClassVar[str] = NAME

    def __init__(self, args: InterPodAffinityArgs | None, handle: Handle) -> None:
        self._args = args or InterPodAffinityArgs()
        self._handle = handle
        self._terms = TermCache()
        # The hints' own cache: they run on the informers' thread, this cache's on the scheduler's.
        self._hint_terms = TermCache()
        self._tally = PodTally()

    def sign_pod(self, pod: Pod) -> signers.Fragments | None:
        """A pod with pod (anti-)affinity is not signable; others by their labels (existing pods'
        preferred terms may match them), unless those terms are ignored."""
        if pod.has_pod_affinity:
            return None
        return [] if self._args.ignore_preferred_terms_of_existing_pods else signers.labels(pod)

    def events_to_register(self) -> list[ce.ClusterEventWithHint]:
        """Assigned pods that may be the missing peer or no longer repel; nodes gaining topology
        (see :mod:`.pod_hints`); the pod's own labels (other pods' anti-affinity reads them)."""

        def ns_labels(namespace: str) -> Mapping[str, str]:
            return self._handle.namespace_labels(namespace) or {}

        def terms_of(pod: Pod) -> PodTerms:
            return self._hint_terms.get(pod)

        pods = ce.ClusterEvent(ce.Resource.ASSIGNED_POD, ce.Action.ADD | ce.Action.UPDATE_POD_LABEL | ce.Action.DELETE)
        return [
            ce.ClusterEventWithHint(
                pods,
                lambda p, o, n: pod_hints.affinity_after_assigned_pod_change(p, o, n, ns_labels, terms_of),
                pod_keys=lambda p: pod_hints.affinity_peer_keys(terms_of(p)),
                event_keys=pod_hints.added_pod_keys,
            ),
            ce.ClusterEventWithHint(ce.ClusterEvent(ce.Resource.TARGET_POD, ce.Action.UPDATE_POD_LABEL)),
            ce.ClusterEventWithHint(
                ce.ClusterEvent(ce.Resource.NODE, ce.Action.ADD | ce.Action.UPDATE_NODE_LABEL),
                lambda p, o, n: pod_hints.affinity_after_node_change(p, o, n, terms_of),
            ),
        ]

    # -- filtering --------------------------------------------------------------------------------

    def pre_filter(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        try:
            terms = self._terms.get(pod, strict=True)
        except SelectorError as e:
            return Status.unresolvable(f"parsing pod: {e}")
        # Read before any namespace label: kept sums never outlive the labels they were computed from.
        ns_version = self._handle.namespace_labels_version()
        ns_labels = NamespaceLabels(self._handle)
        all_nodes = self._handle.snapshot_nodes()
        snap = self._memo_snapshot(all_nodes)
        anti_rows = _existing_anti_rows(self._terms, pod, ns_labels)
        existing_anti: dict[Any, int]
        if snap is not None and not snap.anti_affinity_nodes:
            existing_anti = {}  # no pod anywhere has required anti-affinity: nothing to sum or keep
        elif snap is not None:
            key = ("existing-anti", _incoming_key(pod, ns_labels))
            existing_anti = self._tally.totals(key, snap.arrays, all_nodes, anti_rows)
        else:
            existing_anti = _sum_rows(anti_rows, self._nodes_with(all_nodes, anti=True))
        affinity, anti = self._incoming_counts(terms, pod, all_nodes, ns_labels, snap, ns_version)
        s = _FilterState(
            terms,
            _PairCounts(existing_anti),
            _PairCounts(affinity),
            _PairCounts(anti),
            matches_all(terms.required_affinity, pod, ns_labels),
            ns_labels,
        )
        state.write(_FILTER_KEY, s)
        if not existing_anti and not terms.required_affinity and not terms.required_anti_affinity:
            return SKIP
        return SUCCESS

    def _nodes_with(self, all_nodes: Sequence[NodeInfo], *, anti: bool) -> Sequence[NodeInfo]:
        """Nodes holding pods with (anti-)affinity: the snapshot keeps their names, so pods without
        affinity of their own cost O(such nodes) instead of O(all nodes); else every node."""
        snap = arrays.snapshot_of(self._handle)
        if snap is None or snap.node_list is not all_nodes:
            return all_nodes
        return snap.nodes_named(snap.anti_affinity_nodes if anti else snap.affinity_nodes)

    def _memo_snapshot(self, all_nodes: Sequence[NodeInfo]) -> Snapshot | None:
        """The snapshot, when it has columns for the node list being read (the daemon), so that
        sums over all nodes can be kept across cycles (:class:`arrays.RowTally`)."""
        snap = arrays.snapshot_of(self._handle)
        return snap if snap is not None and snap.node_list is all_nodes else None

    def _incoming_counts(
        self,
        terms: PodTerms,
        pod: Pod,
        nodes: Sequence[NodeInfo],
        ns_labels: NamespaceLabels,
        snap: Snapshot | None,
        ns_version: int,
    ) -> tuple[dict[Pair, int], dict[Pair, int]]:
        """Existing pods matching all of the incoming pod's required affinity terms, and each of
        its required anti-affinity terms, per topology pair."""
        req_aff, req_anti = terms.required_affinity, terms.required_anti_affinity
        if not req_aff and not req_anti:
            return {}, {}
        rows = _incoming_rows(req_aff, req_anti, ns_labels)
        totals: dict[Any, int]
        if snap is not None:
            key = ("incoming", pod.namespace, req_aff, req_anti, _namespaces_read(req_aff + req_anti, ns_version))
            totals = self._tally.totals(key, snap.arrays, nodes, rows)
        else:
            totals = _sum_rows(rows, nodes)
        affinity: dict[Pair, int] = {}
        anti: dict[Pair, int] = {}
        for (tag, key, value), n in totals.items():
            (affinity if tag == "a" else anti)[(key, value)] = n
        return affinity, anti

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        try:
            s = state.read(_FILTER_KEY)
        except StateNotFoundError as e:
            return Status.as_error(str(e), NAME)
        node = node_info.node
        if node is None:
            return Status.as_error("node not found", NAME)
        labels = node.labels
        if s.terms.required_affinity and not _satisfies_affinity(s, labels):
            return _REJECT_AFFINITY
        if s.anti.nonzero:
            for t in s.terms.required_anti_affinity:
                value = labels.get(t.topology_key)
                if value is not None and s.anti.get((t.topology_key, value)) > 0:
                    return _REJECT_ANTI
        if s.existing_anti.nonzero:
            for pair in labels.items():
                if s.existing_anti.get(pair) > 0:
                    return _REJECT_EXISTING
        return SUCCESS

    def add_pod(self, state: CycleState, pod: Pod, pod_to_add: Pod, node_info: NodeInfo) -> Status:
        return self._update(state, pod, pod_to_add, node_info, 1)

    def remove_pod(self, state: CycleState, pod: Pod, pod_to_remove: Pod, node_info: NodeInfo) -> Status:
        return self._update(state, pod, pod_to_remove, node_info, -1)

    def _update(self, state: CycleState, pod: Pod, other: Pod, node_info: NodeInfo, m: int) -> Status:
        s = state.get(_FILTER_KEY)
        node = node_info.node
        if s is None or node is None:
            return SUCCESS
        labels = node.labels
        existing_anti: dict[Pair, int] = {}
        if other.has_required_anti_affinity:
            for t in self._terms.get(other).required_anti_affinity:
                if t.matches(pod, s.ns_labels):
                    _add(existing_anti, labels, t.topology_key, m)
        affinity: dict[Pair, int] = {}
        req_aff = s.terms.required_affinity
        if req_aff and matches_all(req_aff, other, s.ns_labels):
            for t in req_aff:
                _add(affinity, labels, t.topology_key, m)
        anti: dict[Pair, int] = {}
        for t in s.terms.required_anti_affinity:
            if t.matches(other, s.ns_labels):
                _add(anti, labels, t.topology_key, m)
        if existing_anti or affinity or anti:
            s = replace(
                s,
                existing_anti=s.existing_anti.with_changes(existing_anti),
                affinity=s.affinity.with_changes(affinity),
                anti=s.anti.with_changes(anti),
            )
            state.write(_FILTER_KEY, s)
        return SUCCESS

    # -- scoring ----------------------------------------------------------------------------------

    def pre_score(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        try:
            terms = self._terms.get(pod, strict=True)
        except SelectorError as e:
            return Status.as_error(f"failed to parse pod: {e}", NAME)
        has_preferred = bool(terms.preferred_affinity or terms.preferred_anti_affinity)
        if self._args.ignore_preferred_terms_of_existing_pods and not has_preferred:
            state.write(_SCORE_KEY, _ScoreState({}))
            return SKIP
        ns_version = self._handle.namespace_labels_version()  # before any label, as in pre_filter
        ns_labels = NamespaceLabels(self._handle)
        hard_weight = self._args.hard_pod_affinity_weight
        all_nodes = self._handle.snapshot_nodes()
        snap = self._memo_snapshot(all_nodes)
        rows = _score_rows(self._terms, terms, pod, ns_labels, hard_weight, has_preferred)
        preferred = terms.preferred_affinity + terms.preferred_anti_affinity
        totals: dict[Any, int]
        if snap is not None and not has_preferred and not snap.affinity_nodes:
            totals = {}  # only existing pods with affinity could contribute, and there are none
        elif snap is not None:
            read = _namespaces_read(preferred, ns_version)
            memo_key = ("score", _incoming_key(pod, ns_labels), has_preferred, preferred, hard_weight, read)
            totals = self._tally.totals(memo_key, snap.arrays, all_nodes, rows)
        else:
            # Without preferred terms of its own, only existing pods with affinity can contribute.
            totals = _sum_rows(rows, all_nodes if has_preferred else self._nodes_with(all_nodes, anti=False))
        score: dict[str, dict[str, int]] = {}
        for (topology_key, value), weight in totals.items():
            score.setdefault(topology_key, {})[value] = weight
        state.write(_SCORE_KEY, _ScoreState(score))
        return SUCCESS if score else SKIP

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> int:
        s = state.read(_SCORE_KEY)
        node = node_info.node
        if node is None or not s.topology_score:
            return 0
        total = 0
        labels = node.labels
        for key, values in s.topology_score.items():
            value = labels.get(key)
            if value is not None:
                total += values.get(value, 0)
        return total

    def normalize_score(self, state: CycleState, pod: Pod, scores: list[NodeScore]) -> Status:
        s = state.get(_SCORE_KEY)
        if s is None or not s.topology_score or not scores:
            return SUCCESS
        lowest = min(ns.score for ns in scores)
        spread = max(ns.score for ns in scores) - lowest
        for ns in scores:
            # Go: int64(float64(MaxNodeScore) * (float64(score-min) / float64(max-min))).
            ns.score = int(float(MAX_NODE_SCORE) * ((ns.score - lowest) / spread)) if spread > 0 else 0
        return SUCCESS


# --- pure helpers ----------------------------------------------------------------------------------


def _satisfies_affinity(s: _FilterState, labels: Mapping[str, str]) -> bool:
    pods_exist = True
    for t in s.terms.required_affinity:
        value = labels.get(t.topology_key)
        if value is None:
            return False  # the node must carry every term's topology key
        if s.affinity.get((t.topology_key, value)) <= 0:
            pods_exist = False
    # The first pod of a group with affinity to itself: no pod matches anywhere yet, but it
    # matches its own terms, so it may go to any node with the topology keys.
    return pods_exist or (s.affinity.nonzero == 0 and s.self_affine)


SPEC = PluginSpec(NAME, factory=InterPodAffinity, parse_args=parse_args)
