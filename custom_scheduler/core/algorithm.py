"""One scheduling decision, without I/O: PreFilter → Filter → PreScore → Score → select.

Shared by the daemon, ``explain`` and ``simulate`` so that all three decide the same way. Follows
kube-scheduler's ``schedulePod``:

- a nominated node (from an earlier preemption) is tried first and taken if it passes the filters;
- at most ``num_feasible_nodes_to_find`` feasible nodes are searched for, starting at a rotating
  index so that successive pods look at different parts of a large cluster;
- the configured HTTP extenders (the profile Handle's ``extenders``) filter the feasible nodes
  after the plugins, and their priorities (x weight x 10) join the plugins' totals;
- one feasible node is taken without scoring; otherwise the best total wins, ties broken uniformly
  at random (one draw among the tied nodes, from an injected ``random.Random`` so tests and
  simulate can seed it; kube-scheduler's reservoir sampling gives the same distribution).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from custom_scheduler.api.model import Pod
from custom_scheduler.framework import instrument as ins
from custom_scheduler.framework.batching import OpportunisticBatch, Signature
from custom_scheduler.framework.extender import EXTENDER_NAME, ExtenderError, Extenders, extenders_of
from custom_scheduler.framework.extender_wire import MAX_EXTENDER_PRIORITY
from custom_scheduler.framework.nominated_views import NominatedViews
from custom_scheduler.framework.runtime import Framework, ScoredNode
from custom_scheduler.framework.types import MAX_NODE_SCORE, Code, CycleState, FitError, NodeInfo, Snapshot, Status

MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5
DEFAULT_PERCENTAGE_BASE = 50


def num_feasible_nodes_to_find(num_all_nodes: int, percentage: int | None) -> int:
    """kube-scheduler's adaptive sampling: all of small clusters, ``max(5, 50 - n/125)`` % of big ones."""
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return num_all_nodes
    pct = percentage or 0
    if pct >= 100:
        return num_all_nodes
    if pct <= 0:
        pct = max(MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND, DEFAULT_PERCENTAGE_BASE - num_all_nodes // 125)
    k = num_all_nodes * pct // 100
    return max(k, MIN_FEASIBLE_NODES_TO_FIND)


@dataclass(slots=True)
class ScheduleResult:
    node: str
    evaluated: int
    feasible: int
    scores: list[ScoredNode] = field(default_factory=list)
    statuses: dict[str, Status] = field(default_factory=dict)
    hint: str = ""
    """The batch's hint this cycle was given ("" when none)."""
    ranking: list[tuple[str, int]] = field(default_factory=list)
    """The other scored nodes with their totals, kept when batching asked for them."""


@dataclass(frozen=True, slots=True)
class BatchRequest:
    """Opportunistic batching for one cycle: the profile's batch state, the pod's signature and
    the cycle's number (see :mod:`custom_scheduler.framework.batching`)."""

    state: OpportunisticBatch
    signature: Signature | None
    cycle: int


class Algorithm:
    """Holds the rotating start index across cycles; otherwise stateless."""

    def __init__(self, rng: random.Random | None = None, percentage_of_nodes_to_score: int = 0) -> None:
        self.rng = rng or random.Random()
        self.next_start = 0
        self.percentage = percentage_of_nodes_to_score
        #: On the fast path, keep the chosen node's and the runner-up's per-plugin weighted scores
        #: in ``scores`` (the decision record's top plugins; the columns are summed anyway).
        self.keep_top = False
        #: Snapshot nodes with their nominated pods added, kept across cycles (preemption waves).
        self.views = NominatedViews()

    def schedule(
        self,
        fwk: Framework,
        state: CycleState,
        pod: Pod,
        snap: Snapshot,
        nominated: Mapping[str, Sequence[Pod]] | None = None,
        *,
        find_all: bool = False,
        detail: bool | None = None,
        batch: BatchRequest | None = None,
    ) -> ScheduleResult:
        """Pick a node for ``pod`` or raise :class:`FitError` (FrameworkError/RuntimeError on plugin
        errors, :class:`~custom_scheduler.framework.extender.ExtenderError` on a failed extender).

        ``find_all`` evaluates every node (explain does this to report each node's verdict).
        ``detail`` (default: ``find_all``) keeps every plugin's score per node in ``scores``;
        without it only the totals are computed, which is the daemon's fast path. With ``batch``
        the previous equal pod's ranking may name a node to try alone first (its hint), and a full
        search keeps its ranking in the result for the next one.
        """
        if detail is None:
            detail = find_all
        nominated = nominated or {}
        nodes = snap.node_list
        if not nodes:
            raise FitError(pod, 0)
        st = fwk.run_pre_filter(state, pod, nodes)
        if not st.is_success:
            if st.is_rejected:
                raise FitError(pod, len(nodes), {ni.name: st for ni in nodes}, pre_filter_msg=st.message)
            raise RuntimeError(f"running PreFilter plugin {st.plugin!r}: {st.message}")

        statuses: dict[str, Status] = {}
        candidates = _prefilter_candidates(fwk, state, nodes, statuses, snap)
        exts = extenders_of(fwk.handle)
        hint = _batch_hint(fwk, state, pod, snap, nominated, batch) if batch is not None and not find_all else ""
        # A pod nominated by an earlier preemption tries that node first.
        if (
            pod.nominated_node_name
            and not find_all
            and _fits_nominated_node(fwk, state, pod, snap, nominated)
            and _nominated_passes_extenders(exts, pod, snap)
        ):
            return ScheduleResult(pod.nominated_node_name, 1, 1)
        if hint and _fits(fwk, state, pod, snap, nominated, hint) is True:
            return ScheduleResult(hint, 1, 1, hint=hint)  # one feasible node: no search, no scoring

        feasible, evaluated = self._filter(
            fwk, state, pod, candidates, nominated, statuses, find_all, snap if candidates is nodes else None
        )
        if exts.has_filters and feasible:
            feasible = _extender_filter(exts, pod, feasible, statuses)
        if not feasible:
            raise FitError(pod, len(nodes), statuses)
        if len(feasible) == 1 and not find_all:
            return ScheduleResult(feasible[0].name, evaluated, 1, statuses=statuses, hint=hint)
        # The others' ranking serves only an equal next pod: none for a pod that cannot be signed
        # (every pod, with PodTopologySpread's system defaults), where building it cost a pass
        # over every feasible node.
        keep = batch is not None and batch.signature is not None
        result = self._score(fwk, state, pod, feasible, evaluated, statuses, detail, keep_ranking=keep)
        result.hint = hint
        return result

    def _score(
        self,
        fwk: Framework,
        state: CycleState,
        pod: Pod,
        feasible: Sequence[NodeInfo],
        evaluated: int,
        statuses: dict[str, Status],
        detail: bool,
        *,
        keep_ranking: bool = False,
    ) -> ScheduleResult:
        """PreScore, Score and the pick among several feasible nodes; with ``detail`` every
        plugin's score per node is kept, else only the totals are computed; ``keep_ranking``
        keeps the other nodes' totals (for the next equal pod)."""
        st = fwk.run_pre_score(state, pod, feasible)
        if not st.is_success:
            raise RuntimeError(f"running PreScore plugin {st.plugin!r}: {st.message}")
        exts = extenders_of(fwk.handle)
        if not fwk.has_score_plugins and not exts:
            scored = [ScoredNode(n.name, 1) for n in feasible]
        elif detail:
            scored = (
                fwk.run_score(state, pod, feasible) if fwk.has_score_plugins else [ScoredNode(n.name) for n in feasible]
            )
            _add_extender_scores(scored, exts.prioritize(pod, feasible) if exts.has_prioritizers else {})
        else:
            rows: list[tuple[str, npt.NDArray[np.int64]]] | None = [] if self.keep_top else None
            totals = fwk.run_score_totals(state, pod, feasible, rows)
            if exts.has_prioritizers:
                by_node = exts.prioritize(pod, feasible)
                totals = totals + np.fromiter(
                    (sum(f for _, f in by_node.get(n.name, {}).values()) for n in feasible), np.int64, len(feasible)
                )
            best = self.select_index(totals)
            top = _top_two(feasible, totals, rows, best) if rows is not None else []
            result = ScheduleResult(feasible[best].name, evaluated, len(feasible), top, statuses)
            if keep_ranking:
                result.ranking = [
                    (n.name, t) for i, (n, t) in enumerate(zip(feasible, totals.tolist(), strict=True)) if i != best
                ]
            return result
        chosen = self.select(scored)
        ranking = [(sn.name, sn.total) for sn in scored if sn.name != chosen] if keep_ranking else []
        return ScheduleResult(chosen, evaluated, len(feasible), scored, statuses, ranking=ranking)

    def _filter(
        self,
        fwk: Framework,
        state: CycleState,
        pod: Pod,
        nodes: Sequence[NodeInfo],
        nominated: Mapping[str, Sequence[Pod]],
        statuses: dict[str, Status],
        find_all: bool,
        snap: Snapshot | None,
    ) -> tuple[list[NodeInfo], int]:
        """:meth:`_find_feasible`, timed as the Filter extension point of the cycle (upstream
        times findNodesThatPassFilters, not each node) with the evaluations it made."""
        t = ins.now()
        code = Code.ERROR
        feasible: list[NodeInfo] = []
        rejected: dict[str, Status] = {}
        evaluated = 0
        try:
            feasible, evaluated = self._find_feasible(fwk, state, pod, nodes, nominated, rejected, find_all, snap)
            code = Code.SUCCESS
            return feasible, evaluated
        finally:
            # Only Filter's own rejections count (PreFilter's exclusions name no filter plugin),
            # and they join the nodes PreFilter left out: those are never among ``nodes``.
            fwk.report_filter(state, rejected.values(), evaluated, code, ins.now() - t)
            statuses.update(rejected)

    def _find_feasible(
        self,
        fwk: Framework,
        state: CycleState,
        pod: Pod,
        nodes: Sequence[NodeInfo],
        nominated: Mapping[str, Sequence[Pod]],
        rejected: dict[str, Status],
        find_all: bool,
        snap: Snapshot | None = None,
    ) -> tuple[list[NodeInfo], int]:
        """Filter over ``nodes`` from the rotating start until enough feasible ones are found;
        each node Filter rejects gets its status in ``rejected``."""
        n = len(nodes)
        if n == 0:
            return [], 0
        pct = fwk.percentage_of_nodes_to_score
        want = n if find_all else num_feasible_nodes_to_find(n, pct if pct is not None else self.percentage)
        exts = extenders_of(fwk.handle)
        if not (fwk.has_score_plugins or exts.has_filters or exts.has_prioritizers) and not find_all:
            want = 1
        start = self.next_start % n
        # Only pods of at least this pod's priority count (run_filter_with_nominated adds no other).
        nominated = _relevant(nominated, pod) if nominated else {}
        views = self.views if snap is not None else None  # the snapshot's own NodeInfos only
        if views is not None:
            views.retain(nominated.keys())
        feasible: list[NodeInfo] = []
        whole = (
            _whole_pass(fwk, state, pod, snap, start, want, nominated, views)
            if nominated and views is not None and snap is not None and not find_all
            else None
        )
        if whole is not None:
            feasible = whole[0]
            rejected.update(whole[1])
            processed = n
        elif nominated:
            processed = 0
            for i in range(n):
                ni = nodes[(start + i) % n]
                processed = i + 1
                noms = nominated.get(ni.name)
                s = (
                    fwk.run_filter_with_nominated(state, pod, ni, noms, views)
                    if noms
                    else fwk.run_filter(state, pod, ni)
                )
                if s.is_success:
                    feasible.append(ni)
                    if len(feasible) >= want:
                        break
                else:
                    rejected[ni.name] = s
        else:
            feasible, found, processed = fwk.filter_many(
                state, pod, nodes, start=start, want=want, snap=snap, need_statuses=find_all
            )
            rejected.update(found)
        for s in rejected.values():
            if s.code is Code.ERROR:
                raise RuntimeError(f'running "{s.plugin}" filter plugin: {s.message}')  # upstream's text
        self.next_start = (start + processed) % n
        return feasible, processed

    def select_index(self, totals: npt.NDArray[np.int64] | Sequence[int]) -> int:
        """Index of the highest total; ties broken uniformly at random, one draw over the tied
        indices in order (the same draw :meth:`select` makes)."""
        arr = totals if isinstance(totals, np.ndarray) else np.asarray(totals, dtype=np.int64)
        ties = np.flatnonzero(arr == arr.max())
        return int(ties[0]) if len(ties) == 1 else int(ties[self.rng.randrange(len(ties))])

    def select(self, scored: Sequence[ScoredNode]) -> str:
        """The highest total; ties broken uniformly at random (see :meth:`select_index`)."""
        best = max(s.total for s in scored)
        ties = [s for s in scored if s.total == best]
        return ties[0].name if len(ties) == 1 else ties[self.rng.randrange(len(ties))].name


def _whole_pass(
    fwk: Framework,
    state: CycleState,
    pod: Pod,
    snap: Snapshot,
    start: int,
    want: int,
    nominated: Mapping[str, Sequence[Pod]],
    views: NominatedViews,
) -> tuple[list[NodeInfo], dict[str, Status]] | None:
    """The per-node loop's feasible nodes and statuses, in its order, when it would go through
    every node (fewer than ``want`` fit); None when it might stop early (it then runs).

    Preemption waves meet this: each preemptor's first attempt fits nowhere, and the retried one
    fits only where its victims left, while earlier preemptors are nominated to nodes. The masks
    decide the nodes holding none at once; a holder is filtered on its kept copy with the pods
    added (only the filters that read its pods run there) and then as itself, the statuses
    upstream reports. When a PreFilter extension must see each added pod, each holder's copy is
    made anew by the framework instead, the masks deciding only the others."""
    infos = snap.node_infos
    if fwk.extensions_see_added_pods(state):
        got = fwk.filter_whole_pass(state, pod, snap, start, want, {}, nominated.keys())
        return None if got is None else _with_holders(fwk, state, pod, snap, start, want, nominated, got, views)
    held = {name: views.with_pods(ni, pods) for name, pods in nominated.items() if (ni := infos.get(name)) is not None}
    got = fwk.filter_whole_pass(state, pod, snap, start, want, held)
    if got is None:
        return None
    statuses, passed = got
    nodes = snap.node_list
    return [nodes[i] for i in passed], statuses


def _with_holders(
    fwk: Framework,
    state: CycleState,
    pod: Pod,
    snap: Snapshot,
    start: int,
    want: int,
    nominated: Mapping[str, Sequence[Pod]],
    got: tuple[dict[str, Status], list[int]],
    views: NominatedViews,
) -> tuple[list[NodeInfo], dict[str, Status]] | None:
    """:func:`_whole_pass` with each holder filtered by the framework (its copy made anew), the
    others' statuses and passing rows in ``got``; in the loop's order."""
    base, passed = got
    fits: set[str] = {snap.node_list[i].name for i in passed}
    held: dict[str, Status] = {}
    for name, pods in nominated.items():
        if (ni := snap.node_infos.get(name)) is None:
            continue
        st = fwk.run_filter_with_nominated(state, pod, ni, pods, views)
        if not st.is_success:
            held[name] = st
        elif len(fits) + 1 >= want:
            return None  # the loop stops at the want-th fitting node: it decides which those are
        else:
            fits.add(name)
    nodes = snap.node_list
    order = [*nodes[start:], *nodes[:start]]
    feasible = [ni for ni in order if ni.name in fits]
    return feasible, {ni.name: held.get(ni.name) or base[ni.name] for ni in order if ni.name not in fits}


def _relevant(nominated: Mapping[str, Sequence[Pod]], pod: Pod) -> dict[str, Sequence[Pod]]:
    """Each node's nominated pods that count for ``pod`` (:func:`_counts`), the nodes with none
    left out. A node whose pods all count keeps its own sequence (the nominator's tuple, which the
    kept copies of holders recognise by identity): during a preemption wave the preemptors share
    one priority and only the pod's own nomination is dropped."""
    prio, uid = pod.priority, pod.uid
    out: dict[str, Sequence[Pod]] = {}
    for name, pods in nominated.items():
        for p in pods:
            if p.priority < prio or p.uid == uid:
                kept = [q for q in pods if _counts(q, pod)]
                if kept:
                    out[name] = kept
                break
        else:
            if pods:
                out[name] = pods
    return out


def _counts(nominee: Pod, pod: Pod) -> bool:
    """Whether ``nominee`` is added to its node when ``pod`` is filtered (upstream's
    addGENominatedPods: a nominated pod of equal or higher priority, not ``pod`` itself)."""
    return nominee.priority >= pod.priority and nominee.uid != pod.uid


def _prefilter_candidates(
    fwk: Framework, state: CycleState, nodes: Sequence[NodeInfo], statuses: dict[str, Status], snap: Snapshot | None
) -> Sequence[NodeInfo]:
    """The nodes PreFilter left to try: all of them, or those its plugins named
    (``state.node_names``); each node left out gets its UnschedulableAndUnresolvable reason."""
    if state.node_names is None:
        return nodes
    allowed = state.node_names
    # Upstream names only the plugins whose PreFilter result excluded nodes, sorted. A set narrowed
    # before PreFilter (a gang member tried in one topology domain) names the profile's PreFilters.
    names = state.narrowed_by or tuple(p.name for p in fwk.pre_filter)
    reason = Status.unresolvable(f"node(s) didn't satisfy plugin(s) [{' '.join(names)}]")
    if snap is None or nodes is not snap.node_list or len(snap.positions) != len(nodes):
        kept: list[NodeInfo] = []
        for ni in nodes:  # one pass: a gang member tried in a rack of a big cluster leaves out most
            if ni.name in allowed:
                kept.append(ni)
            else:
                statuses[ni.name] = reason
        return kept
    # The snapshot's own list: its positions (in list order) name the nodes without a NodeInfo
    # property read each, and a few allowed nodes (a DaemonSet pod's one) are looked up directly.
    pos = snap.positions
    if len(allowed) * 8 < len(nodes):
        kept = [nodes[i] for i in sorted(pos[n] for n in allowed if n in pos)]
        excluded = dict.fromkeys(pos, reason)  # every node, in C; then the few allowed out again
        for name in allowed:
            excluded.pop(name, None)
        statuses.update(excluded)
    else:
        kept = [nodes[i] for n, i in pos.items() if n in allowed]
        statuses.update(dict.fromkeys([n for n in pos if n not in allowed], reason))
    return kept


def _extender_filter(
    exts: Extenders, pod: Pod, feasible: list[NodeInfo], statuses: dict[str, Status]
) -> list[NodeInfo]:
    """The feasible nodes the extenders keep. A node an extender drops without a reason gets an
    UnschedulableAndUnresolvable status without one: upstream leaves it absent from the node
    statuses, which counts nothing in the FitError and makes it no preemption candidate."""
    kept = exts.filter(pod, feasible, statuses)
    if len(kept) != len(feasible):
        left = {ni.name for ni in kept}
        dropped = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (), EXTENDER_NAME)
        for ni in feasible:
            if ni.name not in left and ni.name not in statuses:
                statuses[ni.name] = dropped
    return kept


