"""The scheduling queue: which pending pod the scheduling thread tries next, and when it retries.

This follows kube-scheduler's ``PriorityQueue`` (pkg/scheduler/backend/queue/scheduling_queue.go)
in meaning, and its layout: :class:`SchedulingQueue` here composes one class per sub-queue and
owns what crosses them (the lock, the moves, PreEnqueue, the requeue rules). Every pending pod
known to the queue is in exactly one of four places:

- **activeQ** (:mod:`~custom_scheduler.core.active_queue`), a heap ordered by the QueueSort
  ``less`` (priority, then time queued): ready to try.
- **backoffQ** (:mod:`~custom_scheduler.core.backoff_queue`), a heap ordered by backoff expiry,
  ``timestamp + min(initial * 2**(attempts-1), max)``. Pods move to activeQ once it expires.
- **unschedulable** (:mod:`~custom_scheduler.core.unschedulable_pods`), a map: pods rejected by
  plugins, waiting for a cluster event that may help (:meth:`SchedulingQueue.move_all_to_active_or_backoff`:
  the rejecting plugins' queueing hints decide, see :class:`~custom_scheduler.core.ports.Hints`),
  a change to themselves that their hints accept (:meth:`SchedulingQueue.update`), or
  ``max_in_unschedulable`` seconds (5 min) to pass. Pods that PreEnqueue rejected wait here too,
  flagged ``gated`` and reported apart (``queue="gated"``).
- **in flight** (kept by activeQ, as upstream): popped by the scheduling thread and not yet
  ``done``. Updates and deletes that arrive meanwhile are recorded and applied when the pod is
  requeued.

A pod's life: ``add`` -> activeQ -> ``pop`` (attempts += 1, in flight) -> ``done`` on success, else
``add_unschedulable_if_not_present`` (plugins rejected it) or ``add_backoff`` (an error). Those end
the in-flight state, so the caller's ``done`` in a ``finally`` is a no-op; they must come before it,
or a delete that arrived during the cycle is forgotten.

PreEnqueue (kube-scheduler's moveToActiveQ): every way into activeQ (add, an update of an unknown
or unschedulable pod, the end of a backoff, a move from unschedulable) first asks the ``pre_enqueue``
callback, which runs the pod's profile's PreEnqueue plugins. A pod it rejects is *gated*: parked in
unschedulable, never popped, so never attempted. It is not backing off (it gets no backoff when
released), and a pod gated by SchedulingGates is skipped by every cluster-event move and by the
leftover flush, because only the pod's own update can remove a gate (upstream skips them there
too, kubernetes#124384); its update runs PreEnqueue again and, once it passes, sends it straight to
activeQ. Pods gated by other PreEnqueue plugins move on events like any unschedulable pod, and the
move runs PreEnqueue again.

In-flight events: one that arrives while a pod is being scheduled is kept; if the attempt fails and
the pod's hints say one may have helped, the pod goes to backoffQ rather than waiting for an event
that already happened (upstream's ``determineSchedulingHintForInFlightPod``).

Thread safety: one lock guards everything (a pod moving between sub-queues is never seen in two or
none); a condition on it wakes ``pop``. Informer threads add, update, delete and move; the
scheduling thread pops and requeues; binders call ``done`` and ``add_backoff``. Callbacks (``less``,
``pre_check``, ``pre_enqueue``, the hints) run under the lock: cheap, and never calling the queue.

Not here: nominated pods (:mod:`.nominator`), the hints (:class:`.ports.Hints`), metrics export.
Time is the injected ``clock``'s; ``pop``'s timeout and the flush period use real monotonic time.
"""

from __future__ import annotations

import enum
import functools
import itertools
import threading
import time
from collections.abc import Callable, Collection
from typing import Any

from custom_scheduler.api import model
from custom_scheduler.core.active_queue import ActiveQueue, InFlight
from custom_scheduler.core.backoff_queue import BackoffQueue
from custom_scheduler.core.ports import Hints
from custom_scheduler.core.queued_pod_info import QueuedPodInfo, may_have_become_schedulable
from custom_scheduler.core.unschedulable_pods import SCHEDULING_GATES, UnschedulablePods, waits_for_own_update
from custom_scheduler.framework import cluster_events as ce

