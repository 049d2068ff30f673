"""The scheduling queue: which pending pod the scheduling thread tries next, and when it retries.

This follows kube-scheduler's ``PriorityQueue`` (pkg/scheduler/backend/queue) in meaning. Every
pending pod known to the queue is in exactly one of four places:

- **activeQ**, a heap ordered by the QueueSort ``less`` (priority, then time queued): ready to try.
- **backoffQ**, a heap ordered by backoff expiry, ``timestamp + min(initial * 2**(attempts-1), max)``
  (1, 2, 4, 8, 10, 10 ... seconds with the defaults). Pods move to activeQ once it expires.
- **unschedulable**, a map: pods rejected by plugins, waiting for a cluster event that may help
  (:meth:`SchedulingQueue.move_all_to_active_or_backoff`), a change to themselves
  (:meth:`SchedulingQueue.update`), or ``max_in_unschedulable`` seconds (5 min) to pass. Pods that
  PreEnqueue rejected wait here too, flagged ``gated`` and reported apart (``queue="gated"``).
- **in flight**: popped by the scheduling thread and not yet ``done``. Updates and deletes that
  arrive meanwhile are recorded and applied when the pod is requeued.

A pod's life: ``add`` -> activeQ -> ``pop`` (attempts += 1, in flight) -> on success ``done``; on
failure ``add_unschedulable_if_not_present`` (plugins rejected it) or ``add_backoff`` (an error),
then ``done``. The requeue calls end the in-flight state themselves, so the ``done`` that the caller
runs in a ``finally`` is then a no-op; the requeue must come before ``done``, or a delete that arrived
during the cycle is forgotten.

PreEnqueue (kube-scheduler's moveToActiveQ): every way into activeQ (add, an update of an unknown
or unschedulable pod, the end of a backoff, a move from unschedulable) first asks the ``pre_enqueue``
callback, which runs the pod's profile's PreEnqueue plugins. A pod it rejects is *gated*: parked in
unschedulable, never popped, so never attempted. It is not backing off (it gets no backoff when
released), and a pod gated by SchedulingGates is skipped by every cluster-event move and by the
leftover flush, because only the pod's own update can remove a gate (upstream skips them there
too, kubernetes#124384); its update runs PreEnqueue again and, once it passes, sends it straight to
activeQ. Pods gated by other PreEnqueue plugins move on events like any unschedulable pod, and the
move runs PreEnqueue again.

The move-request rule avoids losing events: a cluster event that arrives while a pod is being
scheduled (``move_request_cycle >= the pod's cycle``) might have made it schedulable, so such a pod
goes to backoffQ rather than waiting in unschedulable for an event that already happened.

Thread safety: one lock guards everything; a condition on it wakes ``pop``. Informer threads call
``add``/``update``/``delete``/``move_all_to_active_or_backoff``, the scheduling thread ``pop`` and
the requeue calls, binder threads ``done`` and ``add_backoff``. Callbacks given to the queue
(``less``, ``pre_check``, ``pre_enqueue``) run under the lock: they must be cheap and must not call
the queue.

Not here: nominated pods (preemption keeps its own map), queueing hints, metrics export
(``pending_counts`` and ``incoming_counts`` feed the gauges and counters).
Time comes from the injected ``clock`` (seconds); only ``pop``'s timeout and the flush loop's
period use real monotonic time, so a fake clock never stalls them.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field

from custom_scheduler.api import model

Clock = Callable[[], float]
PreEnqueueCheck = Callable[[model.Pod], str | None]
"""Runs the pod's profile's PreEnqueue plugins: None when all pass, else the rejecting plugin's name."""

# Why a pod entered a sub-queue (kube-scheduler's event labels of scheduler_queue_incoming_pods_total).
POD_ADD = "PodAdd"
POD_UPDATE = "PodUpdate"
SCHEDULE_ATTEMPT_FAILURE = "ScheduleAttemptFailure"
BACKOFF_COMPLETE = "BackoffComplete"
UNSCHEDULABLE_TIMEOUT = "UnschedulableTimeout"
# Cluster events the informers pass to move_all_to_active_or_backoff.
NODE_ADD = "NodeAdd"
NODE_UPDATE = "NodeUpdate"
POD_DELETE = "PodDelete"
ASSIGNED_POD_ADD = "AssignedPodAdd"
ASSIGNED_POD_UPDATE = "AssignedPodUpdate"
ASSIGNED_POD_DELETE = "AssignedPodDelete"
# PreEnqueue plugins changed (config reload): gated pods are checked again.
PRE_ENQUEUE_CHANGED = "PreEnqueueChanged"
# A plugin asked for these pods (Handle.activate), or a hold on them ended.
FORCE_ACTIVATE = "ForceActivate"