def _nominated_passes_extenders(exts: Extenders, pod: Pod, snap: Snapshot) -> bool:
    """The extenders' verdict on the nominated node (upstream's ``evaluateNominatedNode``); an
    extender error only means the full search runs, as upstream logs and goes on."""
    nom = snap.get(pod.nominated_node_name)
    if not exts.has_filters or nom is None:
        return True
    try:
        return bool(exts.filter(pod, [nom], {}))
    except ExtenderError:
        return False


def _add_extender_scores(scored: list[ScoredNode], by_node: Mapping[str, Mapping[str, tuple[int, int]]]) -> None:
    """Each extender's score in the detail, under the extender's name, as upstream's
    ``NodePluginScores``: raw 0-10, normalised to 0-100, weighted as added to the total."""
    for sn in scored:
        for ext, (raw, final) in by_node.get(sn.name, {}).items():
            sn.raw[ext] = raw
            sn.normalized[ext] = raw * (MAX_NODE_SCORE // MAX_EXTENDER_PRIORITY)
            sn.weighted[ext] = final
            sn.total += final


def _fits_nominated_node(
    fwk: Framework, state: CycleState, pod: Pod, snap: Snapshot, nominated: Mapping[str, Sequence[Pod]]
) -> bool:
    """Whether the node an earlier preemption nominated ``pod`` to passes the filters (with the
    pods nominated there too); a node gone or left out by PreFilter does not."""
    nom = snap.get(pod.nominated_node_name)
    if nom is None or (state.node_names is not None and nom.name not in state.node_names):
        return False
    return fwk.run_filter_with_nominated(state, pod, nom, nominated.get(nom.name, ())).is_success


def _fits(
    fwk: Framework, state: CycleState, pod: Pod, snap: Snapshot, nominated: Mapping[str, Sequence[Pod]], name: str
) -> bool | None:
    """The filters' verdict on one node (with the pods nominated there); None for a node gone or
    a filter error."""
    ni = snap.get(name)
    if ni is None:
        return None
    if state.node_names is not None and name not in state.node_names:
        return False
    st = fwk.run_filter_with_nominated(state, pod, ni, nominated.get(name, ()))
    return None if st.code is Code.ERROR else st.is_success


def _batch_hint(
    fwk: Framework,
    state: CycleState,
    pod: Pod,
    snap: Snapshot,
    nominated: Mapping[str, Sequence[Pod]],
    batch: BatchRequest,
) -> str:
    """The node the previous equal pod's ranking offers (upstream's GetNodeHint), after PreFilter."""

    def rescore(names: Sequence[str]) -> dict[str, int] | None:
        nodes = [ni for n in names if (ni := snap.get(n)) is not None]
        if len(nodes) != len(names):
            return {}
        if not fwk.run_pre_score(state, pod, nodes).is_success:
            return None
        totals = fwk.run_score_totals(state, pod, nodes)
        return {ni.name: int(t) for ni, t in zip(nodes, totals, strict=True)}

    return batch.state.hint(
        batch.signature,
        bool(pod.nominated_node_name),
        batch.cycle,
        lambda name: _fits(fwk, state, pod, snap, nominated, name),
        rescore,
    )


def _top_two(
    feasible: Sequence[NodeInfo],
    totals: npt.NDArray[np.int64],
    rows: Sequence[tuple[str, npt.NDArray[np.int64]]],
    best: int,
) -> list[ScoredNode]:
    """The chosen node's and the runner-up's weighted score per plugin (the fast path's columns)."""
    picks = [best]
    if len(totals) > 1:
        rest = totals.copy()
        rest[best] = np.iinfo(np.int64).min
        picks.append(int(rest.argmax()))
    return [
        ScoredNode(feasible[i].name, int(totals[i]), weighted={name: int(col[i]) for name, col in rows}) for i in picks
    ]
