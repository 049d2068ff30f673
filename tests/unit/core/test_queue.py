"""Unit tests for the scheduling queue, driven by a fake clock (no sleeps)."""

from __future__ import annotations

import dataclasses
import itertools
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from custom_scheduler.api import model
from custom_scheduler.core import queue
from custom_scheduler.core.queue import QueuedPodInfo, SchedulingQueue, SubQueue
from custom_scheduler.framework import cluster_events as ce
from custom_scheduler.plugins import scheduling_gates
from tests.builders import make_pod
from tests.unit.plugins.support import fake_handle

ACTIVE, BACKOFF, UNSCHEDULABLE, GATED = SubQueue.ACTIVE, SubQueue.BACKOFF, SubQueue.UNSCHEDULABLE, SubQueue.GATED


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def priority_less(a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
    """PrioritySort: higher priority first, then earlier timestamp."""
    if a.pod.priority != b.pod.priority:
        return a.pod.priority > b.pod.priority
    return a.timestamp < b.timestamp


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


_GATES = scheduling_gates.SchedulingGates(None, fake_handle())


def gates_check(p: model.Pod) -> str | None:
    """The daemon's PreEnqueue callback for a profile with only SchedulingGates (the default)."""
    st = _GATES.pre_enqueue(p)
    return None if st.is_success else st.plugin


@pytest.fixture
def q(clock: FakeClock) -> SchedulingQueue:
    return SchedulingQueue(priority_less, clock=clock, pre_enqueue=gates_check)


def pod(name: str, priority: int = 0, gates: tuple[str, ...] = ()) -> model.Pod:
    return make_pod(name).uid(f"uid-{name}").priority(priority).gates(*gates).build()


def pop(q: SchedulingQueue) -> QueuedPodInfo:
    qpi = q.pop(timeout=0)
    assert qpi is not None
    return qpi


NODE_LABEL = ce.ClusterEvent(ce.Resource.NODE, ce.Action.UPDATE_NODE_LABEL)


class PluginHints:
    """Hints as a profile's would answer them: each event concerns the plugins listed for it."""

    def __init__(self, interest: dict[ce.ClusterEvent, set[str]]) -> None:
        self.interest = interest

    def interested(self, event: ce.ClusterEvent) -> object:
        return lambda plugin: plugin in self.interest.get(event, set())

    def worth(self, qpi: QueuedPodInfo, event: ce.ClusterEvent, old: object, new: object) -> bool:
        rejectors = qpi.unschedulable_plugins
        return not rejectors or bool(rejectors & self.interest.get(event, set()))

    def targets(self, plugin: str, event: ce.ClusterEvent, old: object, new: object) -> frozenset[str] | None:
        return self.only.get(plugin) if hasattr(self, "only") else None

    def pod_keys(self, plugin: str, pod: model.Pod) -> frozenset[object] | None:
        return None

    def event_keys(self, plugin: str, event: ce.ClusterEvent, old: object, new: object) -> frozenset[object] | None:
        return None


class KeyedHints(PluginHints):
    """Plugin "P" keys each pod by its ``peer`` label and an event by the added pod's name, and
    counts the pods its hint is asked of."""

    def __init__(self, event: ce.ClusterEvent) -> None:
        super().__init__({event: {"P"}})
        self.asked: list[str] = []
        self.keyed = True  # False: as after a config reload to a profile without keys

    def worth(self, qpi: QueuedPodInfo, event: ce.ClusterEvent, old: object, new: object) -> bool:
        self.asked.append(qpi.pod.name)
        return isinstance(new, model.Pod) and qpi.pod.labels.get("peer") == new.name

    def pod_keys(self, plugin: str, pod: model.Pod) -> frozenset[object] | None:
        peer = pod.labels.get("peer")
        return frozenset({peer}) if self.keyed and plugin == "P" and peer else None

    def event_keys(self, plugin: str, event: ce.ClusterEvent, old: object, new: object) -> frozenset[object] | None:
        return frozenset({new.name}) if isinstance(new, model.Pod) else None


def fail(q: SchedulingQueue, qpi: QueuedPodInfo, *plugins: str) -> SubQueue | None:
    """The failure handler: record the rejecting plugins and requeue for the pod's own cycle."""
    qpi.unschedulable_plugins.update(plugins or {"NodeResourcesFit"})
    return q.add_unschedulable_if_not_present(qpi, q.scheduling_cycle)


def make_unschedulable(q: SchedulingQueue, p: model.Pod) -> QueuedPodInfo:
    q.add(p)
    qpi = pop(q)
    assert fail(q, qpi) is UNSCHEDULABLE
    q.done(qpi.uid)
    return qpi


def make_backoff(q: SchedulingQueue, p: model.Pod) -> QueuedPodInfo:
    q.add(p)
    qpi = pop(q)
    assert q.add_backoff(qpi) is BACKOFF
    q.done(qpi.uid)
    return qpi


# -- ordering -----------------------------------------------------------------------------------


def test_pop_orders_by_priority_then_fifo(q: SchedulingQueue) -> None:
    """Higher priority pops first; equal priorities (and equal timestamps) pop in insertion order."""
    for name, prio in [("a", 0), ("b", 10), ("c", 0), ("d", 10), ("e", 5)]:
        q.add(pod(name, prio))
    assert [pop(q).pod.name for _ in range(5)] == ["b", "d", "e", "a", "c"]
    assert q.pop(timeout=0) is None


def test_pop_orders_by_timestamp_within_priority(q: SchedulingQueue, clock: FakeClock) -> None:
    """A pod requeued later sorts after one queued earlier at the same priority."""
    q.add(pod("a"))
    first = pop(q)
    clock.advance(1)
    q.add(pod("b"))
    clock.advance(5)
    q.add_backoff(first)  # timestamp = now, backoff 1 s
    q.done(first.uid)
    clock.advance(1)
    assert [pop(q).pod.name for _ in range(2)] == ["b", "a"]


def test_pop_bookkeeping(q: SchedulingQueue, clock: FakeClock) -> None:
    """Pop counts attempts and cycles, stamps the first attempt, clears old rejections, marks in flight."""
    q.add(pod("a"))
    assert q.scheduling_cycle == 0
    qpi = pop(q)
    assert (qpi.attempts, qpi.initial_attempt_timestamp, q.scheduling_cycle) == (1, 1000.0, 1)
    assert q.in_flight_count() == 1
    assert not q.contains(qpi.uid)
    q.add_backoff(qpi)
    q.done(qpi.uid)
    q.done(qpi.uid)  # idempotent
    assert q.in_flight_count() == 0
    qpi.unschedulable_plugins.add("Stale")
    clock.advance(5)
    again = pop(q)
    assert again is qpi
    assert (again.attempts, again.initial_attempt_timestamp, q.scheduling_cycle) == (2, 1000.0, 2)
    assert again.unschedulable_plugins == set()


# -- backoff ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("attempts", "expected"),
    [(0, 1), (1, 1), (2, 2), (3, 4), (4, 8), (5, 10), (6, 10), (100, 10), (10_000, 10)],
    ids=str,
)
def test_backoff_duration_doubles_and_caps(q: SchedulingQueue, attempts: int, expected: float) -> None:
    """1, 2, 4, 8, 10, 10 ... seconds with the defaults."""
    assert q.backoff_duration(attempts) == expected


