"""The scheduling loop: pop → snapshot → decide → assume → bind (asynchronously).

Threads and who owns what:

- informer threads (pods, nodes) call the ``on_*`` sinks here, which update the cache and queue;
- one scheduling thread runs :meth:`Scheduler.schedule_one` in a loop: it alone reads snapshots
  and runs Filter/Score, so plugins need no locking;
- a bounded pool runs binding cycles (PreBind, Bind, PostBind) concurrently with later
  scheduling cycles, exactly as kube-scheduler's per-pod binding goroutines; a PreBind that must
  wait for the cluster (VolumeBinding: the PV controller) leaves a Future, and the rest of that
  binding cycle runs as its callback, so waiting pods hold no pool thread;
- the API writer thread (events, pod conditions) and the queue's flush loop.

Fencing: the scheduler holds the daemon's :class:`~custom_scheduler.fence.Fence`. Once the elector
revokes it the loop pops no more pods, binding cycles still queued in the pool end without an API
call when they start, and one in flight stops before its next write (PreBind; the binder asks the
fence right before each POST). The pod is forgotten and left alone: the process exits and the new
leader schedules it.

Every popped pod reaches ``queue.done`` on every path. A pod is assumed in the cache before its
binding starts, so the next cycle already sees the node as used; a failed bind forgets it.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import structlog

from custom_scheduler.core import queue as q
from custom_scheduler.core.algorithm import Algorithm
from custom_scheduler.core.cache import Cache
from custom_scheduler.core.events import Writer
from custom_scheduler.core.nominator import Nominator
from custom_scheduler.fence import Fence
from custom_scheduler.framework.runtime import Framework, FrameworkError
from custom_scheduler.framework.types import Code, CycleState, FitError, Snapshot, Status
from custom_scheduler.model import Node, Pod
from custom_scheduler.plugins import default_binder

log = structlog.get_logger("custom_scheduler.scheduler")


class Observer:
    """Hooks for metrics; the default does nothing (tests and simulate need none)."""

    def attempt(self, profile: str, result: str, seconds: float) -> None: ...

    def bound(self, profile: str, seconds: float, retries: int) -> None: ...

    def pending(self, counts: Mapping[str, int]) -> None: ...


@dataclass(slots=True)
class Decision:
    """What happened to one pod in one cycle (for logs, shadow mode and tests)."""

    pod: str
    result: str  # scheduled | unschedulable | error | skipped
    node: str = ""
    message: str = ""


class Scheduler:
    def __init__(
        self,
        *,
        profiles: Mapping[str, Framework],
        cache: Cache,
        queue: q.SchedulingQueue,
        writer: Writer | None,
        algorithm: Algorithm | None = None,
        nominator: Nominator | None = None,
        bind_workers: int = 16,
        dry_run: bool = False,
        observer: Observer | None = None,
        on_decision: Callable[[Decision], None] | None = None,
        fence: Fence | None = None,
    ) -> None:
        self.profiles = dict(profiles)
        self.cache = cache
        self.queue = queue
        self.writer = writer
        self.algorithm = algorithm or Algorithm()
        self.nominator = nominator or Nominator()
        self.snapshot = Snapshot()
        self.dry_run = dry_run
        self.observer = observer or Observer()
        self.on_decision = on_decision
        self.fence = fence if fence is not None else Fence()
        self._binders = ThreadPoolExecutor(max_workers=bind_workers, thread_name_prefix="bind")
        self._inflight = threading.Semaphore(bind_workers * 8)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._binding: set[str] = set()

    # -- informer sinks ---------------------------------------------------------------------------
    def responsible_for(self, pod: Pod) -> bool:
        return pod.scheduler_name in self.profiles

    def pre_enqueue(self, pod: Pod) -> str | None:
        """The queue's PreEnqueue check: the pod's profile's PreEnqueue plugins. Returns the name
        of the plugin that rejected the pod (the queue then keeps it gated), or None.

        Runs under the queue's lock, on informer and flush threads, and reads ``profiles`` at
        each call, so a config reload's new plugins apply to the next check. Pods of no profile
        pass: the scheduling cycle skips them anyway.
        """
        fwk = self.profiles.get(pod.scheduler_name)
        if fwk is None or not fwk.pre_enqueue:
            return None
        st = fwk.run_pre_enqueue(pod)
        if st.is_success:
            return None
        if st.code is Code.ERROR:
            log.error("pre_enqueue_failed", pod=pod.key, plugin=st.plugin, error=st.message)
        else:
            log.debug("pod_gated", pod=pod.key, plugin=st.plugin, reason=st.message)
        return st.plugin

    def on_pod_add(self, pod: Pod) -> None:
        if pod.node_name:
            self.cache.add_pod(pod)
            self.nominator.remove(pod)
            self.queue.move_all_to_active_or_backoff("AssignedPodAdd", _may_need_other_pods)
        elif self.responsible_for(pod):
            if pod.nominated_node_name:
                self.nominator.add(pod, pod.nominated_node_name)
            self.queue.add(pod)

    def on_pod_update(self, old: Pod, new: Pod) -> None:
        if new.node_name:
            self.cache.update_pod(new)
            if not old.node_name:
                # Bound (by us, confirmed; or by someone else): leaves the queue, enters the cache.
                self.queue.delete(new)
                self.nominator.remove(new)
                self.queue.move_all_to_active_or_backoff("AssignedPodAdd", _may_need_other_pods)
            if old.labels != new.labels:
                self.queue.move_all_to_active_or_backoff("AssignedPodUpdate")
        elif self.responsible_for(new):
            if self.cache.is_assumed(new.uid):
                return  # our bind is in flight; the watch has not caught up yet
            if new.nominated_node_name:
                self.nominator.add(new, new.nominated_node_name)
            elif old.nominated_node_name:
                # Cleared (by a preemption that outranked it, or one that found no node): drop
                # the reservation. An update with no name on either side keeps an in-memory
                # nomination whose status patch has not landed yet.
                self.nominator.remove(new)
            self.queue.update(new)

    def on_pod_delete(self, pod: Pod) -> None:
        self.nominator.remove(pod)
        if pod.node_name or self.cache.get_pod(pod.uid) is not None:
            self.cache.remove_pod(pod)
            self.queue.move_all_to_active_or_backoff("AssignedPodDelete")
        self.queue.delete(pod)

    def on_node_add(self, node: Node) -> None:
        self.cache.add_node(node)
        self.queue.move_all_to_active_or_backoff("NodeAdd")

    def on_node_update(self, old: Node, new: Node) -> None:
        self.cache.update_node(new)
        if (old.allocatable, old.labels, old.taints, old.unschedulable) != (
            new.allocatable,
            new.labels,
            new.taints,
            new.unschedulable,
        ):
            self.queue.move_all_to_active_or_backoff("NodeUpdate")

    def on_node_delete(self, node: Node) -> None:
        self.cache.remove_node(node.name)

    # -- the loop ---------------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        """Schedule until ``stop`` is set."""
        self._stop = stop
        while not stop.is_set() and self.fence.held:
            qpi = self.queue.pop(timeout=0.5)
            if qpi is None:
                continue
            try:
                self.schedule_one(qpi)
            except Exception:
                log.exception("schedule_one_crashed", pod=qpi.pod.key)
                self.queue.add_backoff(qpi)
                self.queue.done(qpi.pod.uid)

    def schedule_one(self, qpi: q.QueuedPodInfo) -> Decision:
        with structlog.contextvars.bound_contextvars(
            pod=qpi.pod.key, uid=qpi.pod.uid, profile=qpi.pod.scheduler_name, attempt=qpi.attempts
        ):
            return self._schedule_one(qpi)

    def _schedule_one(self, qpi: q.QueuedPodInfo) -> Decision:
        pod = qpi.pod
        fwk = self.profiles.get(pod.scheduler_name)
        if fwk is None or pod.deleting or self.cache.get_pod(pod.uid) is not None:
            # Not ours any more, being deleted, or already assumed/bound: skip.
            self.queue.done(pod.uid)
            return self._decided(Decision(pod.key, "skipped"))
        start = time.monotonic()
        self.cache.update_snapshot(self.snapshot)
        state = CycleState()
        cycle = self.queue.scheduling_cycle
        try:
            result = self.algorithm.schedule(fwk, state, pod, self.snapshot, self.nominator.by_node())
        except FitError as fit:
            post = fwk.run_post_filter(state, pod, fit.statuses) if fwk.post_filter else None
            if post is not None and post.message:
                fit.post_filter_msg = post.message
            nominated = post.nominated_node_name if post is not None and post.status.is_success else None
            if nominated:
                self.nominator.add(pod, nominated)
            msg = str(fit)
            qpi.unschedulable_plugins = fit.rejecting_plugins
            self._fail(fwk, qpi, cycle, "Unschedulable", msg, nominated=nominated)
            self.observer.attempt(fwk.profile_name, "unschedulable", time.monotonic() - start)
            return self._decided(Decision(pod.key, "unschedulable", message=msg))
        except (FrameworkError, RuntimeError) as e:
            self._fail(fwk, qpi, cycle, "SchedulerError", str(e))
            self.observer.attempt(fwk.profile_name, "error", time.monotonic() - start)
            return self._decided(Decision(pod.key, "error", message=str(e)))

        node = result.node
        assumed = self.cache.assume(pod, node)
        self.nominator.remove(pod)
        st = fwk.run_reserve(state, assumed, node)
        if st.is_success:
            st = fwk.run_permit(state, assumed, node)
        if not st.is_success:
            fwk.run_unreserve(state, assumed, node)
            self.cache.forget(pod.uid)
            self._fail(fwk, qpi, cycle, "SchedulerError", st.message or "reserve/permit rejected the pod")
            self.observer.attempt(fwk.profile_name, "error", time.monotonic() - start)
            return self._decided(Decision(pod.key, "error", message=st.message))

        self.observer.attempt(fwk.profile_name, "scheduled", time.monotonic() - start)
        decision = Decision(pod.key, "scheduled", node)
        if self.dry_run:
            # Shadow mode: keep the decision in the cache (so later decisions account for it) and
            # never write to the API server.
            self.cache.finish_binding(pod.uid)
            self.queue.done(pod.uid)
            log.info("pod_scheduled_dry_run", pod=pod.key, node=node, evaluated=result.evaluated)
            return self._decided(decision)
        self._inflight.acquire()
        # Copy the log context (pod, profile, attempt) into the binding thread.
        ctx = contextvars.copy_context()
        self._binders.submit(ctx.run, self._binding_cycle, fwk, state, qpi, assumed, node, cycle, time.monotonic())
        return self._decided(decision)

    def _decided(self, d: Decision) -> Decision:
        if self.on_decision is not None:
            self.on_decision(d)
        return d

    # -- binding cycle (pool thread) --------------------------------------------------------------
    def _binding_cycle(
        self, fwk: Framework, state: CycleState, qpi: q.QueuedPodInfo, pod: Pod, node: str, cycle: int, t0: float
    ) -> None:
        try:
            if not self.fence.held:  # queued before the loss: cancelled, nothing is written
                self._fenced(fwk, state, qpi, pod, node)
                return
            # Only resources this pod asks for: a node already over-committed on something else (by
            # pods bound without a scheduler) must not block pods that need none of it.
            over = [r for r in self.cache.overcommitted(node) if r == "pods" or pod.requests.get(r) > 0]
            if over:
                # Another scheduler bound pods here after our decision (the watch told the cache):
                # binding now would over-commit the node. Give the room back and retry later.
                log.info("bind_aborted_overcommit", pod=pod.key, node=node, resources=over)
                self.cache.forget(pod.uid)
                self._fail(fwk, qpi, cycle, "SchedulerError", f"node {node} is over-committed on {', '.join(over)}")
                return
            st = fwk.run_pre_bind(state, pod, node)
            if st.is_success:
                pending = fwk.run_pre_bind_pending(state, pod, node)
                if pending is not None:
                    # PreBind waits for the cluster (VolumeBinding: the PV controller binding the
                    # claims), possibly for minutes. The rest of the cycle becomes a callback of
                    # that wait, so this pool thread goes back to other pods' binds meanwhile.
                    ctx = contextvars.copy_context()
                    pending.add_done_callback(
                        lambda f: self._resume_binding(ctx, fwk, state, qpi, pod, node, cycle, t0, f.result())
                    )
                    return
            self._finish_binding(fwk, state, qpi, pod, node, cycle, t0, st)
        except Exception:
            self._binding_crashed(fwk, state, qpi, pod, node)
        finally:
            # A handed-off cycle gives its slot back too: the slots bound how many binds wait for
            # the pool, and a PreBind wait of up to bindTimeoutSeconds must not stall the
            # scheduling thread once enough volume pods wait at the same time.
            self._inflight.release()

    def _resume_binding(
        self,
        ctx: contextvars.Context,
        fwk: Framework,
        state: CycleState,
        qpi: q.QueuedPodInfo,
        pod: Pod,
        node: str,
        cycle: int,
        t0: float,
        st: Status,
    ) -> None:
        """The binding cycle after a PreBind wait resolved (called by whoever resolved it): Bind
        and the rest run on the pool again, or inline once the pool has shut down."""

        def run() -> None:
            try:
                self._finish_binding(fwk, state, qpi, pod, node, cycle, t0, st)
            except Exception:
                self._binding_crashed(fwk, state, qpi, pod, node)

        try:
            self._binders.submit(ctx.run, run)
        except RuntimeError:
            ctx.run(run)

    def _binding_crashed(self, fwk: Framework, state: CycleState, qpi: q.QueuedPodInfo, pod: Pod, node: str) -> None:
        """A binding cycle raised: undo what Reserve assumed (volumes, devices) as a failed bind
        would, so nothing stays assumed, then retry the pod after a backoff."""
        log.exception("binding_cycle_crashed", pod=pod.key)
        try:
            fwk.run_unreserve(state, pod, node)
        except Exception:
            log.exception("unreserve_crashed", pod=pod.key)
        self.cache.forget(pod.uid)
        self.queue.add_backoff(qpi)
        self.queue.done(pod.uid)

    def _finish_binding(
        self,
        fwk: Framework,
        state: CycleState,
        qpi: q.QueuedPodInfo,
        pod: Pod,
        node: str,
        cycle: int,
        t0: float,
        st: Status,
    ) -> None:
        """Bind and PostBind after PreBind answered ``st``, or undo the reservation on failure."""
        retries = 0
        stage = "PreBind"
        if st.is_success:
            stage = "Bind"
            binder = fwk.plugin(default_binder.NAME)
            before = getattr(binder, "retries", 0)
            st = fwk.run_bind(state, pod, node)
            retries = getattr(binder, "retries", 0) - before
        if st.is_success:
            self.cache.finish_binding(pod.uid)
            self.observer.bound(fwk.profile_name, time.monotonic() - t0, max(0, retries))
            if self.writer is not None:
                self.writer.event(
                    pod,
                    type_="Normal",
                    reason="Scheduled",
                    action="Binding",
                    note=f"Successfully assigned {pod.namespace}/{pod.name} to {node}",
                    controller=fwk.profile_name,
                )
            fwk.run_post_bind(state, pod, node)
            log.info("pod_bound", pod=pod.key, node=node, seconds=round(time.monotonic() - t0, 4))
            self.queue.done(pod.uid)
            return
        if default_binder.REASON_FENCED in st.reasons or not self.fence.held:
            self._fenced(fwk, state, qpi, pod, node)
            return
        fwk.run_unreserve(state, pod, node)
        self.cache.forget(pod.uid)
        # Another pod's resources were freed, as if an assigned pod was deleted.
        self.queue.move_all_to_active_or_backoff("AssignedPodDelete")
        if {default_binder.REASON_POD_GONE, default_binder.REASON_ASSIGNED_ELSEWHERE} & set(st.reasons):
            log.info("bind_abandoned", pod=pod.key, node=node, reason=st.message)
            self.queue.delete(pod)
            self.queue.done(pod.uid)
            return
        log.warning("bind_failed", pod=pod.key, node=node, stage=stage, reason=st.message)
        self._fail(fwk, qpi, cycle, "SchedulerError", f"running {stage} plugin {st.plugin!r}: {st.message}")

    def _fenced(self, fwk: Framework, state: CycleState, qpi: q.QueuedPodInfo, pod: Pod, node: str) -> None:
        """Leadership is gone: undo the reservation in memory only. No event, no condition, no
        requeue: this process is about to exit, and the pod belongs to the next leader."""
        fwk.run_unreserve(state, pod, node)
        self.cache.forget(pod.uid)
        self.queue.done(pod.uid)
        log.info("bind_fenced", pod=pod.key, node=node)

    # -- failures ---------------------------------------------------------------------------------
    def _fail(
        self,
        fwk: Framework,
        qpi: q.QueuedPodInfo,
        cycle: int,
        reason: str,
        message: str,
        *,
        nominated: str | None = None,
    ) -> None:
        """Record the failure on the pod (event, condition) and requeue it (or not)."""
        pod = qpi.pod
        event = "pod_unschedulable" if reason == "Unschedulable" else "pod_schedule_error"
        log.info(event, pod=pod.key, reason=message)
        if reason == "Unschedulable" and qpi.unschedulable_plugins:
            self.queue.add_unschedulable_if_not_present(qpi, cycle)
        else:
            self.queue.add_backoff(qpi)
        self.queue.done(pod.uid)
        if self.writer is not None and not self.dry_run:
            self.writer.event(
                pod,
                type_="Warning",
                reason="FailedScheduling",
                action="Scheduling",
                note=message,
                controller=fwk.profile_name,
            )
            self.writer.pod_condition(pod, status="False", reason=reason, message=message, nominated=nominated)

    def shutdown(self, timeout: float = 30.0) -> bool:
        """Stop taking pods (the caller sets the stop event) and let in-flight binds finish, waiting
        at most ``timeout`` seconds for them. True when they all finished in time; binds still
        running after it go on in their pool threads (nothing is cancelled half-way)."""
        self._binders.shutdown(wait=False, cancel_futures=False)
        drained = threading.Event()

        def drain() -> None:
            self._binders.shutdown(wait=True)
            drained.set()

        threading.Thread(target=drain, name="bind-drain", daemon=True).start()
        if not drained.wait(max(0.0, timeout)):
            log.warning("binds_still_running_at_shutdown", timeout=timeout)
            return False
        return True


def _may_need_other_pods(p: Pod) -> bool:
    """An assigned pod appeared. That frees nothing, so only pods that may have failed on pod
    affinity or topology spread can become schedulable (v1.20 narrowed AssignedPodAdd the same
    way); moving every unschedulable pod on each bind of a burst would only churn the queue."""
    return p.has_pod_affinity or bool(p.topology_spread_constraints)
