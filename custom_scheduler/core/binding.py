"""The binding cycle of one assumed pod: wait at Permit → PreBind → Bind → PostBind.

It runs concurrently with later scheduling cycles (kube-scheduler's per-pod binding goroutine). A
step that must wait for something outside (a Permit wait for the rest of a gang, VolumeBinding's
PreBind waiting for the PV controller) leaves a Future and the rest of the cycle runs as its
callback, so a waiting pod holds no thread. Every path ends in exactly one of: bound (event
``Scheduled``, ``queue.done``), requeued through ``fail`` (the reservation undone and the cache's
assumption forgotten first), dropped (the pod is gone or bound elsewhere), or fenced (leadership
lost: undone in memory only, nothing written).

Routing is by value: Permit's Status code, the :class:`~custom_scheduler.framework.types.BindResult`
outcome; never by message text.

Modes: ``api`` (the daemon) runs PreBind/Bind/PostBind against the cluster; ``record`` (shadow
mode, ``simulate``) stops after Permit, keeps the decision in the cache as bound and tells
``confirm`` (simulate feeds it back as the watch would).
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import structlog

from custom_scheduler.api.model import Pod
from custom_scheduler.core import queue as q
from custom_scheduler.core.cache import Cache
from custom_scheduler.core.ports import Clock, EventSink, Observer, QueuePort
from custom_scheduler.framework import cluster_events as ce
from custom_scheduler.framework.extender import EXTENDER_NAME, extenders_of
from custom_scheduler.framework.fence import Fence
from custom_scheduler.framework.runtime import Framework
from custom_scheduler.framework.types import BindOutcome, BindResult, Code, CycleState, Status

log = structlog.get_logger("custom_scheduler.scheduler")


class Failures:
    """Record a failed attempt on the pod (event ``FailedScheduling``, the PodScheduled
    condition) and requeue it: to unschedulable when plugins rejected it, else to backoff. Shared
    by the scheduling and the binding cycle."""

    def __init__(
        self,
        queue: QueuePort,
        events: EventSink | None,
        observer: Observer | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        self.queue = queue
        self.events = events
        self.observer = observer if observer is not None else Observer()
        self.clock = clock

    def __call__(
        self,
        fwk: Framework,
        qpi: q.QueuedPodInfo,
        cycle: int,
        reason: str,
        message: str,
        *,
        nominated: str | None = None,
        started: float | None = None,
    ) -> None:
        """``started``: when the failed attempt's cycle started; given, the attempt is counted
        (``unschedulable`` or ``error``), as upstream's handleSchedulingFailure counts it."""
        pod = qpi.pod
        event = "pod_unschedulable" if reason == "Unschedulable" else "pod_schedule_error"
        if started is not None:
            result = "unschedulable" if reason == "Unschedulable" else "error"
            self.observer.attempt(fwk.profile_name, result, self.clock() - started)
        log.info(event, pod=pod.key, reason=message)
        if reason == "Unschedulable" and qpi.unschedulable_plugins:
            self.queue.add_unschedulable_if_not_present(qpi, cycle)
        else:
            self.queue.add_backoff(qpi)
        self.queue.done(pod.uid)
        if self.events is not None:
            self.events.event(
                pod,
                type_="Warning",
                reason="FailedScheduling",
                action="Scheduling",
                note=message,
                controller=fwk.profile_name,
            )
            self.events.pod_condition(pod, status="False", reason=reason, message=message, nominated=nominated)


@dataclass(slots=True)
class Assumed:
    """A pod the scheduling cycle assumed on ``node`` and handed to its binding cycle."""

    fwk: Framework
    state: CycleState
    qpi: q.QueuedPodInfo
    pod: Pod
    node: str
    cycle: int
    started: float
    """When the binding cycle was handed the pod (the binding latency's start)."""
    attempt_start: float | None = None
    """When the scheduling cycle started (the attempt latency's start); a gang member's binding
    cycle has none and measures from :attr:`started`."""

    @property
    def since(self) -> float:
        return self.started if self.attempt_start is None else self.attempt_start