def test_backoff_duration_custom_bounds(clock: FakeClock) -> None:
    q = SchedulingQueue(priority_less, clock=clock, initial_backoff=0.5, max_backoff=3.0)
    assert [q.backoff_duration(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]


@pytest.mark.parametrize("attempts", [1, 2, 3, 4, 5, 6])
def test_backoff_pod_waits_its_duration(q: SchedulingQueue, clock: FakeClock, attempts: int) -> None:
    """A pod after its n-th failed attempt returns to activeQ exactly when its backoff ends."""
    q.add(pod("a"))
    for _ in range(attempts):
        clock.advance(100)
        qpi = pop(q)
        assert q.add_backoff(qpi) is BACKOFF
        q.done(qpi.uid)
    wait = min(2.0 ** (attempts - 1), 10.0)
    clock.advance(wait - 0.001)
    assert q.flush_backoff_completed() == 0
    assert q.pop(timeout=0) is None
    clock.advance(0.001)
    assert q.flush_backoff_completed() == 1
    assert q.where("uid-a") is ACTIVE


def test_backoff_flush_moves_in_expiry_order(q: SchedulingQueue, clock: FakeClock) -> None:
    """BackoffQ is ordered by expiry, not by priority or insertion."""
    for name in ("a", "b"):
        q.add(pod(name))
    a, b = pop(q), pop(q)
    q.add(pod("c"))
    c = pop(q)
    clock.advance(1)  # all three requeue at the same time; only their attempts differ
    b.attempts = 1
    a.attempts = 3  # 4 s
    c.attempts = 2  # 2 s
    for qpi in (a, b, c):
        q.add_backoff(qpi)
        q.done(qpi.uid)
    moved = []
    for _ in range(4):
        clock.advance(1)
        q.flush_backoff_completed()
        while (head := q.pop(timeout=0)) is not None:
            moved.append(head.pod.name)
    assert moved == ["b", "c", "a"]


def test_pop_flushes_completed_backoff(q: SchedulingQueue, clock: FakeClock) -> None:
    """Pop moves completed backoffs itself, so no flush loop is needed to make progress."""
    make_backoff(q, pod("a"))
    assert q.pop(timeout=0) is None
    clock.advance(1)
    assert pop(q).pod.name == "a"


def test_add_unschedulable_without_rejecting_plugin_backs_off(q: SchedulingQueue) -> None:
    """No recorded plugin means an error, which is retried with backoff rather than parked."""
    q.add(pod("a"))
    qpi = pop(q)
    assert q.add_unschedulable_if_not_present(qpi, q.scheduling_cycle) is BACKOFF


def test_requeue_sets_timestamp(q: SchedulingQueue, clock: FakeClock) -> None:
    q.add(pod("a"))
    qpi = pop(q)
    clock.advance(7)
    fail(q, qpi)
    assert qpi.timestamp == clock.now


def test_requeue_of_already_queued_pod_is_ignored(q: SchedulingQueue) -> None:
    """A pod that is already queued is not queued twice."""
    q.add(pod("a"))
    qpi = q.get("uid-a")
    assert qpi is not None
    assert q.add_backoff(qpi) is None
    assert q.pending_counts() == {"active": 1, "backoff": 0, "unschedulable": 0, "gated": 0}


# -- add / update -------------------------------------------------------------------------------


def test_add_of_known_pod_updates_it(q: SchedulingQueue) -> None:
    q.add(pod("a"))
    newer = dataclasses.replace(pod("a"), resource_version="2")
    q.add(newer)
    assert len(q) == 1
    assert pop(q).pod is newer


def test_update_in_active_reorders(q: SchedulingQueue) -> None:
    """Raising a queued pod's priority moves it to the head of activeQ."""
    for name in ("a", "b", "c"):
        q.add(pod(name))
    before = q.get("uid-c")
    q.update(dataclasses.replace(pod("c"), priority=100))
    assert q.get("uid-c") is before
    assert [pop(q).pod.name for _ in range(3)] == ["c", "a", "b"]


def test_update_in_backoff_stays(q: SchedulingQueue, clock: FakeClock) -> None:
    """A backing-off pod keeps backing off (same expiry) with its newest object."""
    qpi = make_backoff(q, pod("a"))
    expiry = q.backoff_expiry(qpi)
    newer = dataclasses.replace(pod("a"), labels={"x": "y"})
    q.update(newer)
    assert q.where("uid-a") is BACKOFF
    assert q.get("uid-a") is qpi
    assert qpi.pod is newer
    assert q.backoff_expiry(qpi) == expiry
    clock.advance(1)
    assert pop(q).pod is newer


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"resource_version": "99"}, id="resource-version"),
        pytest.param({"phase": "Pending", "start_time": 5.0}, id="status"),
        pytest.param({"nominated_node_name": "n1"}, id="nominated-node"),
        pytest.param({"scheduled_condition": ("False", "Unschedulable", "0/3")}, id="condition"),
    ],
)
def test_update_unschedulable_status_only_stays(q: SchedulingQueue, change: dict[str, object]) -> None:
    """Status-only updates cannot make a pod schedulable: it stays, with the new object."""
    qpi = make_unschedulable(q, pod("a"))
    newer = dataclasses.replace(qpi.pod, **change)  # type: ignore[arg-type]
    q.update(newer)
    assert q.where("uid-a") is UNSCHEDULABLE
    assert qpi.pod is newer