# Re-exported: the rest of the package reads the queue's entry and this name as ``queue.X``.
__all__ = ["SCHEDULING_GATES", "QueuedPodInfo", "may_have_become_schedulable"]

Clock = Callable[[], float]
PreEnqueueCheck = Callable[[model.Pod], str | None]
"""Runs the pod's profile's PreEnqueue plugins: None when all pass, else the rejecting plugin's name."""

# Why a pod entered a sub-queue (kube-scheduler's event labels of scheduler_queue_incoming_pods_total).
#: A new pending pod, or one the queue did not know arriving by an update (upstream adds it).
POD_ADD = ce.UNSCHEDULED_POD_ADD.label
#: A pod moved by its own change is counted under the TargetPod event that moved it (such as
#: ``TargetPodUpdatePodToleration``, upstream's ``evt.Label()``); this when it names none.
POD_UPDATE = "TargetPodUpdate"
SCHEDULE_ATTEMPT_FAILURE = "ScheduleAttemptFailure"
BACKOFF_COMPLETE = "BackoffComplete"
#: The incoming event of a pod an idle scheduler took from backoffQ (upstream's ``PopFromBackoffQ``).
POP_FROM_BACKOFF = "PopFromBackoffQ"

# PreEnqueue plugins changed (config reload): gated pods are checked again.
PRE_ENQUEUE_CHANGED = "PreEnqueueChanged"
# A plugin asked for these pods (Handle.activate), or a hold on them ended.
FORCE_ACTIVATE = ce.FORCE_ACTIVATE.label
UNSCHEDULABLE_TIMEOUT = ce.UNSCHEDULABLE_TIMEOUT.label

BACKOFF_FLUSH_INTERVAL = 1.0
LEFTOVER_FLUSH_INTERVAL = 30.0


class SubQueue(enum.StrEnum):
    """Where a queued pod sits."""

    ACTIVE = "active"
    BACKOFF = "backoff"
    UNSCHEDULABLE = "unschedulable"
    GATED = "gated"
    """In the unschedulable map, held back by PreEnqueue (``QueuedPodInfo.gated``); reported apart."""