class Executor:
    """Where binding cycles run. ``submit`` is called on the scheduling thread (and may block it
    when too many binds are queued); ``resume`` continues a cycle after a wait, from whatever
    thread resolved it."""

    def submit(self, fn: Callable[[], None]) -> None:
        fn()

    def resume(self, fn: Callable[[], None]) -> None:
        fn()

    def shutdown(self, timeout: float) -> bool:
        return True


class PoolExecutor(Executor):
    """The daemon's: ``workers`` threads and at most ``workers * 8`` cycles waiting for one, so a
    burst of binds applies back-pressure to the scheduling thread instead of queueing unboundedly."""

    def __init__(self, workers: int = 16) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="bind")
        self._slots = threading.Semaphore(workers * 8)

    def submit(self, fn: Callable[[], None]) -> None:
        self._slots.acquire()
        ctx = contextvars.copy_context()  # the log context (pod, profile, attempt)

        def run() -> None:
            try:
                ctx.run(fn)
            finally:
                # A cycle that handed off to a wait gives its slot back too: a PreBind wait of
                # up to bindTimeoutSeconds must not stall the scheduling thread.
                self._slots.release()

        try:
            self._pool.submit(run)
        except RuntimeError:
            self._slots.release()
            raise

    def resume(self, fn: Callable[[], None]) -> None:
        ctx = contextvars.copy_context()
        try:
            self._pool.submit(ctx.run, fn)
        except RuntimeError:  # shut down: finish inline
            ctx.run(fn)

    def shutdown(self, timeout: float) -> bool:
        self._pool.shutdown(wait=False, cancel_futures=False)
        drained = threading.Event()

        def drain() -> None:
            self._pool.shutdown(wait=True)
            drained.set()

        threading.Thread(target=drain, name="bind-drain", daemon=True).start()
        return drained.wait(max(0.0, timeout))