SPEC_CHANGES = [
    pytest.param(lambda p: dataclasses.replace(p, labels={"app": "x"}), id="labels"),
    pytest.param(lambda p: make_pod("a").uid("uid-a").req(cpu="1").build(), id="requests"),
    pytest.param(lambda p: dataclasses.replace(p, tolerations=(model.Toleration("k", "Exists"),)), id="tolerations"),
    pytest.param(lambda p: dataclasses.replace(p, node_selector={"zone": "a"}), id="node-selector"),
    pytest.param(lambda p: dataclasses.replace(p, affinity={"nodeAffinity": {}}), id="affinity"),
    pytest.param(lambda p: dataclasses.replace(p, priority=7), id="priority"),
    pytest.param(lambda p: dataclasses.replace(p, scheduling_gates=("gate",)), id="scheduling-gates"),
]


@pytest.mark.parametrize("change", SPEC_CHANGES)
def test_update_unschedulable_spec_change_moves_to_backoff(q: SchedulingQueue, change) -> None:  # type: ignore[no-untyped-def]
    """A spec change may make the pod schedulable: it leaves unschedulable, backing off if due."""
    qpi = make_unschedulable(q, pod("a"))
    newer = change(qpi.pod)
    q.update(newer)
    assert q.where("uid-a") is BACKOFF
    assert q.get("uid-a") is qpi
    assert qpi.pod is newer


def test_update_unschedulable_after_backoff_moves_to_active(q: SchedulingQueue, clock: FakeClock) -> None:
    qpi = make_unschedulable(q, pod("a"))
    clock.advance(1)
    q.update(dataclasses.replace(qpi.pod, labels={"app": "x"}))
    assert q.where("uid-a") is ACTIVE


TOLERATION = ce.ClusterEvent(ce.Resource.TARGET_POD, ce.Action.UPDATE_POD_TOLERATION)
LABEL = ce.ClusterEvent(ce.Resource.TARGET_POD, ce.Action.UPDATE_POD_LABEL)


@pytest.mark.parametrize(
    ("interest", "change", "counted"),
    [
        pytest.param({TOLERATION: {"TaintToleration"}}, "toleration", "TargetPodUpdatePodToleration", id="toleration"),
        pytest.param({LABEL: {"TaintToleration"}}, "both", "TargetPodUpdatePodLabel", id="the-event-that-moved-it"),
        pytest.param({TOLERATION: {"TaintToleration"}}, "both", "TargetPodUpdatePodToleration", id="skips-unwanted"),
        pytest.param({LABEL: {"NodeAffinity"}}, "label", None, id="no-rejector-cares-stays"),
    ],
)
def test_an_unschedulable_pod_moved_by_its_own_update_is_counted_under_that_event(
    clock: FakeClock, interest: dict[ce.ClusterEvent, set[str]], change: str, counted: str | None
) -> None:
    """Upstream's Update requeues with ``evt.Label()`` of the TargetPod event whose hint queued it."""
    q = SchedulingQueue(priority_less, clock=clock, hints=PluginHints(interest))  # type: ignore[arg-type]
    q.add(pod("a"))
    qpi = pop(q)
    assert fail(q, qpi, "TaintToleration") is UNSCHEDULABLE
    before = dict(q.incoming_counts())
    newer = qpi.pod
    if change in ("label", "both"):
        newer = dataclasses.replace(newer, labels={"app": "x"})
    if change in ("toleration", "both"):
        newer = dataclasses.replace(
            newer, tolerations=(*newer.tolerations, model.Toleration(key="k", operator="Exists"))
        )
    clock.advance(1)
    q.update(newer)
    moved = {k: v - before.get(k, 0) for k, v in q.incoming_counts().items() if v != before.get(k, 0)}
    assert moved == ({("active", counted): 1} if counted else {})


def test_update_unknown_pod_adds_it(q: SchedulingQueue) -> None:
    q.update(pod("a"))
    assert q.where("uid-a") is ACTIVE
    assert q.incoming_counts() == {("active", "UnscheduledPodAdd"): 1}  # upstream's addPod


def test_update_in_flight_is_applied_on_requeue(q: SchedulingQueue) -> None:
    """The scheduling thread keeps its version; the requeue takes the newest one."""
    q.add(pod("a"))
    qpi = pop(q)
    popped = qpi.pod
    newer = dataclasses.replace(popped, resource_version="2")
    q.update(newer)
    assert qpi.pod is popped
    assert not q.contains("uid-a")
    assert fail(q, qpi) is UNSCHEDULABLE  # a status-only change is no reason to retry
    assert qpi.pod is newer


def test_spec_update_in_flight_requeues_to_backoff(q: SchedulingQueue) -> None:
    """A relevant change during the cycle was not seen by it, so the pod is retried after backoff."""
    q.add(pod("a"))
    qpi = pop(q)
    q.update(dataclasses.replace(qpi.pod, node_selector={"zone": "b"}))
    assert fail(q, qpi) is BACKOFF


# -- delete -------------------------------------------------------------------------------------


@pytest.mark.parametrize("where", [ACTIVE, BACKOFF, UNSCHEDULABLE, GATED])
@pytest.mark.parametrize("by_uid", [True, False], ids=["uid", "pod"])
def test_delete_from_each_subqueue(q: SchedulingQueue, where: SubQueue, by_uid: bool) -> None:
    p = pod("a", gates=("g",) if where is GATED else ())
    if where is ACTIVE or where is GATED:
        q.add(p)
    elif where is BACKOFF:
        make_backoff(q, p)
    else:
        make_unschedulable(q, p)
    q.add(pod("other"))
    assert q.where(p.uid) is where
    assert q.delete(p.uid if by_uid else p)
    assert not q.contains(p.uid)
    assert len(q) == 1
    assert not q.delete(p.uid)


