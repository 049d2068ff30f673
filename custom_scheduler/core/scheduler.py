"""The daemon's scheduler: informer sinks, the scheduling loop, and the cycles wired to real ports.

Threads and who owns what:

- informer threads (pods, nodes) call the ``on_*`` sinks here, which update the cache and queue;
- one scheduling thread runs :meth:`Scheduler.run`: it pops pods and runs the
  :class:`~custom_scheduler.core.cycle.SchedulingCycle` (it alone reads snapshots and runs
  Filter/Score, so plugins need no locking);
- a bounded pool runs :class:`~custom_scheduler.core.binding.BindingCycle` s concurrently with later
  scheduling cycles, exactly as kube-scheduler's per-pod binding goroutines;
- the preemption evictor's pool, the API writer thread (events, pod conditions), the queue's flush
  loop and the Permit timers.

The daemon and ``simulate`` both build it with :func:`custom_scheduler.core.assembly.assemble`
(``simulate`` with offline ports), so a pod goes through one implementation of the queue rules,
the cycles and the requeue-on-event rules in every mode. The queue's two questions about a pod's
profile, its order (:meth:`Scheduler.queue_less`) and PreEnqueue (:meth:`Scheduler.pre_enqueue`),
are answered here because the profiles live here and a config reload swaps them here.

Fencing: the scheduler holds the daemon's :class:`~custom_scheduler.framework.fence.Fence`. Once the elector
revokes it the loop pops no more pods, binding cycles still queued end without an API call when
they start, and one in flight stops before its next write. The pod is forgotten and left alone:
the process exits and the new leader schedules it.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Hashable, Mapping
from typing import Any

import structlog

from custom_scheduler.api.model import Node, Pod
from custom_scheduler.core import queue as q
from custom_scheduler.core.algorithm import Algorithm
from custom_scheduler.core.binding import BindingCycle, Executor, PoolExecutor
from custom_scheduler.core.cache import Cache
from custom_scheduler.core.cycle import Decision, SchedulingCycle
from custom_scheduler.core.nominator import Nominator
from custom_scheduler.core.ports import Clock, EventSink, Observer
from custom_scheduler.framework import cluster_events as ce
from custom_scheduler.framework.evictor import Evictor
from custom_scheduler.framework.fence import Fence
from custom_scheduler.framework.interface import QueueSortPlugin
from custom_scheduler.framework.runtime import Framework
from custom_scheduler.framework.types import Code, Snapshot

log = structlog.get_logger("custom_scheduler.scheduler")


__all__ = ["Decision", "Observer", "Scheduler"]


class Scheduler:
    def __init__(
        self,
        *,
        profiles: Mapping[str, Framework],
        cache: Cache,
        queue: q.SchedulingQueue,
        writer: EventSink | None,
        algorithm: Algorithm | None = None,
        nominator: Nominator | None = None,
        snapshot: Snapshot | None = None,
        bind_workers: int = 16,
        dry_run: bool = False,
        observer: Observer | None = None,
        on_decision: Callable[[Decision], None] | None = None,
        fence: Fence | None = None,
        evictor: Evictor | None = None,
        executor: Executor | None = None,
        confirm: Callable[[Pod, str], None] | None = None,
        rng: random.Random | None = None,
        clock: Clock = time.monotonic,
        batching: bool = True,
    ) -> None:
        self.cache = cache
        self.queue = queue
        self.dry_run = dry_run
        self.nominator = nominator or Nominator()
        self.fence = fence if fence is not None else Fence()
        self.observer = observer or Observer()
        # Shadow mode writes nothing: decisions stay in the cache, events and conditions go nowhere.
        events = None if dry_run else writer
        self.binding = BindingCycle(
            cache=cache,
            queue=queue,
            events=events,
            fence=self.fence,
            observer=self.observer,
            executor=executor if executor is not None else (Executor() if dry_run else PoolExecutor(bind_workers)),
            record_only=dry_run or confirm is not None,
            confirm=confirm,
            clock=clock,
        )
        self.cycle = SchedulingCycle(
            profiles=profiles,
            cache=cache,
            queue=queue,
            nominator=self.nominator,
            events=events,
            binding=self.binding,
            evictor=evictor,
            algorithm=algorithm,
            observer=self.observer,
            rng=rng,
            clock=clock,
            on_decision=on_decision,
            snapshot=snapshot,
            batching=batching,
        )
        self._queue_sort = _queue_sort_of(profiles)
        self._interest: dict[ce.ClusterEvent, Callable[[str], bool]] = {}

    # The cycle owns these; the composition root swaps profiles on a config reload.
    @property
    def profiles(self) -> dict[str, Framework]:
        return self.cycle.profiles

    @profiles.setter
    def profiles(self, value: Mapping[str, Framework]) -> None:
        self.cycle.profiles = dict(value)  # one reference swap: a cycle sees the old or the new set
        self._queue_sort = _queue_sort_of(value)
        self._interest = {}  # the new plugins' registrations
        self.queue.rekey_unschedulable()  # the pods' keys come from the plugins' registrations
        self.cycle.batches.clear()  # rankings made with the old plugins

    @property
    def algorithm(self) -> Algorithm:
        return self.cycle.algorithm

    @property
    def snapshot(self) -> Snapshot:
        return self.cycle.snapshot

    def responsible_for(self, pod: Pod) -> bool:
        return pod.scheduler_name in self.profiles

    def queue_less(self, a: q.QueuedPodInfo, b: q.QueuedPodInfo) -> bool:
        """The queue's order: the QueueSort plugin of the first profile (validation makes every
        profile enable the same one, as upstream does), read at each comparison so that a config
        reload's plugin orders the next one. Without profiles nothing is ordered (nor queued:
        :meth:`on_pod_add` queues only pods of a profile). Runs under the queue's lock."""
        sort = self._queue_sort
        return sort is not None and sort.less(a.pod, a.timestamp, b.pod, b.timestamp)

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

    def preemption_done(self, preemptor: Pod, ok: bool) -> None:
        """The evictor finished: release the preemptor from PreEnqueue; on failure drop its
        nomination (the victims may still be there) so it is retried from scratch."""
        if not ok:
            self.nominator.remove(preemptor)
        self.queue.release_gated([preemptor.uid])

    # -- queueing hints (the queue's Hints, through assembly.QueueHooks) -----------------------------
    def hints_interested(self, event: ce.ClusterEvent) -> Callable[[str], bool]:
        """The rejecting plugins ``event`` may concern in any profile: those registering a
        matching event or nothing at all, and names no profile knows (an extender's). Cached per
        event until the profiles change."""
        found = self._interest.get(event)
        if found is None:
            names: set[str] = set()
            known: set[str] = set()
            for fwk in self.profiles.values():
                names |= fwk.requeue.interested(event)
                known |= fwk.requeue.plugins
            found = self._interest[event] = lambda p: p in names or p not in known
        return found

    def hints_worth(self, qpi: q.QueuedPodInfo, event: ce.ClusterEvent, old: Any, new: Any) -> bool:
        """Ask the pod's profile's rejecting plugins (a pod of no profile always moves)."""
        fwk = self.profiles.get(qpi.pod.scheduler_name)
        if fwk is None:
            return True
        return fwk.requeue.worth_requeuing(qpi.pod, qpi.unschedulable_plugins, event, old, new)

    def hints_targets(self, plugin: str, event: ce.ClusterEvent, old: Any, new: Any) -> frozenset[str] | None:
        """The pods ``plugin`` rejected that ``event`` can concern, over every profile (None: any)."""
        found: set[str] = set()
        for fwk in self.profiles.values():
            got = fwk.requeue.targets(plugin, event, old, new) if plugin in fwk.requeue.plugins else frozenset()
            if got is None:
                return None
            found |= got
        return frozenset(found)

    def hints_pod_keys(self, plugin: str, pod: Pod) -> frozenset[Hashable] | None:
        """The keys ``pod`` waits on for ``plugin``, in its own profile (None: unkeyed)."""
        fwk = self.profiles.get(pod.scheduler_name)
        return None if fwk is None else fwk.requeue.pod_keys(plugin, pod)

    def hints_event_keys(self, plugin: str, event: ce.ClusterEvent, old: Any, new: Any) -> frozenset[Hashable] | None:
        """The keys ``event`` carries for ``plugin``, over every profile that has it (None: any pod)."""
        found: set[Hashable] = set()
        for fwk in self.profiles.values():
            if plugin not in fwk.requeue.plugins:
                continue
            got = fwk.requeue.event_keys(plugin, event, old, new)
            if got is None:
                return None
            found |= got
        return frozenset(found)

    # -- informer sinks (upstream's eventhandlers.go: which cluster event each change is) -----------
    def on_pod_add(self, pod: Pod) -> None:
        if pod.node_name:
            self.cache.add_pod(pod)
            self.nominator.remove(pod)
            self.queue.move_all_to_active_or_backoff(ce.ASSIGNED_POD_ADD, None, pod)
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
                self.queue.move_all_to_active_or_backoff(ce.ASSIGNED_POD_ADD, None, new)
                return
            for event in ce.pod_changes(old, new, target=False):
                self.queue.move_all_to_active_or_backoff(event, old, new)
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
            if old.nominated_node_name and old.nominated_node_name != new.nominated_node_name:
                # Its old nomination held room for it against pods of lower or equal priority.
                self._nomination_released(old)

    def on_pod_delete(self, pod: Pod) -> None:
        self.nominator.remove(pod)
        if pod.node_name or self.cache.get_pod(pod.uid) is not None:
            self.cache.remove_pod(pod)
            self.queue.move_all_to_active_or_backoff(ce.ASSIGNED_POD_DELETE, pod, None)
        elif pod.nominated_node_name:
            self._nomination_released(pod)
        self.queue.delete(pod)

    def _nomination_released(self, pod: Pod) -> None:
        """A nominated pod let go of its node: for the pods of lower or equal priority, as if an
        assigned pod was deleted there (upstream's getLEPriorityPreCheck)."""
        self.queue.move_all_to_active_or_backoff(
            ce.ASSIGNED_POD_DELETE, pod, None, lambda p: p.priority <= pod.priority
        )

    def on_node_add(self, node: Node) -> None:
        self.cache.add_node(node)
        self.queue.move_all_to_active_or_backoff(ce.NODE_ADD, None, node)

    def on_node_update(self, old: Node, new: Node) -> None:
        self.cache.update_node(new)
        # Only what a plugin reads of a node makes an event; a heartbeat makes none.
        for event in ce.node_changes(old, new):
            self.queue.move_all_to_active_or_backoff(event, old, new)

    def on_node_delete(self, node: Node) -> None:
        self.cache.remove_node(node.name)
        self.queue.move_all_to_active_or_backoff(ce.NODE_DELETE, node, None)

    # -- the loop ---------------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        """Schedule until ``stop`` is set."""
        while not stop.is_set() and self.fence.held:
            qpi = self.queue.pop(timeout=0.5)
            if qpi is None:
                continue
            self.schedule_one(qpi)

    def schedule_one(self, qpi: q.QueuedPodInfo) -> Decision:
        try:
            return self.cycle.schedule_one(qpi)
        except Exception as e:
            log.exception("schedule_one_crashed", pod=qpi.pod.key)
            self.queue.add_backoff(qpi)
            self.queue.done(qpi.pod.uid)
            return Decision(qpi.pod.key, "error", message=f"{type(e).__name__}: {e}", uid=qpi.pod.uid)

    def run_until_idle(self, advance: Callable[[float], None], max_cycles: int = 100_000) -> int:
        """Offline driver (``simulate``): pop and schedule until nothing is active; when only
        backing-off pods remain, ``advance`` the virtual clock to the next expiry and go on.
        Returns the number of cycles run."""
        n = 0
        while n < max_cycles:
            qpi = self.queue.pop(timeout=0)
            if qpi is None:
                due = self.queue.next_backoff_expiry()
                if due is None:
                    return n
                advance(due)
                continue
            self.schedule_one(qpi)
            n += 1
        return n

    def shutdown(self, timeout: float = 30.0) -> bool:
        """Stop taking pods (the caller sets the stop event) and let in-flight binds finish, waiting
        at most ``timeout`` seconds for them. True when they all finished in time; binds still
        running after it go on in their pool threads (nothing is cancelled half-way)."""
        ok = self.binding.executor.shutdown(timeout)
        if not ok:
            log.warning("binds_still_running_at_shutdown", timeout=timeout)
        return ok


def _queue_sort_of(profiles: Mapping[str, Framework]) -> QueueSortPlugin | None:
    return next(iter(profiles.values())).queue_sort if profiles else None
