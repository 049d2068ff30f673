"""activeQ: the pods ready to be tried, and the pods being tried (upstream's ``active_queue.go``).

A heap ordered by the QueueSort ``less`` (priority, then time queued), insertion order breaking
ties, so pods equal under ``less`` pop first-in first-out. Popping a pod starts an attempt: it is
*in flight* until its cycle ends (``done``) or it is requeued, and updates and deletes that arrive
meanwhile are recorded on its :class:`InFlight` record, to be applied at the requeue. As upstream,
activeQ also keeps the scheduling-cycle counter (one per pop) and the *in-flight events*: every
cluster event that arrives while some pod is being tried, kept until no pod that was in flight
when it arrived remains, so a pod whose attempt fails can be asked whether one of them may have
helped it (:meth:`ActiveQueue.events_during`) instead of waiting for an event that already came.

Not thread-safe on its own: :class:`~custom_scheduler.core.queue.SchedulingQueue` holds its one
lock around every call and does the waking (one lock for all sub-queues, so a pod moving between
them is never seen in two or in none).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from custom_scheduler.api import model
from custom_scheduler.core.pod_heap import HeapQueue
from custom_scheduler.core.queued_pod_info import QueuedPodInfo

Less = Callable[[QueuedPodInfo, QueuedPodInfo], bool]


@dataclass(slots=True)
class InFlight:
    """A popped pod, and what happened to its object while it was being scheduled."""

    qpi: QueuedPodInfo
    latest: model.Pod | None = None
    """The newest version seen while in flight (None: no update arrived)."""
    deleted: bool = False
    """The pod was deleted while in flight: its requeue is skipped."""
    first_event: int = 0
    """The sequence number the next in-flight event got when the attempt started."""


InFlightEvent = tuple[int, Any, Any, Any]
"""(sequence number, cluster event, old object, new object)."""

#: Prune the in-flight events (drop those no pod in flight can still replay) past this many.
_PRUNE_AT = 256


class ActiveQueue(HeapQueue):
    """activeQ, the in-flight pods and the cycle counters.

    Args:
        less: the QueueSort order (see :class:`~custom_scheduler.core.queue.SchedulingQueue`).
        seq: the insertion sequence shared with backoffQ, so entries from both compare in
            :meth:`compare` (a group cycle orders members taken from every sub-queue).
        clock: seconds; stamps a pod's first attempt.
    """

    def __init__(self, less: Less, *, seq: itertools.count[int], clock: Callable[[], float]) -> None:
        super().__init__(self.before, seq)
        self._less = less
        self._clock = clock
        self._in_flight: dict[str, InFlight] = {}
        self._scheduling_cycle = 0
        self._events: list[InFlightEvent] = []
        self._event_seq = 0

    # -- order ----------------------------------------------------------------------------------
    def before(self, a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
        """``less``, then insertion order: the heap's order."""
        if self._less(a, b):
            return True
        if self._less(b, a):
            return False
        return a.seq < b.seq

    def compare(self, a: QueuedPodInfo, b: QueuedPodInfo) -> int:
        """:meth:`before` as a comparison function, for sorting entries outside the heap."""
        return -1 if self.before(a, b) else (1 if self.before(b, a) else 0)

    # -- queued pods ----------------------------------------------------------------------------
    def update(self, pod: model.Pod) -> bool:
        """Replace a queued pod's object and recompute its position (``less`` reads the pod, e.g.
        its priority); False if it is not here."""
        if not super().update(pod):
            return False
        self._heap.fix(pod.uid)
        return True

    def pop(self) -> QueuedPodInfo:
        """Take the head (activeQ must not be empty) and start its attempt: a new scheduling cycle."""
        qpi = self._heap.pop()
        self.start_attempt(qpi)
        self._scheduling_cycle += 1
        return qpi

    def take(self, qpi: QueuedPodInfo, event: str) -> None:
        """Pop ``qpi``, which another sub-queue gave up, as if it had come through activeQ: it
        counts as incoming here under ``event`` and starts its attempt in a new cycle."""
        self.incoming[event] += 1
        self.start_attempt(qpi)
        self._scheduling_cycle += 1

    # -- in flight ------------------------------------------------------------------------------
    def start_attempt(self, qpi: QueuedPodInfo) -> None:
        """Count an attempt of a pod no longer in any sub-queue and mark it in flight; a group
        cycle's members are taken this way, within the popped pod's scheduling cycle."""
        qpi.attempts += 1
        if qpi.initial_attempt_timestamp is None:
            qpi.initial_attempt_timestamp = self._clock()
        qpi.unschedulable_plugins = set()
        self._in_flight[qpi.uid] = InFlight(qpi, first_event=self._event_seq)

    def update_in_flight(self, pod: model.Pod) -> bool:
        """Record a newer version of an in-flight pod for its requeue; False if it is not in flight."""
        if (flight := self._in_flight.get(pod.uid)) is None:
            return False
        flight.latest = pod
        flight.deleted = False  # the object exists after all
        return True

    def delete_in_flight(self, uid: str) -> bool:
        """Record that an in-flight pod was deleted; False if it is not in flight."""
        if (flight := self._in_flight.get(uid)) is None:
            return False
        flight.deleted = True
        flight.latest = None
        return True

    def get_flight(self, uid: str) -> InFlight | None:
        """The pod's in-flight record, if it is being tried."""
        return self._in_flight.get(uid)

    def end_flight(self, uid: str) -> InFlight | None:
        """The pod's attempt is over (a requeue): its in-flight record, if it was in flight. Read
        :meth:`events_during` for it before the next end, which may prune them."""
        flight = self._in_flight.pop(uid, None)
        self._prune()
        return flight

    def done(self, uid: str) -> None:
        if self._in_flight.pop(uid, None) is not None:
            self._prune()

    def in_flight_count(self) -> int:
        return len(self._in_flight)

    # -- in-flight events -------------------------------------------------------------------------
    def record_event(self, event: Any, old: Any, new: Any) -> None:
        """Keep a cluster event for the pods in flight now (nothing is kept while none is)."""
        if self._in_flight:
            self._events.append((self._event_seq, event, old, new))
            self._event_seq += 1

    def events_during(self, flight: InFlight) -> list[InFlightEvent]:
        """The events that arrived while ``flight``'s pod was being tried, oldest first."""
        start = flight.first_event
        return [e for e in self._events if e[0] >= start]

    def _prune(self) -> None:
        if not self._in_flight:
            self._events.clear()
        elif len(self._events) > _PRUNE_AT:
            oldest = min(f.first_event for f in self._in_flight.values())
            self._events = [e for e in self._events if e[0] >= oldest]

    def in_flight_events(self) -> int:
        """How many events are kept for the pods in flight (for tests and debugging)."""
        return len(self._events)

    # -- cycles ---------------------------------------------------------------------------------
    @property
    def scheduling_cycle(self) -> int:
        """How many pods have been popped."""
        return self._scheduling_cycle