@pytest.mark.parametrize("requeue", ["unschedulable", "backoff"])
def test_delete_in_flight_skips_requeue(q: SchedulingQueue, requeue: str) -> None:
    q.add(pod("a"))
    qpi = pop(q)
    assert q.delete("uid-a")
    result = fail(q, qpi) if requeue == "unschedulable" else q.add_backoff(qpi)
    assert result is None
    q.done(qpi.uid)
    assert len(q) == 0
    assert q.in_flight_count() == 0


def test_add_after_delete_in_flight_requeues(q: SchedulingQueue) -> None:
    """If the object shows up again while in flight, the requeue happens with it."""
    q.add(pod("a"))
    qpi = pop(q)
    q.delete("uid-a")
    newer = dataclasses.replace(qpi.pod, resource_version="3")
    q.add(newer)
    assert fail(q, qpi) is UNSCHEDULABLE
    assert qpi.pod is newer


# -- move requests ------------------------------------------------------------------------------


def test_failure_without_move_request_is_unschedulable(q: SchedulingQueue) -> None:
    q.move_all_to_active_or_backoff(ce.NODE_ADD)  # before the cycle: does not count
    q.add(pod("a"))
    qpi = pop(q)
    assert fail(q, qpi) is UNSCHEDULABLE


def test_move_request_during_cycle_sends_failure_to_backoff(q: SchedulingQueue) -> None:
    """An event that arrived while the pod was being scheduled may have fixed it."""
    q.add(pod("a"))
    qpi = pop(q)
    cycle = q.scheduling_cycle
    assert q.move_all_to_active_or_backoff(ce.NODE_ADD) == 0
    assert q.add_unschedulable_if_not_present(qpi, cycle) is BACKOFF


def test_move_request_in_later_cycle_also_counts(q: SchedulingQueue) -> None:
    """The binder may report a failure after later pods were popped; later events count too."""
    q.add(pod("a"))
    q.add(pod("b"))
    a = pop(q)
    a_cycle = q.scheduling_cycle
    pop(q)
    q.move_all_to_active_or_backoff(ce.ASSIGNED_POD_DELETE)
    a.unschedulable_plugins.add("NodeResourcesFit")
    assert q.add_unschedulable_if_not_present(a, a_cycle) is BACKOFF


def test_move_all_moves_unschedulable_pods(q: SchedulingQueue, clock: FakeClock) -> None:
    """Still backing off -> backoffQ; backoff over -> activeQ."""
    make_unschedulable(q, pod("a"))
    clock.advance(1)
    make_unschedulable(q, pod("b"))
    assert q.move_all_to_active_or_backoff(NODE_LABEL) == 2
    assert (q.where("uid-a"), q.where("uid-b")) == (ACTIVE, BACKOFF)
    assert q.incoming_counts()[("active", NODE_LABEL.label)] == 1
    assert q.incoming_counts()[("backoff", NODE_LABEL.label)] == 1


def test_move_all_pre_check_filters(q: SchedulingQueue) -> None:
    make_unschedulable(q, pod("a", priority=1))
    make_unschedulable(q, pod("b", priority=2))
    assert q.move_all_to_active_or_backoff(ce.NODE_ADD, pre_check=lambda p: p.priority == 2) == 1
    assert (q.where("uid-a"), q.where("uid-b")) == (UNSCHEDULABLE, BACKOFF)


def test_move_all_plugins_filter(clock: FakeClock) -> None:
    """Only pods rejected by a plugin that cares about the event move."""
    hints = PluginHints({ce.ASSIGNED_POD_DELETE: {"NodeResourcesFit", "NodePorts"}})
    q = SchedulingQueue(priority_less, clock=clock, hints=hints)  # type: ignore[arg-type]
    for name, plugin in [("a", "NodeAffinity"), ("b", "NodeResourcesFit")]:
        q.add(pod(name))
        qpi = pop(q)
        assert fail(q, qpi, plugin) is UNSCHEDULABLE
        q.done(qpi.uid)
    assert q.move_all_to_active_or_backoff(ce.ASSIGNED_POD_DELETE) == 1
    assert (q.where("uid-a"), q.where("uid-b")) == (UNSCHEDULABLE, BACKOFF)


# -- leftover flush -----------------------------------------------------------------------------


def test_unschedulable_leftover_flushed_after_five_minutes(q: SchedulingQueue, clock: FakeClock) -> None:
    make_unschedulable(q, pod("a"))
    clock.advance(300)
    assert q.flush_unschedulable_leftover() == 0
    assert q.where("uid-a") is UNSCHEDULABLE
    clock.advance(0.5)
    assert q.flush_unschedulable_leftover() == 1
    assert q.where("uid-a") is ACTIVE
    assert q.incoming_counts()[("active", queue.UNSCHEDULABLE_TIMEOUT)] == 1


def test_leftover_flush_custom_limit(clock: FakeClock) -> None:
    q = SchedulingQueue(priority_less, clock=clock, max_in_unschedulable=60.0)
    make_unschedulable(q, pod("a"))
    make_unschedulable(q, pod("b"))
    clock.advance(61)
    assert q.flush_unschedulable_leftover() == 2
    assert q.pending_counts() == {"active": 2, "backoff": 0, "unschedulable": 0, "gated": 0}


def test_run_flush_loops_moves_backoff_and_stops(q: SchedulingQueue, clock: FakeClock) -> None:
    make_backoff(q, pod("a"))
    make_unschedulable(q, pod("b"))
    clock.advance(301)
    stop = threading.Event()
    t = threading.Thread(
        target=q.run_flush_loops, args=(stop,), kwargs={"backoff_interval": 0.01, "leftover_interval": 0.01}
    )
    t.start()
    try:
        # The loop moves both; pop(timeout) would flush backoff itself, so watch the counts instead.
        deadline = threading.Event()
        for _ in range(50):
            if q.pending_counts()["active"] == 2:
                break
            deadline.wait(0.01)
        assert q.pending_counts() == {"active": 2, "backoff": 0, "unschedulable": 0, "gated": 0}
    finally:
        stop.set()
        t.join(timeout=0.5)
    assert not t.is_alive()