class SchedulingQueue:
    """kube-scheduler's priority queue with backoff and unschedulable pods, for threads.

    Args:
        less: QueueSort order on queued pods, e.g. ``lambda a, b: plugin.less(a.pod, a.timestamp,
            b.pod, b.timestamp)``. Pods equal under ``less`` pop in insertion order.
        clock: seconds, monotonic; injected so tests drive backoff and timeouts.
        initial_backoff: backoff after the first attempt (podInitialBackoffSeconds).
        max_backoff: the cap on backoff (podMaxBackoffSeconds).
        max_in_unschedulable: how long a pod may wait in unschedulable before the leftover flush
            retries it anyway (podMaxInUnschedulablePodsDuration).
        pre_enqueue: the PreEnqueue check run before a pod enters activeQ (see the module
            docstring); None lets every pod in, as a profile without PreEnqueue plugins does.
        hints: the plugins' queueing hints; None retries every rejected pod on every event.
    """

    def __init__(
        self,
        less: Callable[[QueuedPodInfo, QueuedPodInfo], bool],
        *,
        clock: Clock = time.monotonic,
        initial_backoff: float = 1.0,
        max_backoff: float = 10.0,
        max_in_unschedulable: float = 300.0,
        pre_enqueue: PreEnqueueCheck | None = None,
        pop_from_backoff: bool = True,
        hints: Hints | None = None,
    ) -> None:
        self._pre_enqueue = pre_enqueue
        self._hints = hints
        # SchedulerPopFromBackoffQ (beta, on since 1.33): an idle scheduler tries a backing-off pod
        # now rather than waiting for its timer.
        self._pop_from_backoff = pop_from_backoff
        self._clock = clock
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        seq = itertools.count()  # one sequence, so take_members can order entries of both heaps
        self._active = ActiveQueue(less, seq=seq, clock=clock)
        self._backoff = BackoffQueue(seq=seq, clock=clock, initial=initial_backoff, maximum=max_backoff)
        keys = None if hints is None else hints.pod_keys
        self._unschedulable = UnschedulablePods(clock=clock, max_in_unschedulable=max_in_unschedulable, pod_keys=keys)
        self._closed = False

    # -- backoff policy -------------------------------------------------------------------------
    def set_backoff(self, initial: float, maximum: float) -> None:
        """Change podInitialBackoffSeconds / podMaxBackoffSeconds (config reload)."""
        with self._lock:
            self._backoff.set_backoff(initial, maximum)

    def backoff_duration(self, attempts: int) -> float:
        """``initial * 2**(attempts-1)`` capped at ``max`` (the initial backoff for attempts <= 1)."""
        return self._backoff.duration(attempts)

    def backoff_expiry(self, qpi: QueuedPodInfo) -> float:
        """When ``qpi``'s backoff ends (clock seconds)."""
        return self._backoff.expiry(qpi)

    # -- informer side --------------------------------------------------------------------------
    def add(self, pod: model.Pod) -> None:
        """Queue a new unassigned pod in activeQ (gated if PreEnqueue rejects it); a pod the queue
        already knows is updated instead."""
        with self._lock:
            if not self._update_locked(pod):
                self._to_active_locked(QueuedPodInfo(pod, self._clock()), POD_ADD)

    def update(self, pod: model.Pod) -> None:
        """Replace a known pod's object with its newer version: re-sorted in activeQ, kept in
        backoffQ, kept for the requeue in flight; in unschedulable it moves if one of its
        ``TargetPod`` events (:func:`~custom_scheduler.framework.cluster_events.pod_changes`) is
        one a rejecting plugin's hint accepts (counted under that event); a gated pod goes
        through PreEnqueue again, straight to activeQ if it passes. An unknown pod is added."""
        with self._lock:
            if not self._update_locked(pod):
                self._to_active_locked(QueuedPodInfo(pod, self._clock()), POD_ADD)

    def _update_locked(self, pod: model.Pod) -> bool:
        """Apply an update wherever the pod is; False if the queue does not know it."""
        if self._active.update_in_flight(pod) or self._active.update(pod) or self._backoff.update(pod):
            return True
        qpi = self._unschedulable.get(pod.uid)
        if qpi is None:
            return False
        old, qpi.pod = qpi.pod, pod
        self._unschedulable.reindex(qpi)  # its keys come from the pod
        if not may_have_become_schedulable(old, pod):
            return True
        changes = ce.pod_changes(old, pod, target=True)
        if qpi.gated:
            # Only PreEnqueue held it back, so only PreEnqueue decides; still rejected, it stays
            # where it is (same timestamp, not counted as entering again).
            if self._passes_pre_enqueue(qpi):
                self._unschedulable.remove(pod.uid)
                ungated = [e for e in changes if e.action is ce.Action.UPDATE_POD_SCHEDULING_GATES_ELIMINATED]
                self._push_active(qpi, (ungated or changes)[0].label if changes else POD_UPDATE)
            return True
        moved_by = next((e for e in changes if self._worth(qpi, e, old, pod)), None)
        if moved_by is None:
            return True  # updated in place: no rejecting plugin cares about this change
        self._unschedulable.remove(pod.uid)
        self._move_locked(qpi, moved_by.label)
        return True

    def delete(self, pod: model.Pod | str) -> bool:
        """Forget a pod (by object or uid). If it is in flight, its requeue will be skipped.

        Returns whether the queue knew the pod.
        """
        uid = pod if isinstance(pod, str) else pod.uid
        with self._lock:
            if self._active.delete_in_flight(uid):
                return True
            return self._remove_queued_locked(uid) is not None

    def move_all_to_active_or_backoff(
        self,
        event: ce.ClusterEvent,
        old: Any = None,
        new: Any = None,
        pre_check: Callable[[model.Pod], bool] | None = None,
    ) -> int:
        """A cluster event (``old`` -> ``new``; old None on an add, new None on a delete) may have
        made unschedulable pods schedulable: retry those it may help.

        A pod moves when ``pre_check(pod)`` holds (when given) and a rejecting plugin's hint for
        the event says QUEUE (pods with no recorded plugin always move): to backoffQ if still
        backing off, else to activeQ (through PreEnqueue, which may gate it). Pods gated by
        SchedulingGates never move. The event is also kept for the pods in flight (see the
        module docstring). Returns how many pods were taken out of unschedulable (a gated pod
        that PreEnqueue rejects again is put back, and counts).
        """
        with self._lock:
            self._active.record_event(event, old, new)
            hints = self._hints
            interested = None if hints is None or event.is_wildcard else hints.interested(event)
            targets = None if interested is None or hints is None else (lambda p: hints.targets(p, event, old, new))
            keys = None if interested is None or hints is None else (lambda p: hints.event_keys(p, event, old, new))
            moving = [
                qpi
                for qpi in self._unschedulable.candidates(interested, pre_check, targets, keys)
                if self._worth(qpi, event, old, new)
            ]
            self._move_all_locked(moving, event.label)
            return len(moving)

    def rekey_unschedulable(self) -> None:  # the profiles changed: so may the pods' keys
        with self._lock:
            self._unschedulable.rekey()

    def _worth(self, qpi: QueuedPodInfo, event: ce.ClusterEvent, old: Any, new: Any) -> bool:
        if event.is_wildcard and isinstance(new, model.Pod):
            return new.uid == qpi.uid  # a wildcard aimed at one pod (an activation in flight)
        return self._hints is None or self._hints.worth(qpi, event, old, new)

    # -- scheduling thread side -----------------------------------------------------------------
    def pop(self, timeout: float | None = None) -> QueuedPodInfo | None:
        """Take the head of activeQ, waiting up to ``timeout`` seconds (forever when None).

        Completed backoffs are flushed first, and a waiting pop wakes when the next one is due.
        Returns None on timeout and, without waiting, once the queue is closed. The popped pod is
        in flight until :meth:`done` or a requeue.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                if self._closed:
                    return None
                self._flush_backoff_locked()
                if self._active:
                    return self._active.pop()
                if self._pop_from_backoff and (qpi := self._backoff.pop_for_idle(self._active.before)) is not None:
                    self._active.take(qpi, POP_FROM_BACKOFF)
                    return qpi
                wait: float | None = None
                if deadline is not None:
                    wait = deadline - time.monotonic()
                    if wait <= 0:
                        return None
                if (expiry := self._backoff.next_expiry()) is not None:
                    due = expiry - self._clock()
                    wait = due if wait is None else min(wait, due)
                self._cond.wait(wait)

    def done(self, uid: str) -> None:
        """The pod's scheduling (and binding) cycle is over. Idempotent."""
        with self._lock:
            self._active.done(uid)

    def add_unschedulable_if_not_present(self, qpi: QueuedPodInfo, pod_scheduling_cycle: int) -> SubQueue | None:
        """Requeue a pod that plugins rejected in the cycle ``pod_scheduling_cycle``.

        It waits in unschedulable, unless an event that arrived during its attempt may have helped
        it (its hints say so), it was updated in a way that matters while in flight, or no
        rejecting plugin is recorded; then it goes to backoffQ (activeQ if its backoff is already
        over, or GATED if PreEnqueue then rejects it). Returns where it went, or None if it was
        deleted while in flight or is already queued.
        """
        with self._lock:
            return self._requeue_locked(qpi, pod_scheduling_cycle)

    def add_backoff(self, qpi: QueuedPodInfo) -> SubQueue | None:
        """Requeue a pod whose attempt failed with an error (no rejecting plugin) to backoffQ."""
        with self._lock:
            return self._requeue_locked(qpi, None)

    def _requeue_locked(self, qpi: QueuedPodInfo, cycle: int | None) -> SubQueue | None:
        uid = qpi.uid
        changed = False
        flight = self._active.get_flight(uid)
        missed = cycle is not None and qpi.unschedulable_plugins and flight is not None and self._missed(qpi, flight)
        if (flight := self._active.end_flight(uid)) is not None:
            if flight.deleted:
                return None
            if flight.latest is not None:
                changed = may_have_become_schedulable(qpi.pod, flight.latest)
                qpi.pod = flight.latest
        if self._contains_locked(uid):
            return None
        qpi.timestamp = self._clock()
        if cycle is not None and qpi.unschedulable_plugins and not missed and not changed:
            qpi.gating_plugin = ""
            self._unschedulable.add(qpi, SCHEDULE_ATTEMPT_FAILURE)
            return SubQueue.UNSCHEDULABLE
        return self._move_locked(qpi, SCHEDULE_ATTEMPT_FAILURE)

    def _missed(self, qpi: QueuedPodInfo, flight: InFlight) -> bool:
        """Whether an event that arrived during ``qpi``'s attempt may have helped it."""
        return any(self._worth(qpi, ev, old, new) for _, ev, old, new in self._active.events_during(flight))

    # -- flushes --------------------------------------------------------------------------------
    def flush_backoff_completed(self) -> int:
        """Move pods whose backoff has ended to activeQ (through PreEnqueue); returns how many
        reached activeQ."""
        with self._lock:
            return self._flush_backoff_locked()

    def _flush_backoff_locked(self) -> int:
        moved = 0
        for qpi in self._backoff.pop_completed():
            if self._to_active_locked(qpi, BACKOFF_COMPLETE) is SubQueue.ACTIVE:
                moved += 1
        return moved

    def flush_unschedulable_leftover(self) -> int:
        """Retry pods that have waited in unschedulable longer than ``max_in_unschedulable``
        (never pods gated by SchedulingGates: time does not remove a gate)."""
        with self._lock:
            moving = self._unschedulable.timed_out()
            if moving:
                self._move_all_locked(moving, UNSCHEDULABLE_TIMEOUT)
            return len(moving)

    def run_flush_loops(
        self,
        stop: threading.Event,
        *,
        backoff_interval: float = BACKOFF_FLUSH_INTERVAL,
        leftover_interval: float = LEFTOVER_FLUSH_INTERVAL,
    ) -> None:
        """Run both flushes on their periods until ``stop`` is set or the queue is closed.

        Meant for a daemon thread. Sleeps on ``stop.wait`` between runs, so setting ``stop`` ends it
        at once; closing the queue ends it within one ``backoff_interval``.
        """
        next_backoff = next_leftover = time.monotonic()
        while not stop.is_set() and not self.closed:
            now = time.monotonic()
            if now >= next_backoff:
                self.flush_backoff_completed()
                next_backoff = now + backoff_interval
            if now >= next_leftover:
                self.flush_unschedulable_leftover()
                next_leftover = now + leftover_interval
            stop.wait(max(0.0, min(next_backoff, next_leftover) - time.monotonic()))

    # -- moves between sub-queues (lock held) ---------------------------------------------------
    def _move_all_locked(self, moving: list[QueuedPodInfo], event: str) -> None:
        for qpi in moving:
            self._unschedulable.remove(qpi.uid)
            self._move_locked(qpi, event)

    def _move_locked(self, qpi: QueuedPodInfo, event: str) -> SubQueue:
        """A pod in no sub-queue goes to backoffQ while backing off, else towards activeQ."""
        if self._backoff.is_backing_off(qpi):
            self._backoff.push(qpi, event)
            # A waiting pop sleeps until the old backoff head; wake it to recompute.
            self._cond.notify_all()
            return SubQueue.BACKOFF
        return self._to_active_locked(qpi, event)

    def _to_active_locked(self, qpi: QueuedPodInfo, event: str) -> SubQueue:
        """kube-scheduler's moveToActiveQ for a pod in no sub-queue: activeQ if PreEnqueue lets it
        in, else unschedulable as gated."""
        if self._passes_pre_enqueue(qpi):
            self._push_active(qpi, event)
            return SubQueue.ACTIVE
        self._unschedulable.add(qpi, event)
        return SubQueue.GATED

    def _passes_pre_enqueue(self, qpi: QueuedPodInfo) -> bool:
        """Run PreEnqueue on ``qpi.pod`` and record the verdict on ``qpi`` (``gating_plugin`` and,
        on a rejection, the plugin in ``unschedulable_plugins`` too, as upstream does)."""
        gate = self._pre_enqueue(qpi.pod) if self._pre_enqueue is not None else None
        qpi.gating_plugin = gate or ""
        if gate:
            qpi.unschedulable_plugins.add(gate)
            if qpi.uid in self._unschedulable:
                self._unschedulable.reindex(qpi)
        return not gate

    def _push_active(self, qpi: QueuedPodInfo, event: str) -> None:
        self._active.push(qpi, event)
        self._cond.notify_all()

    def _remove_queued_locked(self, uid: str) -> QueuedPodInfo | None:
        """Take the pod out of whichever sub-queue holds it."""
        return self._active.remove(uid) or self._backoff.remove(uid) or self._unschedulable.remove(uid)

    def _contains_locked(self, uid: str) -> bool:
        return uid in self._active or uid in self._backoff or uid in self._unschedulable

    # -- PreEnqueue again, activation, group cycles ---------------------------------------------
    def recheck_pre_enqueue(self) -> tuple[int, int]:
        """Run PreEnqueue again on gated pods and on activeQ, after the PreEnqueue plugins changed
        (a config reload). Gated pods that now pass go to activeQ; pods in activeQ that are now
        rejected wait as gated. Backing-off and unschedulable pods meet PreEnqueue on their way
        to activeQ anyway. Returns (released, gated)."""
        with self._lock:
            released = gated = 0
            for qpi in self._unschedulable.gated():
                if self._passes_pre_enqueue(qpi):
                    self._unschedulable.remove(qpi.uid)
                    self._push_active(qpi, PRE_ENQUEUE_CHANGED)
                    released += 1
            for qpi in self._active:
                if not self._passes_pre_enqueue(qpi):
                    self._active.remove(qpi.uid)
                    self._unschedulable.add(qpi, PRE_ENQUEUE_CHANGED)
                    gated += 1
            return released, gated

    def release_gated(self, uids: Collection[str]) -> int:
        """Run PreEnqueue again on these gated pods only (a targeted :meth:`recheck_pre_enqueue`,
        e.g. once a pod's preemption has been carried out); returns how many reached activeQ."""
        with self._lock:
            released = 0
            for uid in uids:
                qpi = self._unschedulable.get(uid)
                if qpi is not None and qpi.gated and self._passes_pre_enqueue(qpi):
                    self._unschedulable.remove(uid)
                    self._push_active(qpi, FORCE_ACTIVATE)
                    released += 1
            return released

    def activate(self, pods: Collection[model.Pod]) -> int:
        """Move these pods from unschedulable or backoffQ to activeQ now, through PreEnqueue
        (upstream's ``Activate``: a plugin knows they can make progress, e.g. a gang's other
        members). Pods gated by SchedulingGates and pods not queued are left alone."""
        with self._lock:
            moved = 0
            for pod in pods:
                if self._active.get_flight(pod.uid) is not None:
                    # Being tried now: if this attempt fails, the activation sends it back at once.
                    self._active.record_event(ce.FORCE_ACTIVATE, None, pod)
                    continue
                qpi = self._unschedulable.get(pod.uid)
                if qpi is not None:
                    if waits_for_own_update(qpi):
                        continue
                    self._unschedulable.remove(pod.uid)
                else:
                    qpi = self._backoff.remove(pod.uid)
                    if qpi is None:
                        continue
                if self._to_active_locked(qpi, FORCE_ACTIVATE) is SubQueue.ACTIVE:
                    moved += 1
            return moved

    def take_members(self, match: Callable[[model.Pod], bool]) -> list[QueuedPodInfo]:
        """Pop every other queued pod that ``match`` es (a PodGroup's members, for one group
        cycle) from activeQ, backoffQ and unschedulable alike: the group is scheduled, and backs
        off, as one unit (upstream queues it as one entry). Gated pods stay: PreEnqueue holds them.
        In queue order, each in flight as after :meth:`pop`, within the current scheduling cycle."""
        with self._lock:
            picked = [qpi for qpi in self._active if match(qpi.pod)]
            picked += [qpi for qpi in self._backoff if match(qpi.pod)]
            picked += [qpi for qpi in self._unschedulable if not qpi.gated and match(qpi.pod)]
            picked.sort(key=functools.cmp_to_key(self._active.compare))
            for qpi in picked:
                self._remove_queued_locked(qpi.uid)
                self._active.start_attempt(qpi)
            return picked

    def next_backoff_expiry(self) -> float | None:
        """When the earliest backing-off pod may move to activeQ (for offline drivers that run a
        virtual clock); None when no pod is backing off."""
        with self._lock:
            return self._backoff.next_expiry()

    # -- lifecycle and introspection ------------------------------------------------------------
    def close(self) -> None:
        """Wake every waiting pop (they return None) and make later pops return None."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        with self._lock:
            return self._closed

    @property
    def scheduling_cycle(self) -> int:
        """How many pods have been popped."""
        with self._lock:
            return self._active.scheduling_cycle

    def __len__(self) -> int:
        """Queued pods (active, backoff, unschedulable); in-flight pods are not counted."""
        with self._lock:
            return len(self._active) + len(self._backoff) + len(self._unschedulable)

    def contains(self, uid: str) -> bool:
        """Whether the pod is queued in one of the three sub-queues (not in flight)."""
        with self._lock:
            return self._contains_locked(uid)

    def where(self, uid: str) -> SubQueue | None:
        """Which sub-queue holds the pod, if any (GATED for a gated pod in unschedulable)."""
        with self._lock:
            if uid in self._active:
                return SubQueue.ACTIVE
            if uid in self._backoff:
                return SubQueue.BACKOFF
            if (qpi := self._unschedulable.get(uid)) is not None:
                return SubQueue.GATED if qpi.gated else SubQueue.UNSCHEDULABLE
            return None

    def get(self, uid: str) -> QueuedPodInfo | None:
        """The queued entry for ``uid`` (live, not a copy: for tests and debugging)."""
        with self._lock:
            return self._active.get(uid) or self._backoff.get(uid) or self._unschedulable.get(uid)

    def pending_counts(self) -> dict[str, int]:
        """Sizes of the sub-queues, for the ``pending_pods{queue}`` gauge: ``unschedulable``
        excludes the gated pods, which are counted as ``gated``, as kube-scheduler reports them.

        Counted at each call (one pass over unschedulable per scrape) rather than kept in a
        counter that every transition in and out of the map would have to maintain."""
        with self._lock:
            gated = self._unschedulable.gated_count()
            return {
                SubQueue.ACTIVE.value: len(self._active),
                SubQueue.BACKOFF.value: len(self._backoff),
                SubQueue.UNSCHEDULABLE.value: len(self._unschedulable) - gated,
                SubQueue.GATED.value: gated,
            }

    def pending_pods(self) -> list[tuple[SubQueue, model.Pod]]:
        """Every queued pod with its sub-queue (activeQ and backoffQ in heap, not pop, order)."""
        with self._lock:
            out = [(SubQueue.ACTIVE, q.pod) for q in self._active]
            out += [(SubQueue.BACKOFF, q.pod) for q in self._backoff]
            out += [(SubQueue.GATED if q.gated else SubQueue.UNSCHEDULABLE, q.pod) for q in self._unschedulable]
            return out

    def in_flight_count(self) -> int:
        """Pods popped and not yet done."""
        with self._lock:
            return self._active.in_flight_count()

    def unschedulable_reasons(self) -> dict[tuple[str, str], int]:
        """Queued pods (any sub-queue, gated ones included; not in flight) by (plugin, profile)
        for each plugin that rejected their last attempt or gates them: the
        ``scheduler_unschedulable_pods{plugin,profile}`` gauge. Upstream keeps it with an
        increment when a rejected pod is queued and a decrement when it is popped or deleted,
        which is this count; counted here per scrape, so no queue operation pays for it."""
        counts: dict[tuple[str, str], int] = {}
        with self._lock:
            for sub in (self._active, self._backoff, self._unschedulable):
                for qpi in sub:
                    for plugin in qpi.unschedulable_plugins:
                        key = (plugin, qpi.pod.scheduler_name)
                        counts[key] = counts.get(key, 0) + 1
        return counts

    def incoming_counts(self) -> dict[tuple[str, str], int]:
        """Pods that entered each sub-queue, by (queue, event), since construction (each sub-queue
        counts its own, as upstream's sub-queues record ``scheduler_queue_incoming_pods_total``)."""
        with self._lock:
            counts = {(SubQueue.ACTIVE.value, e): n for e, n in self._active.incoming.items()}
            counts |= {(SubQueue.BACKOFF.value, e): n for e, n in self._backoff.incoming.items()}
            counts |= {(SubQueue.UNSCHEDULABLE.value, e): n for e, n in self._unschedulable.incoming.items()}
            return counts
