"""Unit tests for the parts the scheduling queue composes: activeQ, backoffQ, the unschedulable
pods and their heap, each on its own (the queue's behaviour as a whole is in test_queue.py)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection

import pytest
from hypothesis import given
from hypothesis import strategies as st

from custom_scheduler.api import model
from custom_scheduler.core.active_queue import ActiveQueue
from custom_scheduler.core.backoff_queue import BackoffQueue
from custom_scheduler.core.pod_heap import PodHeap
from custom_scheduler.core.queued_pod_info import QueuedPodInfo
from custom_scheduler.core.unschedulable_pods import SCHEDULING_GATES, UnschedulablePods
from tests.builders import make_pod


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def entry(name: str, *, timestamp: float = 0.0, attempts: int = 0, priority: int = 0) -> QueuedPodInfo:
    pod = make_pod(name).uid(f"uid-{name}").priority(priority).build()
    return QueuedPodInfo(pod, timestamp, attempts=attempts)


def higher_priority(a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
    return a.pod.priority > b.pod.priority


# -- PodHeap -------------------------------------------------------------------------------------
@given(
    keys=st.lists(st.integers(0, 50), min_size=1, max_size=30, unique=True),
    removed=st.sets(st.integers(0, 29)),
)
def test_heap_pops_in_order_after_removals(keys: list[int], removed: set[int]) -> None:
    heap = PodHeap(lambda a, b: a.timestamp < b.timestamp)
    for i, k in enumerate(keys):
        heap.push(entry(f"p{i}", timestamp=float(k)))
    for i in removed & set(range(len(keys))):
        assert heap.remove(f"uid-p{i}") is not None
    popped = [heap.pop().timestamp for _ in range(len(heap))]
    kept = sorted(float(k) for i, k in enumerate(keys) if i not in removed)
    assert popped == kept


def test_heap_fix_moves_an_entry_whose_key_changed() -> None:
    heap = PodHeap(lambda a, b: a.timestamp < b.timestamp)
    for i in range(5):
        heap.push(entry(f"p{i}", timestamp=float(i)))
    last = heap.get("uid-p4")
    assert last is not None
    last.timestamp = -1.0
    heap.fix("uid-p4")
    assert heap.peek() is last
    assert "uid-p4" in heap
    assert heap.get("uid-missing") is None


# -- ActiveQueue ---------------------------------------------------------------------------------
def active(clock: FakeClock | None = None) -> ActiveQueue:
    return ActiveQueue(higher_priority, seq=itertools.count(), clock=clock or FakeClock())


def test_active_ties_pop_in_insertion_order_and_pop_starts_a_cycle() -> None:
    aq = active(FakeClock(5.0))
    for name, prio in (("a", 0), ("b", 1), ("c", 0), ("d", 1)):
        aq.push(entry(name, priority=prio), "PodAdd")
    popped = [aq.pop() for _ in range(4)]
    assert [p.pod.name for p in popped] == ["b", "d", "a", "c"]
    assert aq.scheduling_cycle == 4
    assert aq.in_flight_count() == 4
    assert all(p.attempts == 1 and p.initial_attempt_timestamp == 5.0 for p in popped)
    assert aq.incoming == {"PodAdd": 4}


def test_start_attempt_is_in_flight_without_a_new_cycle() -> None:
    aq = active()
    qpi = entry("m")
    qpi.unschedulable_plugins = {"NodeResourcesFit"}
    aq.start_attempt(qpi)
    assert (aq.scheduling_cycle, aq.in_flight_count(), qpi.attempts, qpi.unschedulable_plugins) == (0, 1, 1, set())


@pytest.mark.parametrize(
    ("steps", "want_deleted", "want_latest"),
    [
        pytest.param(["update"], False, True, id="update-kept"),
        pytest.param(["delete"], True, False, id="delete-recorded"),
        pytest.param(["delete", "update"], False, True, id="update-after-delete-revives"),
        pytest.param(["update", "delete"], True, False, id="delete-drops-the-update"),
    ],
)
def test_in_flight_records(steps: list[str], want_deleted: bool, want_latest: bool) -> None:
    aq = active()
    aq.push(entry("p"), "PodAdd")
    qpi = aq.pop()
    newer = make_pod("p").uid("uid-p").priority(7).build()
    for step in steps:
        assert aq.update_in_flight(newer) if step == "update" else aq.delete_in_flight("uid-p")
    flight = aq.end_flight("uid-p")
    assert flight is not None
    assert flight.qpi is qpi
    assert (flight.deleted, flight.latest is newer) == (want_deleted, want_latest)
    assert aq.end_flight("uid-p") is None
    assert not aq.update_in_flight(newer)
    assert not aq.delete_in_flight("uid-p")


def test_in_flight_events_are_kept_for_the_pods_in_flight_only() -> None:
    """An event is kept while a pod that was in flight when it came is still in flight; a pod
    popped later does not see it; with no pod in flight nothing is kept."""
    aq = active()
    aq.record_event("before", None, None)
    assert aq.in_flight_events() == 0
    aq.push(entry("p"), "PodAdd")
    aq.push(entry("q"), "PodAdd")
    first = aq.pop()
    aq.record_event("e1", None, None)
    second = aq.pop()
    aq.record_event("e2", None, None)
    f1, f2 = aq.get_flight(first.uid), aq.get_flight(second.uid)
    assert f1 is not None
    assert f2 is not None
    assert [e[1] for e in aq.events_during(f1)] == ["e1", "e2"]
    assert [e[1] for e in aq.events_during(f2)] == ["e2"]
    aq.done(first.uid)
    aq.done(second.uid)
    assert aq.in_flight_events() == 0


def test_active_update_repositions_the_entry() -> None:
    """activeQ's order reads the pod (its priority), so an update re-sifts it; backoffQ's does not
    (see test_backoff_update_keeps_the_entry_in_place)."""
    aq = active()
    low, high = entry("low", priority=1), entry("high", priority=5)
    aq.push(low, "PodAdd")
    aq.push(high, "PodAdd")
    assert aq.update(make_pod("low").uid("uid-low").priority(9).build())
    assert aq.get("uid-low") is low
    assert [aq.pop().pod.name for _ in range(len(aq))] == ["low", "high"]
    assert not aq.update(make_pod("x").uid("uid-x").build())


# -- BackoffQueue --------------------------------------------------------------------------------
def backoff(clock: FakeClock, initial: float = 1.0, maximum: float = 10.0) -> BackoffQueue:
    return BackoffQueue(seq=itertools.count(), clock=clock, initial=initial, maximum=maximum)


@pytest.mark.parametrize(
    ("attempts", "want"),
    [(0, 1.0), (1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (5, 10.0), (1000, 10.0)],
)
def test_backoff_duration_doubles_up_to_the_cap(attempts: int, want: float) -> None:
    assert backoff(FakeClock()).duration(attempts) == want


@pytest.mark.parametrize(
    ("elapsed", "gating", "want"),
    [
        pytest.param(0.5, "", True, id="within"),
        pytest.param(2.0, "", False, id="over"),
        pytest.param(0.5, SCHEDULING_GATES, False, id="gated-never"),
    ],
)
def test_is_backing_off(elapsed: float, gating: str, want: bool) -> None:
    clock = FakeClock(100.0)
    qpi = entry("p", timestamp=100.0, attempts=2)  # 2 seconds
    qpi.gating_plugin = gating
    clock.now += elapsed
    assert backoff(clock).is_backing_off(qpi) is want


def test_pop_completed_takes_only_expired_pods_earliest_first() -> None:
    clock = FakeClock(0.0)
    bq = backoff(clock)
    for name, attempts in (("four", 3), ("one", 1), ("two", 2)):
        bq.push(entry(name, attempts=attempts), "ScheduleAttemptFailure")
    assert bq.next_expiry() == 1.0
    clock.now = 2.0
    assert [q.pod.name for q in bq.pop_completed()] == ["one", "two"]
    assert [q.pod.name for q in bq] == ["four"]
    assert bq.next_expiry() == 4.0
    assert bq.incoming == {"ScheduleAttemptFailure": 3}


def test_backoff_update_keeps_the_entry_in_place() -> None:
    bq = backoff(FakeClock())
    qpi = entry("p")
    bq.push(qpi, "ScheduleAttemptFailure")
    newer = make_pod("p").uid("uid-p").priority(3).build()
    assert bq.update(newer)
    assert bq.get("uid-p") is qpi
    assert qpi.pod is newer
    assert not bq.update(make_pod("x").uid("uid-x").build())


# -- UnschedulablePods ---------------------------------------------------------------------------
def parked(name: str, *, rejected: Collection[str] = (), gating: str = "", timestamp: float = 0.0) -> QueuedPodInfo:
    qpi = entry(name, timestamp=timestamp)
    qpi.unschedulable_plugins = set(rejected)
    qpi.gating_plugin = gating
    return qpi


@pytest.mark.parametrize(
    ("qpi", "plugins", "pre_check", "want"),
    [
        pytest.param(parked("p", rejected={"A"}), None, None, True, id="any-event"),
        pytest.param(parked("p", rejected={"A"}), {"A", "B"}, None, True, id="rejected-by-one"),
        pytest.param(parked("p", rejected={"A"}), {"B"}, None, False, id="rejected-by-another"),
        pytest.param(parked("p"), {"B"}, None, True, id="no-recorded-plugin"),
        pytest.param(parked("p", rejected={"A"}), None, lambda p: False, False, id="pre-check-refuses"),
        pytest.param(parked("p", rejected={SCHEDULING_GATES}, gating=SCHEDULING_GATES), None, None, False, id="gates"),
        pytest.param(parked("p", rejected={"Other"}, gating="Other"), {"Other"}, None, True, id="other-gate"),
    ],
)
def test_candidates(
    qpi: QueuedPodInfo,
    plugins: set[str] | None,
    pre_check: Callable[[model.Pod], bool] | None,
    want: bool,
) -> None:
    pods = UnschedulablePods(clock=FakeClock(), max_in_unschedulable=300.0)
    pods.add(qpi, "ScheduleAttemptFailure")
    interested = None if plugins is None else plugins.__contains__
    assert (pods.candidates(interested, pre_check) == [qpi]) is want
    pods.remove(qpi.uid)
    assert pods.candidates(interested, None) == []


@pytest.mark.parametrize(
    ("waited", "gating", "want"),
    [
        pytest.param(299.0, "", False, id="not-yet"),
        pytest.param(301.0, "", True, id="timed-out"),
        pytest.param(301.0, "Other", True, id="other-gate-times-out"),
        pytest.param(301.0, SCHEDULING_GATES, False, id="gates-never"),
    ],
)
def test_timed_out(waited: float, gating: str, want: bool) -> None:
    clock = FakeClock(0.0)
    pods = UnschedulablePods(clock=clock, max_in_unschedulable=300.0)
    qpi = parked("p", gating=gating)
    pods.add(qpi, "ScheduleAttemptFailure")
    clock.now = waited
    assert (pods.timed_out() == [qpi]) is want


def test_gated_pods_are_counted_apart() -> None:
    pods = UnschedulablePods(clock=FakeClock(), max_in_unschedulable=300.0)
    gated, plain = parked("g", gating=SCHEDULING_GATES), parked("u", rejected={"A"})
    pods.add(gated, "PodAdd")
    pods.add(plain, "ScheduleAttemptFailure")
    assert (len(pods), pods.gated_count(), pods.gated()) == (2, 1, [gated])
    assert pods.remove("uid-g") is gated
    assert pods.remove("uid-g") is None
    assert pods.incoming == {"PodAdd": 1, "ScheduleAttemptFailure": 1}