def test_run_flush_loops_ends_on_close(q: SchedulingQueue) -> None:
    t = threading.Thread(target=q.run_flush_loops, args=(threading.Event(),), kwargs={"backoff_interval": 0.01})
    t.start()
    q.close()
    t.join(timeout=0.5)
    assert not t.is_alive()


# -- blocking pop and close ---------------------------------------------------------------------


def _pop_in_thread(q: SchedulingQueue, timeout: float | None) -> tuple[threading.Thread, list[object]]:
    out: list[object] = []
    started = threading.Event()

    def run() -> None:
        started.set()
        out.append(q.pop(timeout=timeout))

    t = threading.Thread(target=run)
    t.start()
    assert started.wait(0.5)
    return t, out


def test_pop_blocks_until_add(q: SchedulingQueue) -> None:
    t, out = _pop_in_thread(q, timeout=None)
    t.join(timeout=0.05)
    assert t.is_alive()
    assert out == []
    q.add(pod("a"))
    t.join(timeout=0.5)
    assert not t.is_alive()
    assert isinstance(out[0], QueuedPodInfo)
    assert out[0].pod.name == "a"


def test_pop_wakes_on_move_to_active(q: SchedulingQueue, clock: FakeClock) -> None:
    make_unschedulable(q, pod("a"))
    clock.advance(1)
    t, out = _pop_in_thread(q, timeout=0.5)
    q.move_all_to_active_or_backoff(ce.NODE_ADD)
    t.join(timeout=0.5)
    assert isinstance(out[0], QueuedPodInfo)


def test_pop_wakes_on_explicit_flush(q: SchedulingQueue, clock: FakeClock) -> None:
    make_backoff(q, pod("a"))
    t, out = _pop_in_thread(q, timeout=0.5)
    clock.advance(1)
    q.flush_backoff_completed()
    t.join(timeout=0.5)
    assert isinstance(out[0], QueuedPodInfo)


def test_pop_wakes_on_close(q: SchedulingQueue) -> None:
    threads = [_pop_in_thread(q, timeout=None) for _ in range(3)]
    q.close()
    for t, out in threads:
        t.join(timeout=0.5)
        assert not t.is_alive()
        assert out == [None]
    assert q.closed


def test_pop_after_close_returns_none_at_once(q: SchedulingQueue) -> None:
    q.add(pod("a"))
    q.close()
    assert q.pop(timeout=None) is None


def test_pop_timeout_returns_none(q: SchedulingQueue) -> None:
    assert q.pop(timeout=0.01) is None
    assert q.scheduling_cycle == 0


# -- PreEnqueue and gated pods -------------------------------------------------------------------


def make_gated(q: SchedulingQueue, name: str = "a", gates: tuple[str, ...] = ("example.com/a",)) -> QueuedPodInfo:
    q.add(pod(name, gates=gates))
    qpi = q.get(f"uid-{name}")
    assert qpi is not None
    assert q.where(qpi.uid) is GATED
    return qpi


def test_gated_pod_is_never_popped(q: SchedulingQueue, clock: FakeClock) -> None:
    """PreEnqueue keeps it out of activeQ: no pop, no attempt, no cycle, however long it waits."""
    qpi = make_gated(q)
    q.add(pod("b"))
    assert pop(q).pod.name == "b"
    for _ in range(3):
        clock.advance(600)
        q.flush_backoff_completed()
        q.flush_unschedulable_leftover()
        assert q.pop(timeout=0) is None
    assert (qpi.attempts, qpi.initial_attempt_timestamp, qpi.gating_plugin) == (0, None, "SchedulingGates")
    assert qpi.gated
    assert "SchedulingGates" in qpi.unschedulable_plugins
    assert q.scheduling_cycle == 1
    assert q.in_flight_count() == 1  # only b
    assert q.contains(qpi.uid)
    assert q.incoming_counts()[("unschedulable", queue.POD_ADD)] == 1


def test_blocked_pop_ignores_gated_add(q: SchedulingQueue) -> None:
    """Adding a gated pod does not hand anything to a waiting pop."""
    t, out = _pop_in_thread(q, timeout=0.1)
    q.add(pod("a", gates=("g",)))
    t.join(timeout=1)
    assert out == [None]


@pytest.mark.parametrize(
    ("event", "pre_check", "plugins"),
    [
        pytest.param(ce.NODE_ADD, None, None, id="node-add-wildcard"),
        pytest.param(NODE_LABEL, lambda p: True, None, id="pre-check-true"),
        pytest.param(
            ce.ASSIGNED_POD_DELETE, None, {"SchedulingGates", "NodeResourcesFit"}, id="event-naming-the-plugin"
        ),
        pytest.param(ce.ASSIGNED_POD_ADD, None, {"NodeResourcesFit"}, id="plugin-filter"),
    ],
)
def test_cluster_events_do_not_move_gated_pods(
    clock: FakeClock, event: ce.ClusterEvent, pre_check: object, plugins: set[str] | None
) -> None:
    """Only the pod's own update can remove a gate, so no cluster event moves it (upstream skips
    SchedulingGates-gated pods in movePodsToActiveOrBackoffQueue), while unschedulable pods move."""
    hints = None if plugins is None else PluginHints({event: plugins})
    q = SchedulingQueue(priority_less, clock=clock, pre_enqueue=gates_check, hints=hints)  # type: ignore[arg-type]
    gated = make_gated(q)
    other = make_unschedulable(q, pod("b"))
    clock.advance(1)
    moved = q.move_all_to_active_or_backoff(event, pre_check=pre_check)  # type: ignore[arg-type]
    assert moved == 1
    assert (q.where(gated.uid), q.where(other.uid)) == (GATED, ACTIVE)
    assert q.get(gated.uid) is gated


