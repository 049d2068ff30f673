"""SchedulerPopFromBackoffQ (beta, on by default since 1.33): when activeQ is empty, the scheduler
does not sit idle while pods wait out their backoff; it takes the one whose backoff ends first
(rejected by plugins, not failed with an error), ahead of its timer."""

from __future__ import annotations

from custom_scheduler.core import queue
from custom_scheduler.core.queue import QueuedPodInfo, SchedulingQueue
from custom_scheduler.framework import cluster_events as ce
from tests.unit.core.test_queue import FakeClock, fail, make_backoff, pod, pop, priority_less


def backing_off(q: SchedulingQueue, name: str, priority: int = 0) -> QueuedPodInfo:
    """A pod plugins rejected, moved to backoffQ by a cluster event during its backoff."""
    q.add(pod(name, priority))
    qpi = pop(q)
    fail(q, qpi)
    q.done(qpi.uid)
    q.move_all_to_active_or_backoff(ce.NODE_ADD)
    assert q.pending_counts()["backoff"] >= 1
    return qpi


def test_an_idle_queue_pops_from_backoff_before_the_timer() -> None:
    clock = FakeClock()
    q = SchedulingQueue(priority_less, clock=clock)
    qpi = backing_off(q, "a")
    assert q.backoff_expiry(qpi) > clock()
    got = q.pop(timeout=0)
    assert got is qpi
    assert got.attempts == 2
    assert q.incoming_counts()[("active", queue.POP_FROM_BACKOFF)] == 1
    assert q.pending_counts()["backoff"] == 0


def test_active_pods_come_first() -> None:
    q = SchedulingQueue(priority_less, clock=FakeClock())
    backing_off(q, "waiting")
    q.add(pod("fresh"))
    assert [pop(q).pod.name, pop(q).pod.name] == ["fresh", "waiting"]


def test_earliest_expiry_first_then_active_order() -> None:
    clock = FakeClock()
    q = SchedulingQueue(priority_less, clock=clock)
    early_low = backing_off(q, "early-low", 0)
    early_high = backing_off(q, "early-high", 10)
    clock.advance(0.5)
    backing_off(q, "late-high", 100)
    assert q.backoff_expiry(early_low) == q.backoff_expiry(early_high)
    assert [pop(q).pod.name for _ in range(3)] == ["early-high", "early-low", "late-high"]


def test_error_backoff_waits_for_its_timer() -> None:
    """A pod whose attempt failed with an error is not retried early (upstream keeps it in its own
    error backoff heap, which an idle pop does not read)."""
    clock = FakeClock()
    q = SchedulingQueue(priority_less, clock=clock)
    make_backoff(q, pod("errored"))
    assert q.pop(timeout=0) is None
    clock.advance(1.0)
    assert pop(q).pod.name == "errored"


def test_off_by_option() -> None:
    clock = FakeClock()
    q = SchedulingQueue(priority_less, clock=clock, pop_from_backoff=False)
    qpi = backing_off(q, "a")
    assert q.pop(timeout=0) is None
    clock.now = q.backoff_expiry(qpi)
    assert pop(q) is qpi
