"""The scheduling cycle of one pod: snapshot → algorithm → PostFilter → assume/Reserve/Permit
(upstream's ``schedule_one.go``).

One implementation for the daemon, ``simulate`` and shadow mode; what differs is the ports
(:mod:`custom_scheduler.core.ports`). The cycle runs on one thread at a time (the daemon's
scheduling thread, or the offline driver), so the snapshot and the plugins' cycle state need no
locking. Its outcome is a :class:`Decision` value, and the pod ends the cycle in exactly one of:
handed to its binding cycle (:class:`~custom_scheduler.core.binding.BindingCycle`), requeued through
:meth:`SchedulingCycle.fail` (event ``FailedScheduling`` and the PodScheduled condition), or
skipped (not ours, being deleted, already assumed). A pod of a PodGroup is handed to the group
cycle (:class:`~custom_scheduler.core.group_cycle.GroupCycle`, upstream's
``schedule_one_podgroup.go``), which schedules its whole gang in this one cycle.

PostFilter's result is a value too: the nominated node goes to the nominator at once (so the next
cycles keep room for it), the victims and the lost nominations to the evictor port, which in the
daemon sends the API calls off this thread.

The random source (ties between equal scores, preemption's candidate offset) is ``rng``, owned
here and given to each cycle's :class:`CycleState`: a seed reproduces a run.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping

import structlog

from custom_scheduler.api.model import Pod
from custom_scheduler.core import queue as q
from custom_scheduler.core.algorithm import Algorithm, BatchRequest
from custom_scheduler.core.binding import Assumed, BindingCycle
from custom_scheduler.core.cache import Cache
from custom_scheduler.core.decision import Decision
from custom_scheduler.core.group_cycle import GroupCycle
from custom_scheduler.core.ports import Clock, EventSink, NominatorPort, Observer, QueuePort
from custom_scheduler.framework.batching import OpportunisticBatch
from custom_scheduler.framework.evictor import Evictor, NoEvictor
from custom_scheduler.framework.extender import extenders_of
from custom_scheduler.framework.instrument import PLUGIN_METRICS_SAMPLE_PERCENT
from custom_scheduler.framework.interface import PostFilterResult
from custom_scheduler.framework.runtime import Framework, FrameworkError
from custom_scheduler.framework.types import Code, CycleState, FitError, Snapshot

# Re-exported: the rest of the package reads a cycle's outcome as ``cycle.Decision``.
__all__ = ["Decision"]

log = structlog.get_logger("custom_scheduler.scheduler")

#: The Warning event's reason for an annotation no plugin of the pod's profile reads.
ANNOTATION_IGNORED = "AnnotationIgnored"


def run_post_filter(fwk: Framework, state: CycleState, pod: Pod, fit: FitError) -> PostFilterResult | None:
    """The PostFilter step of a failed cycle, shared with ``explain``: the profile's PostFilter
    plugins' decision (None when it has none), its message appended to ``fit``."""
    if not fwk.post_filter:
        return None
    post = fwk.run_post_filter(state, pod, fit.statuses)
    if post.message:
        fit.post_filter_msg = post.message
    return post