def test_leftover_flush_does_not_move_gated_pods(q: SchedulingQueue, clock: FakeClock) -> None:
    """The 5-minute flush retries unschedulable pods only: time does not remove a gate."""
    gated = make_gated(q)
    other = make_unschedulable(q, pod("b"))
    clock.advance(301)
    assert q.flush_unschedulable_leftover() == 1
    assert (q.where(gated.uid), q.where(other.uid)) == (GATED, ACTIVE)
    clock.advance(3600)
    assert q.flush_unschedulable_leftover() == 0
    assert q.where(gated.uid) is GATED


@pytest.mark.parametrize(
    ("gates", "new_gates", "change", "where"),
    [
        pytest.param(("a", "b"), ("b",), {}, GATED, id="one-of-two-removed-stays-gated"),
        pytest.param(("a", "b"), ("a",), {}, GATED, id="other-of-two-removed-stays-gated"),
        pytest.param(("a", "b"), (), {}, ACTIVE, id="both-removed-goes-active"),
        pytest.param(("a",), (), {}, ACTIVE, id="last-removed-goes-active"),
        pytest.param(("a",), ("a",), {"resource_version": "9"}, GATED, id="status-only-stays"),
        pytest.param(("a",), ("a",), {"labels": {"x": "y"}}, GATED, id="other-spec-change-stays"),
        pytest.param(("a",), (), {"priority": 5}, ACTIVE, id="last-removed-with-other-changes"),
    ],
)
def test_update_of_gated_pod(
    q: SchedulingQueue,
    clock: FakeClock,
    gates: tuple[str, ...],
    new_gates: tuple[str, ...],
    change: dict[str, object],
    where: SubQueue,
) -> None:
    """Its update runs PreEnqueue again: gated while any gate remains; with none left, straight to
    activeQ, with no backoff (it was never attempted) and its original queue time."""
    qpi = make_gated(q, gates=gates)
    added_at = qpi.timestamp
    clock.advance(0.2)  # well inside a 1 s backoff
    newer = dataclasses.replace(qpi.pod, scheduling_gates=new_gates, **change)  # type: ignore[arg-type]
    q.update(newer)
    assert q.where(qpi.uid) is where
    assert q.get(qpi.uid) is qpi
    assert qpi.pod is newer
    assert qpi.timestamp == added_at
    assert qpi.gated is (where is GATED)
    if where is ACTIVE:
        assert pop(q) is qpi
        assert q.incoming_counts()[("active", "TargetPodUpdatePodSchedulingGatesEliminated")] == 1
    else:
        assert q.pop(timeout=0) is None
        assert q.incoming_counts()[("unschedulable", queue.POD_ADD)] == 1  # counted once, on add


def test_removing_last_gate_wakes_a_waiting_pop(q: SchedulingQueue) -> None:
    qpi = make_gated(q)
    t, out = _pop_in_thread(q, timeout=2.0)
    q.update(dataclasses.replace(qpi.pod, scheduling_gates=()))
    t.join(timeout=2.0)
    assert out == [qpi]


def test_update_of_unknown_gated_pod_gates_it(q: SchedulingQueue) -> None:
    """An update for a pod the queue never saw is an add, through PreEnqueue."""
    q.update(pod("a", gates=("g",)))
    assert q.where("uid-a") is GATED
    assert q.incoming_counts() == {("unschedulable", "UnscheduledPodAdd"): 1}


def test_delete_gated_pod(q: SchedulingQueue) -> None:
    qpi = make_gated(q)
    assert q.delete(qpi.pod)
    assert q.where(qpi.uid) is None
    assert len(q) == 0
    assert q.pending_counts()["gated"] == 0
    q.update(dataclasses.replace(qpi.pod, scheduling_gates=()))  # a late update re-adds it, ungated
    assert q.where(qpi.uid) is ACTIVE


def test_pending_counts_report_gated_apart(q: SchedulingQueue) -> None:
    """``unschedulable`` excludes gated pods; ``gated`` counts them (kube-scheduler's pending_pods)."""
    make_backoff(q, pod("b"))
    make_unschedulable(q, pod("c"))
    make_gated(q, "g1")
    make_gated(q, "g2", gates=("x", "y"))
    q.add(pod("a"))
    assert q.pending_counts() == {"active": 1, "backoff": 1, "unschedulable": 1, "gated": 2}
    assert len(q) == 5
    assert sorted((w.value, p.name) for w, p in q.pending_pods()) == [
        ("active", "a"),
        ("backoff", "b"),
        ("gated", "g1"),
        ("gated", "g2"),
        ("unschedulable", "c"),
    ]
    q.update(dataclasses.replace(pod("g1"), scheduling_gates=()))
    assert q.pending_counts() == {"active": 2, "backoff": 1, "unschedulable": 1, "gated": 1}


class Switch:
    """A PreEnqueue callback a test flips: pods named in ``held`` are rejected by ``plugin``."""

    def __init__(self, plugin: str = "QuotaGate") -> None:
        self.plugin = plugin
        self.held: set[str] = set()
        self.calls = 0

    def __call__(self, p: model.Pod) -> str | None:
        self.calls += 1
        return gates_check(p) or (self.plugin if p.name in self.held else None)


@pytest.fixture
def switch() -> Switch:
    return Switch()


@pytest.fixture
def sq(clock: FakeClock, switch: Switch) -> SchedulingQueue:
    return SchedulingQueue(priority_less, clock=clock, pre_enqueue=switch)


def test_backoff_completion_runs_pre_enqueue(sq: SchedulingQueue, clock: FakeClock, switch: Switch) -> None:
    """Every way into activeQ asks PreEnqueue, the end of a backoff included."""
    make_backoff(sq, pod("a"))
    switch.held.add("a")
    clock.advance(1)
    assert sq.flush_backoff_completed() == 0
    assert sq.where("uid-a") is GATED
    assert sq.pop(timeout=0) is None