#: The PreEnqueue plugin whose rejections only the pod's own update can lift, so cluster events and
#: the leftover flush skip the pods it gated. Spelled out so this module imports no plugin; a test
#: keeps it equal to ``plugins.scheduling_gates.NAME``.
SCHEDULING_GATES = "SchedulingGates"

BACKOFF_FLUSH_INTERVAL = 1.0
LEFTOVER_FLUSH_INTERVAL = 30.0


class SubQueue(enum.StrEnum):
    """Where a queued pod sits."""

    ACTIVE = "active"
    BACKOFF = "backoff"
    UNSCHEDULABLE = "unschedulable"
    GATED = "gated"
    """In the unschedulable map, held back by PreEnqueue (``QueuedPodInfo.gated``); reported apart."""


@dataclass(slots=True, eq=False)
class QueuedPodInfo:
    """A pod plus its queueing history. Identity-compared; keyed by ``pod.uid``."""

    pod: model.Pod
    timestamp: float
    """When the pod was last added to the queue (clock seconds); QueueSort and backoff read it."""
    attempts: int = 0
    """Scheduling attempts so far, counted on every pop."""
    initial_attempt_timestamp: float | None = None
    """When the pod was first popped, for the pod-scheduling-duration metric."""
    unschedulable_plugins: set[str] = field(default_factory=set)
    """Plugins that rejected the last attempt; cleared on pop, filled by the failure handler."""
    seq: int = 0
    """Insertion sequence, the heaps' last tie-breaker (FIFO among equals)."""
    gating_plugin: str = ""
    """The PreEnqueue plugin that rejected the pod the last time PreEnqueue ran ("" when it passed;
    kube-scheduler's ``GatingPlugin``). It is also added to ``unschedulable_plugins``, so events
    that plugin cares about move the pod. Only ever set while the pod waits in unschedulable."""

    @property
    def uid(self) -> str:
        return self.pod.uid

    @property
    def gated(self) -> bool:
        """Held back by PreEnqueue (kube-scheduler's ``Gated``): never popped until it passes."""
        return bool(self.gating_plugin)


@dataclass(slots=True)
class _InFlight:
    qpi: QueuedPodInfo
    latest: model.Pod | None = None  # newest version seen while in flight
    deleted: bool = False


# Fields that change without the pod's scheduling requirements changing (status and bookkeeping);
# everything else in model.Pod is spec or metadata, which kube-scheduler's isPodUpdated compares.
_STATUS_FIELDS = frozenset(
    {"resource_version", "phase", "start_time", "nominated_node_name", "scheduled_condition", "disruption_target"}
)
_SPEC_FIELDS = tuple(f.name for f in dataclasses.fields(model.Pod) if f.name not in _STATUS_FIELDS)


def spec_signature(pod: model.Pod) -> tuple[object, ...]:
    """The values of every field of ``pod`` that can affect where (or whether) it schedules."""
    return tuple(getattr(pod, name) for name in _SPEC_FIELDS)


def may_have_become_schedulable(old: model.Pod, new: model.Pod) -> bool:
    """Whether ``new`` differs from ``old`` in more than status and resourceVersion."""
    return spec_signature(old) != spec_signature(new)


def _waits_for_own_update(qpi: QueuedPodInfo) -> bool:
    """Gated by SchedulingGates: no cluster event and no timeout can help, only an update of the pod."""
    return qpi.gating_plugin == SCHEDULING_GATES


def _rejected_by_any(qpi: QueuedPodInfo, plugins: Collection[str] | None) -> bool:
    if plugins is None or not qpi.unschedulable_plugins:
        return True
    return not qpi.unschedulable_plugins.isdisjoint(plugins)