class SchedulingCycle:
    def __init__(
        self,
        *,
        profiles: Mapping[str, Framework],
        cache: Cache,
        queue: QueuePort,
        nominator: NominatorPort,
        events: EventSink | None,
        binding: BindingCycle,
        evictor: Evictor | None = None,
        algorithm: Algorithm | None = None,
        observer: Observer | None = None,
        rng: random.Random | None = None,
        clock: Clock = time.monotonic,
        on_decision: Callable[[Decision], None] | None = None,
        snapshot: Snapshot | None = None,
        batching: bool = True,
    ) -> None:
        self.profiles = dict(profiles)
        #: Opportunistic batching (upstream's OpportunisticBatching gate, beta, on): per profile,
        #: the ranking the last placed pod left for an equal next one. Cleared on a reload.
        self.batching = batching
        self.batches: dict[str, OpportunisticBatch] = {}
        self.cache = cache
        self.queue = queue
        self.nominator = nominator
        self.events = events
        self.binding = binding
        # One place records failures and requeues, for both cycles.
        self.fail = binding.fail
        self.evictor: Evictor = evictor if evictor is not None else NoEvictor()
        self.rng = rng if rng is not None else random.Random()
        self.algorithm = algorithm or Algorithm()
        self.algorithm.rng = self.rng
        self.observer = observer or Observer()
        self.clock = clock
        self.on_decision = on_decision
        self.snapshot = snapshot if snapshot is not None else Snapshot()
        # Per-plugin scores in the result (simulate reports ties); the daemon leaves it to the
        # algorithm, which keeps them only when they are cheap.
        self.detail: bool | None = None
        # Pods of a PodGroup are scheduled with their group (schedule_one_podgroup.go).
        self.group_cycle = GroupCycle(
            cache=cache,
            queue=queue,
            nominator=nominator,
            binding=binding,
            evictor=self.evictor,
            algorithm=self.algorithm,
            observer=self.observer,
            clock=clock,
            snapshot=self.snapshot,
            new_state=self.new_state,
            report=self._decided,
        )

    def new_state(self) -> CycleState:
        """A cycle's state; with metrics, one cycle in ten (drawn here) times each plugin
        (upstream's ``SetRecordPluginMetrics(rand.Intn(100) < pluginMetricsSamplePercent)``)."""
        state = CycleState(self.rng)
        if self.observer.samples_plugins:
            state.record_plugin_metrics = self.rng.randrange(100) < PLUGIN_METRICS_SAMPLE_PERCENT
        return state

    def schedule_one(self, qpi: q.QueuedPodInfo) -> Decision:
        with structlog.contextvars.bound_contextvars(
            pod=qpi.pod.key, uid=qpi.pod.uid, profile=qpi.pod.scheduler_name, attempt=qpi.attempts
        ):
            return self._decided(self._schedule_one(qpi))

    def _warn_ignored_annotations(self, fwk: Framework, pod: Pod) -> None:
        """A Warning event (once, at the pod's first attempt) for each annotation of a plugin its
        profile does not run: the operator asked for something nothing here will do."""
        for key in sorted(set(pod.annotations) & fwk.ignored_annotations.keys()):
            note = (
                f"annotation {key} is ignored: profile {fwk.profile_name} does not enable "
                f"{fwk.ignored_annotations[key]}"
            )
            log.warning("annotation_ignored", annotation=key, plugin=fwk.ignored_annotations[key])
            if self.events is not None:
                self.events.event(
                    pod,
                    type_="Warning",
                    reason=ANNOTATION_IGNORED,
                    action="Scheduling",
                    note=note,
                    controller=fwk.profile_name,
                )

    def _decided(self, d: Decision) -> Decision:
        if self.on_decision is not None:
            self.on_decision(d)
        return d

    def _schedule_one(self, qpi: q.QueuedPodInfo) -> Decision:
        pod = qpi.pod
        fwk = self.profiles.get(pod.scheduler_name)
        if fwk is None or pod.deleting or self.cache.get_pod(pod.uid) is not None:
            # Not ours any more, being deleted, or already assumed/bound: skip.
            self.queue.done(pod.uid)
            return Decision(pod.key, "skipped", uid=pod.uid)
        if qpi.attempts <= 1 and fwk.ignored_annotations and pod.annotations:
            self._warn_ignored_annotations(fwk, pod)
        gang = fwk.pod_group
        group = gang.group_of(pod) if gang is not None else None
        if gang is not None and group is not None:
            return self.group_cycle.schedule(fwk, gang, group, qpi)
        start = self.clock()
        self.cache.update_snapshot(self.snapshot)
        state = self.new_state()
        cycle = self.queue.scheduling_cycle
        batch = self._batch_request(fwk, pod, cycle)
        try:
            result = self.algorithm.schedule(
                fwk, state, pod, self.snapshot, self.nominator.by_node(), detail=self.detail, batch=batch
            )
        except FitError as fit:
            if batch is not None:
                batch.state.failed(cycle)
            post = self._post_filter(fwk, state, pod, fit)
            self.observer.algorithm(self.clock() - start)  # upstream's schedulingAlgorithm includes PostFilter
            msg = str(fit)
            qpi.unschedulable_plugins = fit.rejecting_plugins
            nominated = post.nominated_node_name if post is not None and post.status.is_success else None
            self.fail(fwk, qpi, cycle, "Unschedulable", msg, nominated=nominated, started=start)
            return Decision(pod.key, "unschedulable", message=msg, post_filter=post, uid=pod.uid, statuses=fit.statuses)
        except (FrameworkError, RuntimeError) as e:
            if batch is not None:
                batch.state.failed(cycle)
            self.observer.algorithm(self.clock() - start)
            self.fail(fwk, qpi, cycle, "SchedulerError", str(e), started=start)
            return Decision(pod.key, "error", message=str(e), uid=pod.uid)
        self.observer.algorithm(self.clock() - start)
        if batch is not None:
            batch.state.store(batch.signature, result.hint, result.node, result.ranking, cycle)

        d = self.assume_and_reserve(fwk, state, qpi, result.node, cycle, start)
        d.schedule = result
        return d

    def _batch_request(self, fwk: Framework, pod: Pod, cycle: int) -> BatchRequest | None:
        """This cycle's batching, when on and the profile can sign pods (every PreFilter, Filter,
        PreScore and Score plugin signs, and no extender is configured: upstream's rule)."""
        if not self.batching or not fwk.signer.enabled or extenders_of(fwk.handle):
            return None
        state = self.batches.get(fwk.profile_name)
        if state is None:
            state = self.batches[fwk.profile_name] = OpportunisticBatch(clock=self.clock)
        return BatchRequest(state, fwk.signer.sign(pod), cycle)

    def assume_and_reserve(
        self, fwk: Framework, state: CycleState, qpi: q.QueuedPodInfo, node: str, cycle: int, start: float
    ) -> Decision:
        """Assume ``qpi``'s pod on ``node``, run Reserve and Permit, and hand it to its binding
        cycle; undo and fail on a rejection. Permit ``WAIT`` still hands it over: the binding
        cycle waits (the pod is reported as ``waiting``)."""
        pod = qpi.pod
        assumed = self.cache.assume(pod, node)
        self.nominator.remove(pod)
        st = fwk.run_reserve(state, assumed, node)
        if st.is_success:
            st = fwk.run_permit(state, assumed, node)
        if not st.is_success and st.code is not Code.WAIT:
            fwk.run_unreserve(state, assumed, node)
            self.cache.forget(pod.uid)
            rejected = st.code in (Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)
            if rejected and st.plugin:
                qpi.unschedulable_plugins = {st.plugin}
            msg = st.message or "reserve/permit rejected the pod"
            self.fail(fwk, qpi, cycle, "Unschedulable" if rejected else "SchedulerError", msg, started=start)
            return Decision(pod.key, "unschedulable" if rejected else "error", node, msg, uid=pod.uid)
        # The attempt is counted as scheduled by the binding cycle, once bound (as upstream).
        self.binding.start(Assumed(fwk, state, qpi, assumed, node, cycle, self.clock(), attempt_start=start))
        return Decision(pod.key, "waiting" if st.code is Code.WAIT else "scheduled", node, uid=pod.uid)

    def _post_filter(self, fwk: Framework, state: CycleState, pod: Pod, fit: FitError) -> PostFilterResult | None:
        """PostFilter after a FitError; its message joins the FitError, its decision is carried out."""
        post = run_post_filter(fwk, state, pod, fit)
        if post is None:
            return None
        self.observer.preemption(fwk.profile_name, len(post.victims))
        if post.status.is_success and post.nominated_node_name:
            node = post.nominated_node_name
            for c in post.cleared_nominations:
                self.nominator.remove(c)
            self.nominator.add(pod, node)
            self.evictor.start(pod, node, post.victims, post.cleared_nominations)
        elif post.clear_nomination:
            # Nothing can make room: the pod should not keep a nomination it cannot use. (Other
            # failures keep it: waiting for its victims to terminate is one.)
            self.nominator.remove(pod)
            self.evictor.clear_nominations([pod])
        return post