def test_other_pre_enqueue_plugins_are_rechecked_on_events(
    sq: SchedulingQueue, clock: FakeClock, switch: Switch
) -> None:
    """Pods gated by a PreEnqueue plugin other than SchedulingGates move on cluster events like
    unschedulable pods (that plugin may depend on cluster state); the move runs PreEnqueue again,
    and a pod that passes skips backoff."""
    switch.held.add("a")
    sq.add(pod("a"))
    sq.add(pod("g", gates=("g",)))
    assert (sq.where("uid-a"), sq.where("uid-g")) == (GATED, GATED)
    assert sq.move_all_to_active_or_backoff(ce.NODE_ADD) == 1  # a re-checked, g skipped
    assert sq.where("uid-a") is GATED
    sq._hints = PluginHints({NODE_LABEL: {"NodeResourcesFit"}, ce.NODE_ADD: {"QuotaGate"}})  # type: ignore[assignment]
    assert sq.move_all_to_active_or_backoff(NODE_LABEL) == 0
    switch.held.clear()
    assert sq.move_all_to_active_or_backoff(ce.NODE_ADD) == 1
    assert sq.where("uid-a") is ACTIVE  # no backoff, though no time passed
    assert sq.where("uid-g") is GATED


def test_leftover_flush_rechecks_other_gates(sq: SchedulingQueue, clock: FakeClock, switch: Switch) -> None:
    switch.held.add("a")
    sq.add(pod("a"))
    clock.advance(301)
    switch.held.clear()
    assert sq.flush_unschedulable_leftover() == 1
    assert sq.where("uid-a") is ACTIVE


def test_recheck_pre_enqueue_after_plugins_change(sq: SchedulingQueue, switch: Switch) -> None:
    """A config reload may change the PreEnqueue plugins: gated pods that pass now are released,
    queued pods that fail now are held back."""
    switch.held.add("a")
    sq.add(pod("a"))
    sq.add(pod("b"))
    sq.add(pod("g", gates=("g",)))
    switch.held = {"b"}
    assert sq.recheck_pre_enqueue() == (1, 1)
    assert (sq.where("uid-a"), sq.where("uid-b"), sq.where("uid-g")) == (ACTIVE, GATED, GATED)
    assert pop(sq).pod.name == "a"
    assert sq.pop(timeout=0) is None
    assert sq.incoming_counts()[("active", queue.PRE_ENQUEUE_CHANGED)] == 1


def test_requeue_after_failure_is_not_gated_until_it_heads_to_active(
    sq: SchedulingQueue, clock: FakeClock, switch: Switch
) -> None:
    """A failed attempt parks the pod as unschedulable (no PreEnqueue, as upstream); PreEnqueue
    runs when an event would move it to activeQ."""
    qpi = make_unschedulable(sq, pod("a"))
    assert not qpi.gated
    switch.held.add("a")
    clock.advance(1)
    assert sq.move_all_to_active_or_backoff(NODE_LABEL) == 1
    assert sq.where("uid-a") is GATED
    assert qpi.unschedulable_plugins == {"NodeResourcesFit", "QuotaGate"}


def test_without_pre_enqueue_gates_are_not_checked(clock: FakeClock) -> None:
    """A queue without the callback (a profile with no PreEnqueue plugin) lets every pod in."""
    q = SchedulingQueue(priority_less, clock=clock)
    q.add(pod("a", gates=("g",)))
    assert pop(q).pod.name == "a"


# -- introspection ------------------------------------------------------------------------------


def test_pending_counts_len_and_pending_pods(q: SchedulingQueue) -> None:
    make_backoff(q, pod("b"))
    make_unschedulable(q, pod("c"))
    q.add(pod("a"))
    q.add(pod("d"))
    assert pop(q).pod.name == "a"  # in flight: counted nowhere
    assert q.pending_counts() == {"active": 1, "backoff": 1, "unschedulable": 1, "gated": 0}
    assert len(q) == 3
    assert q.in_flight_count() == 1
    assert sorted((w.value, p.name) for w, p in q.pending_pods()) == [
        ("active", "d"),
        ("backoff", "b"),
        ("unschedulable", "c"),
    ]
    assert q.contains("uid-b")
    assert not q.contains("uid-a")
    assert q.get("uid-zzz") is None


# -- properties ---------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(
    pods=st.lists(st.tuples(st.integers(-3, 3), st.integers(0, 5)), min_size=1, max_size=25),
    edits=st.lists(st.tuples(st.integers(0, 24), st.sampled_from(["delete", "reprioritise"]), st.integers(-3, 3))),
)
def test_pops_follow_less_order(pods: list[tuple[int, int]], edits: list[tuple[int, str, int]]) -> None:
    """Whatever the priorities, timestamps, updates and deletes, pops come out in ``less`` order,
    with ties in insertion order."""
    clock = FakeClock()
    q = SchedulingQueue(priority_less, clock=clock)
    order = {}
    for i, (prio, ts) in enumerate(pods):
        clock.now = float(ts)
        p = make_pod(f"p{i}").uid(f"u{i}").priority(prio).build()
        q.add(p)
        order[p.uid] = i
    alive = set(order)
    for idx, op, prio in edits:
        uid = f"u{idx}"
        if uid not in alive:
            continue
        if op == "delete":
            assert q.delete(uid)
            alive.discard(uid)
        else:
            current = q.get(uid)
            assert current is not None
            q.update(dataclasses.replace(current.pod, priority=prio))
    popped = []
    while (head := q.pop(timeout=0)) is not None:
        popped.append(head)
    assert {p.uid for p in popped} == alive
    for a, b in itertools.pairwise(popped):
        assert not priority_less(b, a)
        if not priority_less(a, b):
            assert order[a.uid] < order[b.uid]


def test_concurrent_producers_and_consumer_lose_nothing() -> None:
    """Informer threads adding while the scheduling thread pops: every pod pops exactly once."""
    q = SchedulingQueue(priority_less)
    pods = [[make_pod(f"t{t}-{i}").uid(f"t{t}-{i}").build() for i in range(50)] for t in range(4)]

    def produce(batch: list[model.Pod]) -> None:
        for p in batch:
            q.add(p)

    producers = [threading.Thread(target=produce, args=(batch,)) for batch in pods]
    for t in producers:
        t.start()
    seen: list[str] = []
    while len(seen) < 200 and (qpi := q.pop(timeout=0.5)) is not None:
        seen.append(qpi.uid)
        q.done(qpi.uid)
    for t in producers:
        t.join(timeout=0.5)
    assert sorted(seen) == sorted(p.uid for batch in pods for p in batch)
    assert len(q) == 0


