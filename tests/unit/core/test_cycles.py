"""Component tests of the scheduling loop and the binding cycle with fake ports.

The real Scheduler, SchedulingCycle, BindingCycle, queue, cache and frameworks (the default profile
plus small test plugins) run against a recording fake API client, an in-memory event sink and a
fake evictor, so every routing decision can be checked without a cluster: the binding cycle routes
on :class:`BindResult` outcomes and Status codes, a bind's retries are its own (the old shared
counter over-counted under concurrency), Permit waits end by allow / reject / timeout, and a
preemption's result reaches the nominator and the evictor port.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pytest

from custom_scheduler.api.model import Pod
from custom_scheduler.config import load_config
from custom_scheduler.config.schema import SchedulerConfig
from custom_scheduler.core import queue as q
from custom_scheduler.core.assembly import FrameworkInputs, Ports, assemble
from custom_scheduler.core.binding import Executor, PoolExecutor
from custom_scheduler.core.cache import Cache
from custom_scheduler.core.ports import Observer, RecordingEvents
from custom_scheduler.core.scheduler import Scheduler
from custom_scheduler.framework.clusterapi import Timeout, api_errors
from custom_scheduler.framework.fence import Fence
from custom_scheduler.framework.interface import Handle
from custom_scheduler.framework.profiles import build_frameworks
from custom_scheduler.framework.registry import PluginSpec, Registry, no_args
from custom_scheduler.framework.runtime import Framework
from custom_scheduler.framework.types import SUCCESS, Code, CycleState, Status
from custom_scheduler.plugins.builtin import full_registry
from tests.builders import make_node, make_pod

# --- fakes ---------------------------------------------------------------------------------------


@dataclass
class FakeClient:
    """Answers Binding POSTs from a script per pod name: a list of exceptions raised in turn, then 201."""

    script: dict[str, list[Exception]] = field(default_factory=dict)
    posts: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def post(self, path: str, body: Mapping[str, Any], *, timeout: Timeout = (0.0, 0.0)) -> Any:
        name = path.split("/pods/")[1].split("/", maxsplit=1)[0]
        with self.lock:
            self.posts.append(name)
            todo = self.script.get(name)
            fault = todo.pop(0) if todo else None
        if fault is not None:
            raise fault
        return {}

    # The rest of ClusterClient: nothing these tests run sends them.
    def get(self, path: str, *, timeout: Timeout = (0.0, 0.0)) -> Any:
        raise AssertionError(f"unexpected GET {path}")

    def put(self, path: str, body: Mapping[str, Any], *, timeout: Timeout = (0.0, 0.0)) -> Any:
        raise AssertionError(f"unexpected PUT {path}")

    def patch(
        self, path: str, body: Mapping[str, Any], content_type: str = "", *, timeout: Timeout = (0.0, 0.0)
    ) -> Any:
        raise AssertionError(f"unexpected PATCH {path}")

    def delete(self, path: str, body: Mapping[str, Any] | None = None, *, timeout: Timeout = (0.0, 0.0)) -> Any:
        raise AssertionError(f"unexpected DELETE {path}")


class BoundRecorder(Observer):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.retries: list[int] = []
        self.done = threading.Condition(self.lock)

    def bound(self, profile: str, seconds: float, retries: int) -> None:
        with self.done:
            self.retries.append(retries)
            self.done.notify_all()

    def wait_for(self, n: int, timeout: float = 10.0) -> None:
        with self.done:
            assert self.done.wait_for(lambda: len(self.retries) >= n, timeout), self.retries


@dataclass
class FakeEvictor:
    started: list[tuple[str, str, list[str]]] = field(default_factory=list)
    cleared: list[str] = field(default_factory=list)
    busy: set[str] = field(default_factory=set)

    def start(self, preemptor: Pod, node: str, victims: Sequence[Pod], cleared: Sequence[Pod]) -> None:
        self.started.append((preemptor.key, node, [v.key for v in victims]))
        self.busy.add(preemptor.uid)

    def clear_nominations(self, pods: Sequence[Pod]) -> None:
        self.cleared.extend(p.key for p in pods)

    def running(self, uid: str) -> bool:
        return uid in self.busy


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class GatePermit:
    """A Permit plugin that parks pods labelled ``wait=yes`` for ``timeout`` seconds."""

    name: ClassVar[str] = "GatePermit"
    timeout: ClassVar[float] = 5.0

    def __init__(self, args: Any, handle: Handle) -> None:
        self.handle = handle

    def permit(self, state: CycleState, pod: Pod, node_name: str) -> tuple[Status, float]:
        if pod.labels.get("wait") == "yes":
            return Status(Code.WAIT), self.timeout
        return SUCCESS, 0.0


WITH_PERMIT = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: custom-scheduler
  plugins:
    permit:
      enabled: [{name: GatePermit}]
"""