class _Heap:
    """A binary heap of QueuedPodInfo indexed by uid, so update and delete are O(log n)."""

    __slots__ = ("_before", "_items", "_pos")

    def __init__(self, before: Callable[[QueuedPodInfo, QueuedPodInfo], bool]) -> None:
        self._before = before
        self._items: list[QueuedPodInfo] = []
        self._pos: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, uid: object) -> bool:
        return uid in self._pos

    def __iter__(self) -> Iterator[QueuedPodInfo]:
        return iter(list(self._items))

    def get(self, uid: str) -> QueuedPodInfo | None:
        i = self._pos.get(uid)
        return None if i is None else self._items[i]

    def peek(self) -> QueuedPodInfo | None:
        return self._items[0] if self._items else None

    def push(self, qpi: QueuedPodInfo) -> None:
        self._items.append(qpi)
        self._pos[qpi.uid] = len(self._items) - 1
        self._up(len(self._items) - 1)

    def pop(self) -> QueuedPodInfo:
        return self._remove_at(0)

    def remove(self, uid: str) -> QueuedPodInfo | None:
        i = self._pos.get(uid)
        return None if i is None else self._remove_at(i)

    def fix(self, uid: str) -> None:
        """Restore the heap order after the entry's sort key changed."""
        i = self._pos[uid]
        if not self._up(i):
            self._down(i)

    def _remove_at(self, i: int) -> QueuedPodInfo:
        items = self._items
        last = items.pop()
        if i == len(items):
            del self._pos[last.uid]
            return last
        removed = items[i]
        del self._pos[removed.uid]
        items[i] = last
        self._pos[last.uid] = i
        if not self._up(i):
            self._down(i)
        return removed

    def _up(self, i: int) -> bool:
        items, pos, before = self._items, self._pos, self._before
        item, start = items[i], i
        while i > 0:
            parent = (i - 1) // 2
            if not before(item, items[parent]):
                break
            items[i] = items[parent]
            pos[items[i].uid] = i
            i = parent
        items[i] = item
        pos[item.uid] = i
        return i != start

    def _down(self, i: int) -> None:
        items, pos, before = self._items, self._pos, self._before
        n, item = len(items), items[i]
        while (child := 2 * i + 1) < n:
            if child + 1 < n and before(items[child + 1], items[child]):
                child += 1
            if not before(items[child], item):
                break
            items[i] = items[child]
            pos[items[i].uid] = i
            i = child
        items[i] = item
        pos[item.uid] = i


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
    ) -> None:
        self._less = less
        self._pre_enqueue = pre_enqueue
        self._clock = clock
        self._initial_backoff = initial_backoff
        self._max_backoff = max_backoff
        self._max_in_unschedulable = max_in_unschedulable
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._active = _Heap(self._active_before)
        self._backoff = _Heap(self._backoff_before)
        self._unschedulable: dict[str, QueuedPodInfo] = {}
        self._in_flight: dict[str, _InFlight] = {}
        self._seq = itertools.count()
        self._scheduling_cycle = 0
        self._move_request_cycle = -1
        self._closed = False
        self._incoming: Counter[tuple[str, str]] = Counter()

    # -- orderings ------------------------------------------------------------------------------
    def _active_before(self, a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
        if self._less(a, b):
            return True
        if self._less(b, a):
            return False
        return a.seq < b.seq

    def _compare_active(self, a: QueuedPodInfo, b: QueuedPodInfo) -> int:
        return -1 if self._active_before(a, b) else (1 if self._active_before(b, a) else 0)

    def _backoff_before(self, a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
        return (self.backoff_expiry(a), a.seq) < (self.backoff_expiry(b), b.seq)

    def set_backoff(self, initial: float, maximum: float) -> None:
        """Change podInitialBackoffSeconds / podMaxBackoffSeconds (config reload)."""
        with self._lock:
            self._initial_backoff = initial
            self._max_backoff = maximum

    def backoff_duration(self, attempts: int) -> float:
        """``initial * 2**(attempts-1)`` capped at ``max`` (the initial backoff for attempts <= 1)."""
        exponent = min(max(attempts - 1, 0), 64)
        return min(self._initial_backoff * 2.0**exponent, self._max_backoff)

    def backoff_expiry(self, qpi: QueuedPodInfo) -> float:
        """When ``qpi``'s backoff ends (clock seconds)."""
        return qpi.timestamp + self.backoff_duration(qpi.attempts)

    # -- informer side --------------------------------------------------------------------------
    def add(self, pod: model.Pod) -> None:
        """Queue a new unassigned pod in activeQ (gated if PreEnqueue rejects it); a pod the queue
        already knows is updated instead."""
        with self._lock:
            if not self._update_locked(pod):
                self._to_active_locked(QueuedPodInfo(pod, self._clock()), POD_ADD)

    def update(self, pod: model.Pod) -> None:
        """Replace a known pod's object with its newer version.

        In activeQ its position is recomputed; in backoffQ it stays until its backoff ends; in
        unschedulable it moves to backoffQ or activeQ if its spec changed (status-only and
        resourceVersion changes leave it there); a gated pod whose spec changed goes through
        PreEnqueue again and, if it passes, straight to activeQ; in flight the version is kept for
        the requeue. A pod the queue does not know is added to activeQ (after PreEnqueue), as
        kube-scheduler does.
        """
        with self._lock:
            if not self._update_locked(pod):
                self._to_active_locked(QueuedPodInfo(pod, self._clock()), POD_UPDATE)

    def _update_locked(self, pod: model.Pod) -> bool:
        uid = pod.uid
        if (flight := self._in_flight.get(uid)) is not None:
            flight.latest = pod
            flight.deleted = False  # the object exists after all
            return True
        if (qpi := self._active.get(uid)) is not None:
            qpi.pod = pod
            self._active.fix(uid)
            return True
        if (qpi := self._backoff.get(uid)) is not None:
            qpi.pod = pod  # the expiry depends on timestamp and attempts only: no re-heapify
            return True
        if (qpi := self._unschedulable.get(uid)) is not None:
            old, qpi.pod = qpi.pod, pod
            if not may_have_become_schedulable(old, pod):
                return True
            if qpi.gated:
                # Only PreEnqueue held it back, so only PreEnqueue decides; still rejected, it stays
                # where it is (same timestamp, not counted as entering again).
                if self._passes_pre_enqueue(qpi):
                    del self._unschedulable[uid]
                    self._push_active(qpi, POD_UPDATE)
                return True
            del self._unschedulable[uid]
            self._move_locked(qpi, POD_UPDATE)
            return True
        return False

    def delete(self, pod: model.Pod | str) -> bool:
        """Forget a pod (by object or uid). If it is in flight, its requeue will be skipped.

        Returns whether the queue knew the pod.
        """
        uid = pod if isinstance(pod, str) else pod.uid
        with self._lock:
            if (flight := self._in_flight.get(uid)) is not None:
                flight.deleted = True
                flight.latest = None
                return True
            if self._active.remove(uid) is not None or self._backoff.remove(uid) is not None:
                return True
            return self._unschedulable.pop(uid, None) is not None

    def move_all_to_active_or_backoff(
        self,
        event: str,
        pre_check: Callable[[model.Pod], bool] | None = None,
        *,
        plugins: Collection[str] | None = None,
    ) -> int:
        """A cluster event may have made unschedulable pods schedulable: retry them.

        Moves each unschedulable pod for which ``pre_check(pod)`` holds (all when None) and, when
        ``plugins`` is given, that was rejected by one of them (v1.22+ EventsToRegister; pods with
        no recorded plugin always move) to backoffQ if still backing off, else to activeQ (through
        PreEnqueue, which may gate it). Pods gated by SchedulingGates never move. Records the move
        request that :meth:`add_unschedulable_if_not_present` checks. Returns how many pods were
        taken out of unschedulable (a gated pod that PreEnqueue rejects again is put back, and
        counts).
        """
        with self._lock:
            moving = [
                qpi
                for qpi in self._unschedulable.values()
                if not _waits_for_own_update(qpi)
                and _rejected_by_any(qpi, plugins)
                and (pre_check is None or pre_check(qpi.pod))
            ]
            self._move_all_locked(moving, event)
            return len(moving)

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
                    break
                wait: float | None = None
                if deadline is not None:
                    wait = deadline - time.monotonic()
                    if wait <= 0:
                        return None
                if (head := self._backoff.peek()) is not None:
                    due = self.backoff_expiry(head) - self._clock()
                    wait = due if wait is None else min(wait, due)
                self._cond.wait(wait)
            qpi = self._active.pop()
            qpi.attempts += 1
            if qpi.initial_attempt_timestamp is None:
                qpi.initial_attempt_timestamp = self._clock()
            qpi.unschedulable_plugins = set()
            self._scheduling_cycle += 1
            self._in_flight[qpi.uid] = _InFlight(qpi)
            return qpi

    def done(self, uid: str) -> None:
        """The pod's scheduling (and binding) cycle is over. Idempotent."""
        with self._lock:
            self._in_flight.pop(uid, None)

    def add_unschedulable_if_not_present(self, qpi: QueuedPodInfo, pod_scheduling_cycle: int) -> SubQueue | None:
        """Requeue a pod that plugins rejected in the cycle ``pod_scheduling_cycle``.

        It waits in unschedulable, unless a move request arrived during or after that cycle, it
        was updated in a way that matters while in flight, or no rejecting plugin is recorded; then
        it goes to backoffQ (activeQ if its backoff is already over, or GATED if PreEnqueue then
        rejects it). Returns where it went, or None if it was deleted while in flight or is
        already queued.
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
        if (flight := self._in_flight.pop(uid, None)) is not None:
            if flight.deleted:
                return None
            if flight.latest is not None:
                changed = may_have_become_schedulable(qpi.pod, flight.latest)
                qpi.pod = flight.latest
        if uid in self._active or uid in self._backoff or uid in self._unschedulable:
            return None
        qpi.timestamp = self._clock()
        if cycle is not None and qpi.unschedulable_plugins and self._move_request_cycle < cycle and not changed:
            qpi.gating_plugin = ""
            self._park(qpi, SCHEDULE_ATTEMPT_FAILURE)
            return SubQueue.UNSCHEDULABLE
        return self._move_locked(qpi, SCHEDULE_ATTEMPT_FAILURE)

    # -- flushes --------------------------------------------------------------------------------
    def flush_backoff_completed(self) -> int:
        """Move pods whose backoff has ended to activeQ (through PreEnqueue); returns how many
        reached activeQ."""
        with self._lock:
            return self._flush_backoff_locked()

    def _flush_backoff_locked(self) -> int:
        now, moved = self._clock(), 0
        while (head := self._backoff.peek()) is not None and self.backoff_expiry(head) <= now:
            if self._to_active_locked(self._backoff.pop(), BACKOFF_COMPLETE) is SubQueue.ACTIVE:
                moved += 1
        return moved

    def flush_unschedulable_leftover(self) -> int:
        """Retry pods that have waited in unschedulable longer than ``max_in_unschedulable``
        (never pods gated by SchedulingGates: time does not remove a gate)."""
        with self._lock:
            now = self._clock()
            moving = [
                qpi
                for qpi in self._unschedulable.values()
                if now - qpi.timestamp > self._max_in_unschedulable and not _waits_for_own_update(qpi)
            ]
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

    # -- moves (lock held) ----------------------------------------------------------------------
    def _move_all_locked(self, moving: list[QueuedPodInfo], event: str) -> None:
        for qpi in moving:
            del self._unschedulable[qpi.uid]
            self._move_locked(qpi, event)
        self._move_request_cycle = self._scheduling_cycle

    def _move_locked(self, qpi: QueuedPodInfo, event: str) -> SubQueue:
        # A gated pod is never backing off (kube-scheduler's isPodBackingoff): it was held back
        # before an attempt, not after a failed one.
        if not qpi.gated and self.backoff_expiry(qpi) > self._clock():
            qpi.seq = next(self._seq)
            self._backoff.push(qpi)
            self._incoming[SubQueue.BACKOFF.value, event] += 1
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
        self._park(qpi, event)
        return SubQueue.GATED

    def _passes_pre_enqueue(self, qpi: QueuedPodInfo) -> bool:
        """Run PreEnqueue on ``qpi.pod`` and record the verdict on ``qpi`` (``gating_plugin`` and,
        on a rejection, the plugin in ``unschedulable_plugins`` too, as upstream does)."""
        gate = self._pre_enqueue(qpi.pod) if self._pre_enqueue is not None else None
        qpi.gating_plugin = gate or ""
        if gate:
            qpi.unschedulable_plugins.add(gate)
        return not gate

    def _park(self, qpi: QueuedPodInfo, event: str) -> None:
        self._unschedulable[qpi.uid] = qpi
        self._incoming[SubQueue.UNSCHEDULABLE.value, event] += 1

    def _push_active(self, qpi: QueuedPodInfo, event: str) -> None:
        qpi.seq = next(self._seq)
        self._active.push(qpi)
        self._incoming[SubQueue.ACTIVE.value, event] += 1
        self._cond.notify_all()

    def recheck_pre_enqueue(self) -> tuple[int, int]:
        """Run PreEnqueue again on gated pods and on activeQ, after the PreEnqueue plugins changed
        (a config reload). Gated pods that now pass go to activeQ; pods in activeQ that are now
        rejected wait as gated. Backing-off and unschedulable pods meet PreEnqueue on their way
        to activeQ anyway. Returns (released, gated)."""
        with self._lock:
            released = gated = 0
            for qpi in [q for q in self._unschedulable.values() if q.gated]:
                if self._passes_pre_enqueue(qpi):
                    del self._unschedulable[qpi.uid]
                    self._push_active(qpi, PRE_ENQUEUE_CHANGED)
                    released += 1
            for qpi in self._active:
                if not self._passes_pre_enqueue(qpi):
                    self._active.remove(qpi.uid)
                    self._park(qpi, PRE_ENQUEUE_CHANGED)
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
                    del self._unschedulable[uid]
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
                uid = pod.uid
                qpi = self._unschedulable.get(uid)
                if qpi is not None:
                    if _waits_for_own_update(qpi):
                        continue
                    del self._unschedulable[uid]
                else:
                    qpi = self._backoff.remove(uid)
                    if qpi is None:
                        continue
                if self._to_active_locked(qpi, FORCE_ACTIVATE) is SubQueue.ACTIVE:
                    moved += 1
            if moved:
                self._move_request_cycle = self._scheduling_cycle
            return moved

    def take_members(self, match: Callable[[model.Pod], bool]) -> list[QueuedPodInfo]:
        """Pop every other queued pod that ``match`` es (a PodGroup's members, for one group
        cycle) from activeQ, backoffQ and unschedulable alike: the group is scheduled, and backs
        off, as one unit (upstream queues it as one entry). Gated pods stay: PreEnqueue holds them.
        In queue order, each in flight as after :meth:`pop`, within the current scheduling cycle."""
        with self._lock:
            picked = [qpi for qpi in self._active if match(qpi.pod)]
            picked += [qpi for qpi in self._backoff if match(qpi.pod)]
            picked += [qpi for qpi in self._unschedulable.values() if not qpi.gated and match(qpi.pod)]
            picked.sort(key=functools.cmp_to_key(self._compare_active))
            for qpi in picked:
                if self._active.remove(qpi.uid) is None and self._backoff.remove(qpi.uid) is None:
                    del self._unschedulable[qpi.uid]
                qpi.attempts += 1
                if qpi.initial_attempt_timestamp is None:
                    qpi.initial_attempt_timestamp = self._clock()
                qpi.unschedulable_plugins = set()
                self._in_flight[qpi.uid] = _InFlight(qpi)
            return picked

    def next_backoff_expiry(self) -> float | None:
        """When the earliest backing-off pod may move to activeQ (for offline drivers that run a
        virtual clock); None when no pod is backing off."""
        with self._lock:
            head = self._backoff.peek()
            return None if head is None else self.backoff_expiry(head)

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
            return self._scheduling_cycle

    def __len__(self) -> int:
        """Queued pods (active, backoff, unschedulable); in-flight pods are not counted."""
        with self._lock:
            return len(self._active) + len(self._backoff) + len(self._unschedulable)

    def contains(self, uid: str) -> bool:
        """Whether the pod is queued in one of the three sub-queues (not in flight)."""
        with self._lock:
            return uid in self._active or uid in self._backoff or uid in self._unschedulable

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
            gated = sum(1 for qpi in self._unschedulable.values() if qpi.gated)
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
            out += [
                (SubQueue.GATED if q.gated else SubQueue.UNSCHEDULABLE, q.pod) for q in self._unschedulable.values()
            ]
            return out

    def in_flight_count(self) -> int:
        """Pods popped and not yet done."""
        with self._lock:
            return len(self._in_flight)

    def incoming_counts(self) -> dict[tuple[str, str], int]:
        """Pods that entered each sub-queue, by (queue, event), since construction."""
        with self._lock:
            return dict(self._incoming)
