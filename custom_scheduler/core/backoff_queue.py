"""backoffQ: pods waiting out their backoff before another try (upstream's ``backoff_queue.go``).

A heap ordered by backoff expiry, ``timestamp + min(initial * 2**(attempts-1), max)`` (1, 2, 4,
8, 10, 10 ... seconds with the defaults), insertion order breaking ties. A pod leaves it when its
expiry has passed (:meth:`BackoffQueue.pop_completed`, run by the flush loop and by every pop),
when it is activated, or when it is deleted; an update leaves it in place, since the expiry
depends on the timestamp and attempts only.

Not thread-safe on its own: :class:`~custom_scheduler.core.queue.SchedulingQueue` holds its one
lock around every call.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from custom_scheduler.core.pod_heap import HeapQueue
from custom_scheduler.core.queued_pod_info import QueuedPodInfo


class BackoffQueue(HeapQueue):
    """backoffQ and the backoff policy (podInitialBackoffSeconds, podMaxBackoffSeconds).

    Args:
        seq: the insertion sequence shared with activeQ (see
            :class:`~custom_scheduler.core.active_queue.ActiveQueue`).
        clock: seconds; the backoff expiries are on it.
        initial: backoff after the first attempt.
        maximum: the cap on backoff.

    Membership, push and update are :class:`HeapQueue`'s: an update leaves a pod where it is,
    since its expiry reads the timestamp and attempts, never the pod object.
    """

    def __init__(
        self, *, seq: itertools.count[int], clock: Callable[[], float], initial: float, maximum: float
    ) -> None:
        super().__init__(self._before, seq)
        self._clock = clock
        self._initial = initial
        self._maximum = maximum

    # -- the policy -----------------------------------------------------------------------------
    def set_backoff(self, initial: float, maximum: float) -> None:
        """Change the policy (config reload). Queued pods keep their heap positions."""
        self._initial = initial
        self._maximum = maximum

    def duration(self, attempts: int) -> float:
        """``initial * 2**(attempts-1)`` capped at ``max`` (the initial backoff for attempts <= 1)."""
        exponent = min(max(attempts - 1, 0), 64)
        return min(self._initial * 2.0**exponent, self._maximum)

    def expiry(self, qpi: QueuedPodInfo) -> float:
        """When ``qpi``'s backoff ends (clock seconds)."""
        return qpi.timestamp + self.duration(qpi.attempts)

    def is_backing_off(self, qpi: QueuedPodInfo) -> bool:
        """Whether ``qpi`` must wait here before activeQ (upstream's ``isPodBackingoff``). A gated
        pod never is: PreEnqueue held it back before an attempt, not after a failed one."""
        return not qpi.gated and self.expiry(qpi) > self._clock()

    def _before(self, a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
        return (self.expiry(a), a.seq) < (self.expiry(b), b.seq)

    # -- leaving -------------------------------------------------------------------------------
    def next_expiry(self) -> float | None:
        """When the earliest backoff ends; None when no pod is backing off."""
        head = self._heap.peek()
        return None if head is None else self.expiry(head)

    def pop_for_idle(self, active_before: Callable[[QueuedPodInfo, QueuedPodInfo], bool]) -> QueuedPodInfo | None:
        """Take the pod to try next while activeQ is empty, before its backoff ends (upstream's
        ``popBackoff`` under SchedulerPopFromBackoffQ, on by default since 1.33): the earliest
        expiry among pods that plugins rejected, equal expiries in activeQ's order. Pods backing
        off after an error are not taken (upstream keeps them in a heap of their own): an error
        retried at once would likely fail again. None when no such pod waits.

        A scan, not a heap pop: it runs only when the scheduler has nothing else to do."""
        best: QueuedPodInfo | None = None
        best_expiry = 0.0
        for qpi in self._heap:
            if not qpi.unschedulable_plugins:
                continue
            expiry = self.expiry(qpi)
            if best is None or expiry < best_expiry or (expiry == best_expiry and active_before(qpi, best)):
                best, best_expiry = qpi, expiry
        if best is not None:
            self._heap.remove(best.uid)
        return best

    def pop_completed(self) -> list[QueuedPodInfo]:
        """Take every pod whose backoff has ended, earliest first (upstream's
        ``popAllBackoffCompleted``)."""
        now, done = self._clock(), []
        while (head := self._heap.peek()) is not None and self.expiry(head) <= now:
            done.append(self._heap.pop())
        return done