PLAIN = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: custom-scheduler
"""


@dataclass
class Env:
    sched: Scheduler
    client: FakeClient
    events: RecordingEvents
    observer: BoundRecorder
    evictor: FakeEvictor
    clock: Clock
    fence: Fence

    def queued(self, pod: Pod) -> q.SubQueue | None:
        return self.sched.queue.where(pod.uid)

    def run_one(self) -> None:
        qpi = self.sched.queue.pop(timeout=1)
        assert qpi is not None
        self.sched.schedule_one(qpi)


def env(
    *,
    config: str = PLAIN,
    executor: Executor | None = None,
    script: dict[str, list[Exception]] | None = None,
    nodes: int = 2,
    specs: Sequence[PluginSpec] = (),
) -> Env:
    registry = Registry(full_registry())
    registry.register(PluginSpec(GatePermit.name, GatePermit, no_args))
    for spec in specs:
        registry.register(spec)
    cfg = load_config(config, registry)
    clock = Clock()
    cache = Cache()
    for i in range(nodes):
        cache.add_node(make_node(f"n{i}").capacity(cpu="4", memory="8Gi", pods="110").build())
    client = FakeClient(script or {})
    events = RecordingEvents()
    observer = BoundRecorder()
    evictor = FakeEvictor()
    fence = Fence()

    def frameworks(config: SchedulerConfig, inputs: FrameworkInputs) -> Mapping[str, Framework]:
        # Permit waits expire on the test's clock, when it says (no timer thread).
        return build_frameworks(
            config.profiles,
            registry,
            inputs.snapshot,
            client=client,
            nominated_lister=inputs.nominated,
            activator=inputs.activate,
            preempting=inputs.preempting,
            fence=fence,
            permit_clock=clock,
        )

    ports = Ports(events, evictor=evictor, executor=executor or Executor(), observer=observer, fence=fence)
    sched = assemble(cfg, cache, frameworks, ports, clock=clock).scheduler
    return Env(sched, client, events, observer, evictor, clock, fence)


def unavailable() -> Exception:
    return api_errors.ServerError(503, "ServiceUnavailable", "try again")


# --- binding results -----------------------------------------------------------------------------


def test_each_bind_reports_its_own_retries_under_concurrency() -> None:
    """Eight pods bound by four threads at once, each answered 503 a different number of times:
    the retries the binding cycle reports are per call (a shared counter on the plugin would mix them)."""
    script = {f"p{i}": [unavailable() for _ in range(i % 4)] for i in range(8)}
    e = env(executor=PoolExecutor(4), script=script, nodes=4)
    for i in range(8):
        e.sched.on_pod_add(make_pod(f"p{i}").req(cpu="100m").build())
    for _ in range(8):
        e.run_one()
    e.observer.wait_for(8)
    assert sorted(e.observer.retries) == sorted(i % 4 for i in range(8))
    assert sum(e.observer.retries) == len(e.client.posts) - 8
    e.sched.shutdown(5)


@pytest.mark.parametrize(
    ("fault", "requeued", "event"),
    [
        pytest.param(api_errors.NotFound(404, "NotFound", 'pods "p" not found'), None, None, id="gone-is-dropped"),
        pytest.param(
            api_errors.Conflict(409, "Conflict", 'pod p is already assigned to node "elsewhere"'),
            None,
            None,
            id="bound-elsewhere-is-dropped",
        ),
        pytest.param(
            api_errors.ApiError(403, "Forbidden", "no"), q.SubQueue.BACKOFF, "FailedScheduling", id="error-backs-off"
        ),
    ],
)
def test_failed_binds_are_routed_by_outcome(fault: Exception, requeued: q.SubQueue | None, event: str | None) -> None:
    e = env(script={"p": [fault]})
    pod = make_pod("p").req(cpu="100m").build()
    e.sched.on_pod_add(pod)
    e.run_one()
    assert e.queued(pod) is requeued
    assert e.sched.cache.get_pod(pod.uid) is None  # the assumption is forgotten either way
    last = e.events.last(pod.key)
    assert (last.reason if last else None) == event


def test_already_bound_to_our_node_counts_as_bound() -> None:
    conflict = api_errors.Conflict(409, "Conflict", 'pod p is already assigned to node "n0"')
    e = env(script={"p": [unavailable(), conflict]}, nodes=1)
    pod = make_pod("p").req(cpu="100m").build()
    e.sched.on_pod_add(pod)
    e.run_one()
    assert e.observer.retries == [1]  # two attempts: the 503, then the 409 that means "bound"
    assert e.sched.cache.get_pod(pod.uid) is not None
    assert [ev.reason for ev in e.events.events] == ["Scheduled"]


def test_a_binding_cycle_after_the_fence_is_lost_writes_nothing() -> None:
    e = env()
    pod = make_pod("p").req(cpu="100m").build()
    e.sched.on_pod_add(pod)
    e.fence.revoke("test: the Lease was taken")
    e.run_one()
    assert e.client.posts == []
    assert e.events.events == []
    assert e.sched.cache.get_pod(pod.uid) is None
    assert e.queued(pod) is None  # left to the next leader


# --- Permit --------------------------------------------------------------------------------------


def _waiting_env() -> tuple[Env, Pod]:
    e = env(config=WITH_PERMIT)
    pod = make_pod("w").req(cpu="100m").labels(wait="yes").build()
    e.sched.on_pod_add(pod)
    e.run_one()
    return e, pod


def test_a_pod_waits_at_permit_holding_its_room_until_allowed() -> None:
    e, pod = _waiting_env()
    fwk = e.sched.profiles["custom-scheduler"]
    wp = fwk.waiting.get(pod.uid)
    assert wp is not None
    assert list(wp.pending_plugins()) == ["GatePermit"]
    assert e.client.posts == []
    assert e.sched.cache.is_assumed(pod.uid)  # later cycles see the room as taken
    wp.allow("GatePermit")
    assert e.client.posts == ["w"]
    assert fwk.waiting.get(pod.uid) is None


def test_a_rejected_wait_undoes_the_reservation_and_records_the_plugin() -> None:
    e, pod = _waiting_env()
    fwk = e.sched.profiles["custom-scheduler"]
    wp = fwk.waiting.get(pod.uid)
    assert wp is not None
    wp.reject("GatePermit", "the gang is not complete")
    assert e.client.posts == []
    assert e.sched.cache.get_pod(pod.uid) is None
    assert e.queued(pod) is q.SubQueue.UNSCHEDULABLE
    qpi = e.sched.queue.get(pod.uid)
    assert qpi is not None
    assert qpi.unschedulable_plugins == {"GatePermit"}
    last = e.events.last(pod.key)
    assert last is not None
    assert (last.reason, last.note) == ("FailedScheduling", "the gang is not complete")


def test_a_wait_times_out_with_upstreams_message() -> None:
    e, pod = _waiting_env()
    fwk = e.sched.profiles["custom-scheduler"]
    e.clock.now += 4.9
    assert fwk.waiting.expire_due() == 0
    e.clock.now += 0.2
    assert fwk.waiting.expire_due() == 1
    last = e.events.last(pod.key)
    assert last is not None
    assert last.note == "rejected due to timeout after waiting 5s at plugin GatePermit"
    assert e.sched.cache.get_pod(pod.uid) is None


# --- PostFilter ----------------------------------------------------------------------------------


def test_a_preemption_result_nominates_and_goes_to_the_evictor_and_holds_the_pod_back() -> None:
    e = env(nodes=1)
    low = make_pod("low").priority(1).req(cpu="4").node("n0").build()
    e.sched.on_pod_add(low)
    high = make_pod("high").priority(100).req(cpu="2").build()
    e.sched.on_pod_add(high)
    e.run_one()
    assert e.evictor.started == [(high.key, "n0", [low.key])]
    assert e.sched.nominator.node_of(high.uid) == "n0"
    assert e.events.nominations == {high.key: "n0"}
    # While its evictions are being sent, an event that would retry it leaves it gated.
    e.sched.on_pod_delete(low)
    assert e.queued(high) is q.SubQueue.GATED or e.queued(high) is q.SubQueue.BACKOFF
    e.clock.now += 60
    e.sched.queue.flush_backoff_completed()
    assert e.queued(high) is q.SubQueue.GATED
    e.evictor.busy.clear()
    e.sched.preemption_done(high, ok=True)
    assert e.queued(high) is q.SubQueue.ACTIVE
    e.run_one()
    assert e.client.posts == ["high"]


def test_rng_is_the_cycles() -> None:
    e = env()
    state: Callable[[], CycleState] = e.sched.cycle.new_state
    assert state().rng is e.sched.cycle.rng is e.sched.algorithm.rng


def test_a_preemptor_waiting_for_its_victims_keeps_its_nomination() -> None:
    """The victim is still terminating (DisruptionTarget, deletionTimestamp): the preemptor does
    not fit yet and may not preempt again, but its nomination (the room it is owed) stays."""
    e = env(nodes=1)
    victim = dataclasses.replace(
        make_pod("low").priority(1).req(cpu="4").node("n0").terminating().build(), disruption_target=True
    )
    e.sched.on_pod_add(victim)
    high = make_pod("high").priority(100).req(cpu="2").nominated("n0").build()
    e.sched.on_pod_add(high)
    e.run_one()
    assert e.sched.nominator.node_of(high.uid) == "n0"
    assert e.evictor.started == []
    assert e.evictor.cleared == []


def test_a_nomination_that_can_never_work_is_cleared() -> None:
    e = env(nodes=1)
    big = make_pod("big").priority(100).req(cpu="64").nominated("n0").build()
    e.sched.on_pod_add(big)
    e.run_one()
    assert e.sched.nominator.node_of(big.uid) is None
    assert e.evictor.cleared == [big.key]