class BindingCycle:
    def __init__(
        self,
        *,
        cache: Cache,
        queue: QueuePort,
        events: EventSink | None,
        fence: Fence,
        observer: Observer,
        executor: Executor,
        record_only: bool = False,
        confirm: Callable[[Pod, str], None] | None = None,
        clock: Clock = time.monotonic,
        nominate_for_expectation: bool = True,
    ) -> None:
        self.cache = cache
        self.nominate_for_expectation = nominate_for_expectation
        self.queue = queue
        self.events = events
        self.fence = fence
        self.observer = observer
        self.fail = Failures(queue, events, observer, clock)
        # Binding cycles started and not ended, waits included (upstream's goroutines{operation="binding"}).
        self._in_flight: set[int] = set()
        self.executor = executor
        self.record_only = record_only
        self.confirm = confirm
        self.clock = clock

    def start(self, a: Assumed) -> None:
        """Hand ``a`` to the executor (the scheduling thread's last step for a pod)."""
        self._in_flight.add(id(a))
        self.executor.submit(lambda: self._guard(a, self._run))

    def in_flight(self) -> int:
        """Binding cycles running or waiting (Permit, PreBind), for the goroutines gauge."""
        return len(self._in_flight)

    def _ended(self, a: Assumed) -> None:
        self._in_flight.discard(id(a))

    def _guard(self, a: Assumed, step: Callable[[Assumed], None]) -> None:
        try:
            step(a)
        except Exception:
            self._crashed(a)

    def _run(self, a: Assumed) -> None:
        if not self.fence.held:  # queued before the loss: cancelled, nothing is written
            self._fenced(a)
            return
        if not self._nominate_if_slow(a):
            return
        wait = a.fwk.wait_on_permit(a.pod)
        if wait is not None:
            self._after(wait, a, self._after_permit)
            return
        self._after_permit(a, None)

    def _nominate_if_slow(self, a: Assumed) -> bool:
        """NominatedNodeNameForExpectation (beta, on since 1.35): when PreBind will have work
        (volumes, devices) or the pod waits at Permit, write ``status.nominatedNodeName`` first,
        so components such as the cluster autoscaler see where the pod is going before it is
        bound; a pod bound at once gets no extra write. False when a PreBindPreFlight check
        failed (the attempt has then been failed)."""
        if not self.nominate_for_expectation or self.record_only:
            return True
        st = a.fwk.run_pre_bind_pre_flights(a.state, a.pod, a.node)
        if st.code is Code.ERROR:
            self._rejected(a, st, "PreBindPreFlight")
            return False
        if (st.is_success or a.fwk.waiting.get(a.pod.uid) is not None) and self.events is not None:
            self.events.nominate(a.pod, a.node)
        return True

    def _after(self, fut: Future[Status], a: Assumed, then: Callable[[Assumed, Status | None], None]) -> None:
        """Continue with ``then(a, status)`` once ``fut`` resolves: inline when it already has,
        else as its callback, on the executor."""
        if fut.done():
            then(a, fut.result())
            return
        ctx = contextvars.copy_context()
        fut.add_done_callback(
            lambda f: self.executor.resume(lambda: ctx.run(self._guard, a, lambda x: then(x, f.result())))
        )

    def _after_permit(self, a: Assumed, st: Status | None) -> None:
        if not self.fence.held:
            self._fenced(a)
            return
        if st is not None and not st.is_success:
            self._rejected(a, st, "Permit")
            return
        if self.record_only:
            self._recorded(a)
            return
        # Only resources this pod asks for: a node already over-committed on something else (by
        # pods bound without a scheduler) must not block pods that need none of it.
        # Not those an extender manages for the scheduler (``ignoredByScheduler``): nodes need not have them.
        ignored = extenders_of(a.fwk.handle).ignored_resources
        # Nor an extended resource a DeviceClass backs (DRAExtendedResource): DynamicResources
        # allocated devices for it, the node need not list it.
        dra = getattr(a.fwk.handle, "dra", None) if a.pod.extended_containers else None
        over = [
            r
            for r in self.cache.overcommitted(a.node)
            if (r == "pods" or a.pod.requests.get(r) > 0)
            and r not in ignored
            and (dra is None or dra.extended_resource_class(r) is None)
        ]
        if over:
            # Another scheduler bound pods here after our decision (the watch told the cache):
            # binding now would over-commit the node. Give the room back and retry later.
            log.info("bind_aborted_overcommit", pod=a.pod.key, node=a.node, resources=over)
            a.fwk.run_unreserve(a.state, a.pod, a.node)
            self.cache.forget(a.pod.uid)
            msg = f"node {a.node} is over-committed on {', '.join(over)}"
            self.fail(a.fwk, a.qpi, a.cycle, "SchedulerError", msg, started=a.since)
            self._ended(a)
            return
        st = a.fwk.run_pre_bind(a.state, a.pod, a.node)
        if not st.is_success:
            self._rejected(a, st, "PreBind")
            return
        pending = a.fwk.run_pre_bind_pending(a.state, a.pod, a.node)
        if pending is not None:
            self._after(pending, a, self._after_pre_bind)
            return
        self._after_pre_bind(a, None)

    def _after_pre_bind(self, a: Assumed, st: Status | None) -> None:
        if st is not None and not st.is_success:
            self._rejected(a, st, "PreBind")
            return
        if not self.fence.held:
            self._fenced(a)
            return
        r = self._bind(a)
        if r.is_bound:
            self.cache.finish_binding(a.pod.uid)
            self.observer.bound(a.fwk.profile_name, self.clock() - a.started, r.retries)
            self._scheduled(a)
            if self.events is not None:
                self.events.event(
                    a.pod,
                    type_="Normal",
                    reason="Scheduled",
                    action="Binding",
                    note=f"Successfully assigned {a.pod.namespace}/{a.pod.name} to {a.node}",
                    controller=a.fwk.profile_name,
                )
            a.fwk.run_post_bind(a.state, a.pod, a.node)
            log.info("pod_bound", pod=a.pod.key, node=a.node, seconds=round(self.clock() - a.started, 4))
            self.queue.done(a.pod.uid)
            self._ended(a)
            return
        if r.outcome is BindOutcome.FENCED or not self.fence.held:
            self._fenced(a)
            return
        if r.outcome in (BindOutcome.GONE, BindOutcome.CONFLICT):
            self._undo(a)
            self._room_freed(a, exclude_self=False)
            log.info("bind_abandoned", pod=a.pod.key, node=a.node, outcome=r.outcome.value, reason=r.status.message)
            self.queue.delete(a.pod)
            self.queue.done(a.pod.uid)
            self.observer.attempt(a.fwk.profile_name, "error", self.clock() - a.since)  # upstream: a failed bind
            self._ended(a)
            return
        self._rejected(a, r.status, "Bind")

    def _bind(self, a: Assumed) -> BindResult:
        """``bind``: an interested binder extender binds instead of the Bind plugins (once: its
        failure is the bind's failure, never followed by a plugin's bind); else the plugins."""
        taken, err = extenders_of(a.fwk.handle).bind(a.pod, a.node)
        if not taken:
            return a.fwk.run_bind(a.state, a.pod, a.node)
        if err is None:
            return BindResult(BindOutcome.BOUND)
        return BindResult(BindOutcome.ERROR, Status.as_error(str(err), EXTENDER_NAME))

    def _recorded(self, a: Assumed) -> None:
        """Record-only mode: the decision stays in the cache as bound; nothing is written."""
        self.cache.finish_binding(a.pod.uid)
        self._scheduled(a)
        log.info("pod_scheduled_dry_run", pod=a.pod.key, node=a.node)
        self.queue.done(a.pod.uid)
        self._ended(a)
        if self.confirm is not None:
            self.confirm(a.pod, a.node)

    def _scheduled(self, a: Assumed) -> None:
        """The attempt succeeded (upstream counts it once bound, not when handed to binding):
        its latency from the cycle's start, the pod's attempts and its time since the first."""
        now = self.clock()
        first = a.qpi.initial_attempt_timestamp
        self.observer.attempt(a.fwk.profile_name, "scheduled", now - a.since)
        self.observer.pod_scheduled(a.fwk.profile_name, a.qpi.attempts, None if first is None else now - first)

    def _undo(self, a: Assumed) -> None:
        a.fwk.run_unreserve(a.state, a.pod, a.node)
        self.cache.forget(a.pod.uid)

    def _room_freed(self, a: Assumed, *, exclude_self: bool) -> None:
        """The room the pod held is free again, as if an assigned pod was deleted."""
        uid = a.pod.uid
        self.queue.move_all_to_active_or_backoff(
            ce.ASSIGNED_POD_DELETE, a.pod, None, (lambda p: p.uid != uid) if exclude_self else None
        )

    def _rejected(self, a: Assumed, st: Status, stage: str) -> None:
        self._undo(a)
        if st.code in (Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE):
            log.info("binding_rejected", pod=a.pod.key, node=a.node, stage=stage, plugin=st.plugin, reason=st.message)
            if st.plugin:
                a.qpi.unschedulable_plugins = {st.plugin}
            self.fail(a.fwk, a.qpi, a.cycle, "Unschedulable", st.message, started=a.since)
            self._ended(a)
            # After the requeue, and not for the pod itself (upstream defers this move too): a
            # move request recorded first would send the rejected pod to backoff at once.
            self._room_freed(a, exclude_self=True)
            return
        self._room_freed(a, exclude_self=False)
        log.warning("bind_failed", pod=a.pod.key, node=a.node, stage=stage, reason=st.message)
        # An extender's error is upstream's text as it is (it names the extender); a plugin's says which.
        msg = st.message if st.plugin == EXTENDER_NAME else f"running {stage} plugin {st.plugin!r}: {st.message}"
        self.fail(a.fwk, a.qpi, a.cycle, "SchedulerError", msg, started=a.since)
        self._ended(a)

    def _fenced(self, a: Assumed) -> None:
        """Leadership is gone: undo the reservation in memory only. No event, no condition, no
        requeue: this process is about to exit, and the pod belongs to the next leader."""
        a.fwk.run_unreserve(a.state, a.pod, a.node)
        self.cache.forget(a.pod.uid)
        self.queue.done(a.pod.uid)
        self._ended(a)
        log.info("bind_fenced", pod=a.pod.key, node=a.node)

    def _crashed(self, a: Assumed) -> None:
        """A binding cycle raised: undo what Reserve assumed (volumes, devices) as a failed bind
        would, so nothing stays assumed, then retry the pod after a backoff."""
        log.exception("binding_cycle_crashed", pod=a.pod.key)
        try:
            a.fwk.run_unreserve(a.state, a.pod, a.node)
        except Exception:
            log.exception("unreserve_crashed", pod=a.pod.key)
        self.cache.forget(a.pod.uid)
        self.queue.add_backoff(a.qpi)
        self.queue.done(a.pod.uid)
        self._ended(a)
