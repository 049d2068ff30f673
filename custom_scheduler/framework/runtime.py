"""The framework for one profile: runs each extension point's plugins in configured order.

It is the one place that turns plugin exceptions into ERROR statuses stamped with the plugin's
name, checks normalised scores are within [0, 100], and applies score weights. The scheduling
algorithm (which nodes to try, how many, which to pick) lives in :mod:`custom_scheduler.core.algorithm`;
the daemon, ``explain`` and ``simulate`` all drive the same Framework.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

import structlog

from custom_scheduler.api.model import Pod
from custom_scheduler.config.schema import PluginRef
from custom_scheduler.framework import filter_loop, masked_filter, prebind, scoring
from custom_scheduler.framework import instrument as ins
from custom_scheduler.framework import interface as fi
from custom_scheduler.framework.batching import Signer
from custom_scheduler.framework.nominated_views import NominatedViews as Views
from custom_scheduler.framework.registry import Registry
from custom_scheduler.framework.requeue import RequeueRules
from custom_scheduler.framework.scoring import FrameworkError, Rows, ScoredNode, Totals
from custom_scheduler.framework.types import SUCCESS, BindResult, Code, CycleState, NodeInfo, Snapshot, Status
from custom_scheduler.framework.waiting import WaitingPodMap

# Re-exported: the scheduling algorithm and the tools read these as ``runtime.X``.
__all__ = ["Framework", "FrameworkError", "ScoredNode"]

log = structlog.get_logger("custom_scheduler.framework.runtime")

_T = TypeVar("_T")


class Framework:
    """Plugin instances of one profile, ordered per extension point."""

    def __init__(
        self,
        profile_name: str,
        plugins: Mapping[str, Sequence[PluginRef]],
        plugin_args: Mapping[str, Any],
        registry: Registry,
        handle: fi.Handle,
        *,
        percentage_of_nodes_to_score: int | None = None,
        waiting: WaitingPodMap | None = None,
        recorder: ins.Recorder = ins.NO_RECORDER,
    ) -> None:
        self.profile_name = profile_name
        self.recorder = recorder  # where timings and plugin evaluations go (the daemon's metrics)
        if waiting is not None:  # else the default below: real clock, one timer thread
            self.waiting = waiting
        self.handle = handle
        self.percentage_of_nodes_to_score = percentage_of_nodes_to_score
        self._instances: dict[str, fi.Plugin] = {}

        def inst(name: str) -> Any:
            if name not in self._instances:
                spec = registry.get(name)
                if spec is None:
                    raise FrameworkError(f"profile {profile_name!r}: plugin {name!r} is not registered")
                self._instances[name] = spec.factory(plugin_args.get(name), handle)
            return self._instances[name]

        def point(name: str, proto: type) -> list[Any]:
            out = []
            for ref in plugins.get(name, ()):
                p = inst(ref.name)
                if not isinstance(p, proto):
                    raise FrameworkError(f"plugin {ref.name!r} does not implement {name}")
                out.append(p)
            return out

        self.pre_enqueue: list[fi.PreEnqueuePlugin] = point("preEnqueue", fi.PreEnqueuePlugin)
        qs = point("queueSort", fi.QueueSortPlugin)
        if len(qs) != 1:
            raise FrameworkError(f"profile {profile_name!r} needs exactly one queueSort plugin, has {len(qs)}")
        self.queue_sort: fi.QueueSortPlugin = qs[0]
        self.pre_filter: list[fi.PreFilterPlugin] = point("preFilter", fi.PreFilterPlugin)
        self.filter: list[fi.FilterPlugin] = point("filter", fi.FilterPlugin)
        self.post_filter: list[fi.PostFilterPlugin] = point("postFilter", fi.PostFilterPlugin)
        self.pre_score: list[fi.PreScorePlugin] = point("preScore", fi.PreScorePlugin)
        self.score: list[tuple[fi.ScorePlugin, int]] = [
            (inst(r.name), r.weight or 1)
            for r in plugins.get("score", ())  # any int32; 0 means 1, as upstream
        ]
        for p, _ in self.score:
            if not isinstance(p, fi.ScorePlugin):
                raise FrameworkError(f"plugin {p.name!r} does not implement score")
        # The declared fast paths (interface.py, "declared fast paths"), resolved once here.
        self._scorers = [scoring.Scorer.of(p, w) for p, w in self.score]
        self.reserve: list[fi.ReservePlugin] = point("reserve", fi.ReservePlugin)
        self.permit: list[fi.PermitPlugin] = point("permit", fi.PermitPlugin)
        self.pre_bind: list[fi.PreBindPlugin] = point("preBind", fi.PreBindPlugin)
        self.bind: list[fi.BindPlugin] = point("bind", fi.BindPlugin)
        self.post_bind: list[fi.PostBindPlugin] = point("postBind", fi.PostBindPlugin)
        self.pre_filter_extensions: list[fi.PreFilterExtensions] = [
            p for p in self.pre_filter if isinstance(p, fi.PreFilterExtensions)
        ]
        self._filter_masks: dict[str, fi.FilterMaskPlugin] = {
            p.name: p for p in self.filter if isinstance(p, fi.FilterMaskPlugin)
        }
        #: Which events may undo each plugin's rejections (the queue's queueing hints).
        self.requeue = RequeueRules.of(self._instances)
        #: Pod signatures for opportunistic batching.
        self.signer = Signer([*self.pre_filter, *self.filter, *self.pre_score, *(p for p, _ in self.score)])
        #: Pod annotation → the registered plugin that reads it, for the plugins this profile does
        #: not run: a pod setting one is told its annotation has no effect here.
        self.ignored_annotations: dict[str, str] = {
            a: s.name for s in registry.values() if s.name not in self._instances for a in s.pod_annotations
        }

    def plugin(self, name: str) -> fi.Plugin | None:
        return self._instances.get(name)

    # -- queueing ---------------------------------------------------------------------------------
    def run_pre_enqueue(self, pod: Pod) -> Status:
        """PreEnqueue plugins in order; the first non-success, stamped with its plugin, or SUCCESS.

        Called by the scheduling queue (under its lock) and by ``explain``/``simulate``. A plugin
        exception becomes an ERROR status, which gates the pod like a rejection does (upstream
        treats any non-success the same way and only logs errors louder).
        """
        for p in self.pre_enqueue:
            try:
                st = p.pre_enqueue(pod)
            except Exception as e:
                return Status.from_exception(e, p.name)
            if not st.is_success:
                return st.with_plugin(p.name)
        return SUCCESS

    # -- scheduling cycle -------------------------------------------------------------------------
    def run_pre_filter(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        """PreFilter in order (see :meth:`_run_pre`), noting which plugins narrowed the node set
        (``state.narrowed_by``, upstream's pluginsWithNodes): the FailedScheduling message names
        only those, and an empty intersection fails here with upstream's message."""
        narrowed: set[str] = set()

        def note(name: str, restrictions_before: int) -> Status:
            if state.restrictions == restrictions_before:
                return SUCCESS
            narrowed.add(name)
            state.narrowed_by = tuple(sorted(narrowed))
            if state.node_names:
                return SUCCESS
            if len(narrowed) == 1:
                return Status.unresolvable(f"node(s) didn't satisfy plugin {name}").with_plugin(name)
            names = " ".join(state.narrowed_by)
            return Status.unresolvable(f"node(s) didn't satisfy plugin(s) [{names}] simultaneously").with_plugin(name)

        return self._run_pre(self.pre_filter, ins.PRE_FILTER, state.skip_filter, state, pod, nodes, after=note)

    def run_filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        skip = state.skip_filter
        for p in self.filter:
            if p.name in skip:
                continue
            try:
                st = p.filter(state, pod, node_info)
            except Exception as e:
                return Status.from_exception(e, p.name)
            if st.code is not Code.SUCCESS:
                return st.with_plugin(p.name)
        return SUCCESS

    def filter_many(
        self,
        state: CycleState,
        pod: Pod,
        nodes: Sequence[NodeInfo],
        *,
        start: int,
        want: int,
        snap: Snapshot | None = None,
        need_statuses: bool = True,
    ) -> tuple[list[NodeInfo], dict[str, Status], int]:
        """:meth:`run_filter` over ``nodes`` from index ``start`` (wrapping) until ``want`` pass.

        The scheduling loop's hot path: the active filters are resolved once per pod, not per
        node. Returns (feasible nodes, statuses of rejected nodes, nodes processed); a plugin
        exception becomes an ERROR status for that node, as in :meth:`run_filter`.

        ``snap`` is the caller's statement that ``nodes`` *is* that snapshot's ``node_list``, so
        row ``i`` of its columns describes ``nodes[i]``; pass None when ``nodes`` is a subset, is
        reordered or holds copies. With it and ``need_statuses=False`` (the daemon: a success never
        reports why other nodes were rejected), the filters that declare
        :class:`~custom_scheduler.framework.interface.FilterMaskPlugin` are evaluated for all nodes
        at once on the snapshot's columns (:mod:`~custom_scheduler.framework.masked_filter`), the
        others per node on the rows the masks let through: the result is the per-node loop's, the
        feasible nodes as :class:`~custom_scheduler.framework.arrays.NodeRows` for the scorers.
        """
        timer = ins.FilterTimer() if state.record_plugin_metrics else None
        try:
            return self._filter_pass(state, pod, nodes, start, want, snap, need_statuses, timer)
        finally:
            if timer is not None:
                timer.report(self.recorder)

    def filter_whole_pass(
        self,
        state: CycleState,
        pod: Pod,
        snap: Snapshot,
        start: int,
        want: int,
        held: Mapping[str, NodeInfo],
        exempt: Collection[str] = (),
    ) -> tuple[dict[str, Status], list[int]] | None:
        """:func:`~custom_scheduler.framework.masked_filter.whole_pass` with this profile's
        filters, when fewer than ``want`` nodes pass."""
        timer = ins.FilterTimer() if state.record_plugin_metrics else None
        fm = (self.filter, self._filter_masks)
        filters, masks = fm if timer is None else timer.wrap_both(*fm)
        try:
            got = masked_filter.whole_pass(filters, masks, state, pod, snap, start, exempt, want, held)
            return None if got is None or len(got[1]) >= want else got
        finally:
            if timer is not None:
                timer.report(self.recorder)

    def _filter_pass(
        self,
        state: CycleState,
        pod: Pod,
        nodes: Sequence[NodeInfo],
        start: int,
        want: int,
        snap: Snapshot | None,
        need_statuses: bool,
        timer: ins.FilterTimer | None,
    ) -> tuple[list[NodeInfo], dict[str, Status], int]:
        """:meth:`filter_many`'s pass; with ``timer`` (a sampled cycle) every plugin is timed."""
        filters = self.filter if timer is None else timer.wrap(self.filter)
        if snap is not None and not need_statuses and snap.arrays is not None:
            if len(nodes) != len(snap.node_list):
                raise ValueError(f"filter_many: {len(nodes)} nodes given with a snapshot of {len(snap.node_list)}")
            masks = self._filter_masks if timer is None else timer.wrap_masks(self._filter_masks)
            got = masked_filter.filter_masked(filters, masks, state, pod, snap, start, want)
            if got is not None:
                return got
        return filter_loop.filter_nodes(filters, state, pod, nodes, start, want)

    def report_filter(
        self, state: CycleState, rejected: Iterable[Status], processed: int, code: Code, seconds: float
    ) -> None:
        """One cycle's Filter extension point, timed by the caller around the whole search for
        feasible nodes (as upstream's findNodesThatPassFilters times it, not per node); each
        active filter counts the nodes it was asked about, derived from the ``rejected``
        statuses of the ``processed`` nodes (:func:`~custom_scheduler.framework.instrument.filter_evaluations`)."""
        rec = self.recorder
        rec.extension_point(ins.FILTER, code, self.profile_name, seconds)
        names = [p.name for p in self.filter if p.name not in state.skip_filter]
        rec.evaluations(ins.FILTER, self.profile_name, ins.filter_evaluations(names, rejected, processed))

    def run_filter_with_nominated(
        self, state: CycleState, pod: Pod, node_info: NodeInfo, nominated: Sequence[Pod], views: Views | None = None
    ) -> Status:
        """Filter, and if higher-or-equal priority pods are nominated to this node, filter again
        with them added: the pod must fit both ways (kube-scheduler's RunFilterPluginsWithNominatedPods).
        ``views`` (snapshot nodes only) keeps that copy when no PreFilter extension sees each add."""
        add = [p for p in nominated if p.priority >= pod.priority and p.uid != pod.uid]
        if add:
            st2, exts = state.clone(), self.extensions_see_added_pods(state)
            ni = node_info.clone() if views is None or exts else views.with_pods(node_info, add)
            for other in add if views is None or exts else ():
                ni.add_pod(other)
                s = self.run_pre_filter_extension_add_pod(st2, pod, other, ni)
                if not s.is_success:
                    return s
            if not (st := self.run_filter(st2, pod, ni)).is_success:
                return st
        return self.run_filter(state, pod, node_info)

    def extensions_see_added_pods(self, state: CycleState) -> bool:
        """Whether a PreFilter extension must be told of each pod added to a node for ``state``'s
        pod (one whose PreFilter did not skip it): a copy of a node with nominated pods then needs
        its own state, and is made anew each time."""
        return any(e.name not in state.skip_filter for e in self.pre_filter_extensions)

    def run_pre_filter_extension_add_pod(
        self, state: CycleState, pod: Pod, pod_to_add: Pod, node_info: NodeInfo
    ) -> Status:
        """Tell the PreFilter extensions that ``pod_to_add`` joined ``node_info`` (upstream's
        ``RunPreFilterExtensionAddPod``); the first non-success, stamped with its plugin."""
        return self._run_pre_filter_extensions(state, lambda ext: ext.add_pod(state, pod, pod_to_add, node_info))

    def run_pre_filter_extension_remove_pod(
        self, state: CycleState, pod: Pod, pod_to_remove: Pod, node_info: NodeInfo
    ) -> Status:
        """Tell the PreFilter extensions that ``pod_to_remove`` left ``node_info`` (upstream's
        ``RunPreFilterExtensionRemovePod``); the first non-success, stamped with its plugin."""
        return self._run_pre_filter_extensions(state, lambda ext: ext.remove_pod(state, pod, pod_to_remove, node_info))

    def _run_pre_filter_extensions(self, state: CycleState, call: Callable[[fi.PreFilterExtensions], Status]) -> Status:
        """``call`` on each extension whose plugin's PreFilter did not skip this pod (it has no
        state to update), in order, until one fails."""
        for ext in self.pre_filter_extensions:
            if ext.name in state.skip_filter:
                continue
            st = call(ext)
            if not st.is_success:
                return st.with_plugin(ext.name)
        return SUCCESS

    def run_post_filter(self, state: CycleState, pod: Pod, statuses: Mapping[str, Status]) -> fi.PostFilterResult:
        """PostFilter plugins in order until one succeeds or errs (preemption); timed."""
        t = ins.now()
        r = fi.PostFilterResult(Status.unschedulable())
        try:
            r = self._run_post_filter(state, pod, statuses)
            return r
        finally:
            self.recorder.extension_point(ins.POST_FILTER, r.status.code, self.profile_name, ins.now() - t)

    def _run_post_filter(self, state: CycleState, pod: Pod, statuses: Mapping[str, Status]) -> fi.PostFilterResult:
        """Upstream's ``RunPostFilterPlugins``: in order until one succeeds, errs or answers
        UnschedulableAndUnresolvable (that one's result is the answer); otherwise every plugin's
        reasons joined (``deallocation of ResourceClaim completed, preemption: ...``), with the
        last result that decided something (a nomination to clear) and the first rejector."""
        result: fi.PostFilterResult | None = None
        reasons: list[str] = []
        rejector = ""
        timed = state.record_plugin_metrics
        for p in self.post_filter:
            t = ins.now() if timed else 0.0
            try:
                r = p.post_filter(state, pod, statuses)
            except Exception as e:
                r = fi.PostFilterResult(Status.from_exception(e, p.name))
            if timed:
                self.recorder.plugin_duration(p.name, ins.POST_FILTER, r.status.code, ins.now() - t)
            code = r.status.code
            if r.status.is_success or code in (Code.ERROR, Code.UNSCHEDULABLE_AND_UNRESOLVABLE):
                msg = r.message or r.status.message
                return dataclasses.replace(r, status=r.status.with_plugin(p.name), message=msg)
            if r.clear_nomination or r.victims or r.nominated_node_name:
                result = r
            reasons.extend(r.status.reasons)
            rejector = rejector or p.name
        st = Status(Code.UNSCHEDULABLE, tuple(reasons), rejector)
        if result is None:
            return fi.PostFilterResult(st, message=st.message)
        return dataclasses.replace(result, status=st, message=st.message)

    def run_pre_score(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        return self._run_pre(self.pre_score, ins.PRE_SCORE, state.skip_score, state, pod, nodes)

    def _run_pre(
        self,
        plugins: Sequence[Any],
        point: str,
        skipped: set[str],
        state: CycleState,
        pod: Pod,
        nodes: Sequence[NodeInfo],
        after: Callable[[str, int], Status] | None = None,
    ) -> Status:
        """PreFilter and PreScore: in order, stop at the first non-success (exceptions become
        ERROR statuses stamped with the plugin's name); a plugin answering SKIP goes into
        ``skipped`` (``state.skip_filter``/``skip_score``), so Filter or Score passes it by.
        ``after(plugin, restrictions before it)`` checks each successful plugin's effect.
        Timed as the extension point ``point``; each plugin that did not skip counts one
        evaluation, and in a sampled cycle each plugin is timed."""
        rec = self.recorder
        t = ins.now()
        asked: list[tuple[str, int]] = []
        st = SUCCESS
        try:
            st = self._run_pre_plugins(plugins, point, skipped, state, pod, nodes, after, asked)
            return st
        finally:
            rec.extension_point(point, st.code, self.profile_name, ins.now() - t)
            rec.evaluations(point, self.profile_name, asked)

    def _run_pre_plugins(
        self,
        plugins: Sequence[Any],
        point: str,
        skipped: set[str],
        state: CycleState,
        pod: Pod,
        nodes: Sequence[NodeInfo],
        after: Callable[[str, int], Status] | None,
        asked: list[tuple[str, int]],
    ) -> Status:
        method = "pre_filter" if point == ins.PRE_FILTER else "pre_score"
        timed = state.record_plugin_metrics
        for p in plugins:
            before = state.restrictions
            t = ins.now() if timed else 0.0
            try:
                st: Status = getattr(p, method)(state, pod, nodes)
            except Exception as e:
                st = Status.from_exception(e, p.name)
            if timed:
                self.recorder.plugin_duration(p.name, point, st.code, ins.now() - t)
            if st.is_skip:
                skipped.add(p.name)
                continue
            asked.append((p.name, 1))
            if not st.is_success:
                return st.with_plugin(p.name)
            if after is not None and not (st := after(p.name, before)).is_success:
                return st
        return SUCCESS

    def run_score(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> list[ScoredNode]:
        """Score, normalise and weight, keeping every plugin's detail (explain, simulate).

        Raises FrameworkError on a plugin error or an invalid score.
        """
        return self._scored(scoring.score_details, state, pod, nodes)

    def run_score_totals(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo], rows: Rows = None) -> Totals:
        """The weighted totals (the hot path; :meth:`run_score`'s arithmetic), ``rows`` each column."""
        return self._scored(functools.partial(scoring.score_totals, rows=rows), state, pod, nodes)

    def _scored(self, run: Callable[..., _T], state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> _T:
        """``run`` over the scorers, timed as the Score extension point, each active scorer
        counted as evaluated once per node (upstream counts each Score call)."""
        rec = self.recorder
        t = ins.now()
        code = Code.ERROR
        try:
            out = run(self._scorers, self.handle, rec, state, pod, nodes)
            code = Code.SUCCESS
            return out
        finally:
            rec.extension_point(ins.SCORE, code, self.profile_name, ins.now() - t)
            n = len(nodes)
            skip = state.skip_score
            rec.evaluations(
                ins.SCORE, self.profile_name, [(s.plugin.name, n) for s in self._scorers if s.plugin.name not in skip]
            )

    @property
    def has_score_plugins(self) -> bool:
        return bool(self.score)

    def _run_until_failure(
        self, plugins: Sequence[Any], method: str, point: str, state: CycleState, pod: Pod, node: str
    ) -> Status:
        """Reserve and PreBind: run in order, stop at the first non-success (exceptions become
        ERROR statuses stamped with the plugin's name); timed as ``point``."""
        t = ins.now()
        timed = state.record_plugin_metrics
        st = SUCCESS
        for p in plugins:
            tp = ins.now() if timed else 0.0
            try:
                st = getattr(p, method)(state, pod, node)
            except Exception as e:
                st = Status.from_exception(e, p.name)
            if timed:
                self.recorder.plugin_duration(p.name, point, st.code, ins.now() - tp)
            if not st.is_success:
                st = st.with_plugin(p.name)
                break
        self.recorder.extension_point(point, st.code, self.profile_name, ins.now() - t)
        return st

    def run_reserve(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        return self._run_until_failure(self.reserve, "reserve", ins.RESERVE, state, pod, node_name)

    def run_unreserve(self, state: CycleState, pod: Pod, node_name: str) -> None:
        """Every Reserve plugin's Unreserve, in reverse order. Unreserve has no result (nor has
        upstream's): a plugin that raises is logged and the others still run, so that one
        plugin's bug does not keep the others' reservations."""
        t = ins.now()
        for p in reversed(self.reserve):
            try:
                p.unreserve(state, pod, node_name)
            except Exception as e:
                _log_plugin_failure("Unreserve", p.name, pod, node_name, e)
        self.recorder.extension_point(ins.UNRESERVE, Code.SUCCESS, self.profile_name, ins.now() - t)

    @functools.cached_property
    def pod_group(self) -> fi.PodGroupPlugin | None:
        """The profile's gang plugin (the first enabled plugin that groups pods), if any."""
        for p in self._instances.values():
            if isinstance(p, fi.PodGroupPlugin):
                return p
        return None

    @functools.cached_property
    def waiting(self) -> WaitingPodMap:
        """Pods of this profile parked at Permit (the Handle lends it to plugins)."""
        return WaitingPodMap()

    def run_permit(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        """Every Permit plugin in order. A rejection or error ends it at once; WAIT answers are
        collected, and if any the pod is parked in :attr:`waiting` (its binding cycle then waits
        on :meth:`wait_on_permit`) and ``Code.WAIT`` is returned."""
        t = ins.now()
        st = self._run_permit(state, pod, node_name)
        self.recorder.extension_point(ins.PERMIT, st.code, self.profile_name, ins.now() - t)
        return st

    def _run_permit(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        waits: dict[str, float] = {}
        timed = state.record_plugin_metrics
        for p in self.permit:
            tp = ins.now() if timed else 0.0
            try:
                st, timeout = p.permit(state, pod, node_name)
            except Exception as e:
                st, timeout = Status.from_exception(e, p.name), 0.0
            if timed:
                self.recorder.plugin_duration(p.name, ins.PERMIT, st.code, ins.now() - tp)
            if st.code is Code.WAIT:
                waits[p.name] = float(timeout)
                continue
            if not st.is_success:
                return st.with_plugin(p.name)
        if waits:
            self.waiting.add(pod, node_name, waits)
            return Status(Code.WAIT, (f"waiting at Permit for {', '.join(sorted(waits))}",), min(waits))
        return SUCCESS

    def wait_on_permit(self, pod: Pod) -> Future[Status] | None:
        """The Permit wait of ``pod``, if it is parked: resolved by allow, reject or timeout. How
        long it waited and how it ended are recorded when it resolves (upstream's WaitOnPermit)."""
        fut = self.waiting.wait_future(pod.uid)
        if fut is not None:
            t = ins.now()
            rec = self.recorder
            fut.add_done_callback(lambda f: rec.permit_wait(f.result().code, ins.now() - t))
        return fut

    # -- binding cycle ----------------------------------------------------------------------------
    def run_pre_bind_pre_flights(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        """Whether any PreBind plugin will have work (:func:`prebind.pre_flights`), timed."""
        t = ins.now()
        out = prebind.pre_flights(self.pre_bind, state, pod, node_name)
        self.recorder.extension_point(ins.PRE_BIND_PRE_FLIGHT, out.code, self.profile_name, ins.now() - t)
        return out

    def run_pre_bind(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        return self._run_until_failure(self.pre_bind, "pre_bind", ins.PRE_BIND, state, pod, node_name)

    def run_pre_bind_pending(self, state: CycleState, pod: Pod, node_name: str) -> Future[Status] | None:
        """What the PreBind plugins left to wait for (``PreBindWaiter``), as one Future: SUCCESS
        once every wait succeeded, else the first failure stamped with its plugin. None when
        nothing waits, so the binding cycle goes straight on to Bind."""
        return prebind.pending(self.pre_bind, state, pod, node_name)

    def run_bind(self, state: CycleState, pod: Pod, node_name: str) -> BindResult:
        """The first Bind plugin that does not skip decides; an exception is an ERROR result."""
        t = ins.now()
        r = prebind.bind(self.bind, state, pod, node_name, self.recorder)
        code = Code.SUCCESS if r.is_bound else r.status.code
        self.recorder.extension_point(ins.BIND, code, self.profile_name, ins.now() - t)
        return r

    def run_post_bind(self, state: CycleState, pod: Pod, node_name: str) -> None:
        """Every PostBind plugin, in order. The pod is bound whatever they do (PostBind is
        informational, as upstream's): a plugin that raises is logged and the others still run."""
        t = ins.now()
        timed = state.record_plugin_metrics
        for p in self.post_bind:
            tp = ins.now() if timed else 0.0
            try:
                p.post_bind(state, pod, node_name)
            except Exception as e:
                _log_plugin_failure("PostBind", p.name, pod, node_name, e)
            if timed:
                self.recorder.plugin_duration(p.name, ins.POST_BIND, Code.SUCCESS, ins.now() - tp)
        self.recorder.extension_point(ins.POST_BIND, Code.SUCCESS, self.profile_name, ins.now() - t)


def _log_plugin_failure(extension_point: str, plugin: str, pod: Pod, node_name: str, error: Exception) -> None:
    """A plugin raised at an extension point that has no result to carry the error: log it with
    its traceback (it is a plugin bug) instead of ending the others' turn."""
    log.error(
        "plugin_failed",
        extension_point=extension_point,
        plugin=plugin,
        pod=pod.key,
        node=node_name,
        error=f"{type(error).__name__}: {error}"[:300],
        exc_info=error,
    )