# --- group cycles and holds: take_members, activate, release_gated, next_backoff_expiry ---------


def test_take_members_takes_a_groups_pods_from_every_sub_queue_but_gated(q: SchedulingQueue) -> None:
    """A group cycle takes its members wherever they wait (the group backs off as one unit);
    a gated member stays, and a pod of another group is untouched."""
    active = pod("g-active")
    q.add(active)
    backing = pod("g-backoff", priority=5)
    q.add(backing)
    assert q.add_backoff(pop(q)) is BACKOFF  # the higher-priority one is popped first
    waiting = make_unschedulable(q, pod("g-unsched"))
    q.add(pod("g-gated", gates=("example.com/hold",)))
    q.add(pod("other"))
    cycle = q.scheduling_cycle
    taken = q.take_members(lambda p: p.name.startswith("g-"))
    assert [t.pod.name for t in taken] == ["g-backoff", "g-active", "g-unsched"]  # queue order
    assert {q.where(t.uid) for t in taken} == {None}  # in flight now
    assert all(t.attempts >= 1 for t in taken)
    assert waiting.attempts == 2
    assert q.scheduling_cycle == cycle  # one cycle for the group
    assert q.where("uid-g-gated") is GATED
    assert q.where("uid-other") is ACTIVE


def test_activate_moves_unschedulable_and_backing_off_pods_to_active(q: SchedulingQueue) -> None:
    make_unschedulable(q, pod("u"))
    q.add(pod("b"))
    assert q.add_backoff(pop(q)) is BACKOFF
    q.add(pod("gated", gates=("example.com/hold",)))
    moved = q.activate([pod("u"), pod("b"), pod("gated"), pod("unknown")])
    assert moved == 2
    assert (q.where("uid-u"), q.where("uid-b"), q.where("uid-gated")) == (ACTIVE, ACTIVE, GATED)


def test_release_gated_runs_pre_enqueue_again_for_those_pods_only() -> None:
    held = {"uid-a", "uid-b"}
    sq = SchedulingQueue(priority_less, clock=FakeClock(), pre_enqueue=lambda p: "Hold" if p.uid in held else None)
    sq.add(pod("a"))
    sq.add(pod("b"))
    assert (sq.where("uid-a"), sq.where("uid-b")) == (GATED, GATED)
    held.clear()
    assert sq.release_gated(["uid-a"]) == 1
    assert (sq.where("uid-a"), sq.where("uid-b")) == (ACTIVE, GATED)


def test_next_backoff_expiry_is_the_earliest_backing_off_pod(q: SchedulingQueue, clock: FakeClock) -> None:
    assert q.next_backoff_expiry() is None
    q.add(pod("x"))
    qpi = pop(q)
    assert q.add_backoff(qpi) is BACKOFF
    assert q.next_backoff_expiry() == q.backoff_expiry(qpi)
    clock.advance(q.backoff_expiry(qpi) - clock())
    assert pop(q).uid == "uid-x"


def test_a_plugins_targets_narrow_the_pods_its_event_is_offered_to(clock: FakeClock) -> None:
    """upstream's PreQueueingHint: a plugin that names the pods a change concerns (a claim made
    from one pod's template) has the change offered to those pods only."""
    hints = PluginHints({ce.ASSIGNED_POD_DELETE: {"DynamicResources"}})
    hints.only = {"DynamicResources": frozenset({"uid-b"})}  # type: ignore[attr-defined]
    q = SchedulingQueue(priority_less, clock=clock, hints=hints)  # type: ignore[arg-type]
    for name in ("a", "b"):
        q.add(pod(name))
        qpi = pop(q)
        assert fail(q, qpi, "DynamicResources") is UNSCHEDULABLE
        q.done(qpi.uid)
    assert q.move_all_to_active_or_backoff(ce.ASSIGNED_POD_DELETE) == 1
    assert (q.where("uid-a"), q.where("uid-b")) == (UNSCHEDULABLE, BACKOFF)


def test_keyed_pods_are_offered_only_the_events_that_carry_their_key(clock: FakeClock) -> None:
    """A plugin's keyed index (cluster_events.PodKeysFn / EventKeysFn): of 200 pods each waiting
    for its own peer, an added peer is offered to its one pod, not to all 200; a pod without keys
    is always offered; removal, an in-place update and a re-key keep the index right."""
    hints = KeyedHints(ce.ASSIGNED_POD_ADD)
    q = SchedulingQueue(priority_less, clock=clock, hints=hints)  # type: ignore[arg-type]
    for i in range(200):
        q.add(make_pod(f"w{i}").uid(f"uid-w{i}").label("peer", f"peer-{i}").build())
        assert fail(q, pop(q), "P") is UNSCHEDULABLE
    q.add(pod("free"))  # no peer label: no keys
    assert fail(q, pop(q), "P") is UNSCHEDULABLE
    assert q.move_all_to_active_or_backoff(ce.ASSIGNED_POD_ADD, None, make_pod("peer-7").build()) == 1
    assert q.where("uid-w7") is BACKOFF
    assert sorted(hints.asked) == ["free", "w7"]
    hints.asked.clear()
    assert q.move_all_to_active_or_backoff(ce.ASSIGNED_POD_ADD, None, make_pod("peer-7").build()) == 0
    assert hints.asked == ["free"]  # w7 left unschedulable, and the index with it
    q.update(make_pod("w8").uid("uid-w8").label("peer", "peer-x").build())  # relabelled in place
    hints.asked.clear()
    assert q.move_all_to_active_or_backoff(ce.ASSIGNED_POD_ADD, None, make_pod("peer-8").build()) == 0
    assert sorted(hints.asked) == ["free"]
    assert q.move_all_to_active_or_backoff(ce.ASSIGNED_POD_ADD, None, make_pod("peer-x").build()) == 1
    assert q.where("uid-w8") is BACKOFF
    hints.keyed = False
    q.rekey_unschedulable()
    hints.asked.clear()
    assert q.move_all_to_active_or_backoff(ce.ASSIGNED_POD_ADD, None, make_pod("peer-9").build()) == 1
    assert len(hints.asked) == 199  # every waiting pod again: 198 peers and "free"
