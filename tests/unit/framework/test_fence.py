"""Fencing without an API server: the Fence itself, the elector revoking it, the binder and the
scheduler obeying it. The real-server proof (a stolen Lease mid-burst) is in
``tests/integration/test_fencing.py``."""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, cast

import pytest

from custom_scheduler import config
from custom_scheduler.api.model import Pod
from custom_scheduler.config.schema import LeaderElectionConfig
from custom_scheduler.core import queue as q
from custom_scheduler.core.binding import Executor
from custom_scheduler.core.cache import Cache
from custom_scheduler.core.scheduler import Scheduler
from custom_scheduler.framework.clusterapi import Timeout
from custom_scheduler.framework.evictor import ApiEvictor
from custom_scheduler.framework.fence import Fence, FenceReport
from custom_scheduler.framework.handle import SnapshotHandle
from custom_scheduler.framework.profiles import build_frameworks
from custom_scheduler.framework.types import BindOutcome, CycleState
from custom_scheduler.kube import api_errors
from custom_scheduler.kube.client import KubeClient
from custom_scheduler.plugins import default_binder
from custom_scheduler.plugins.builtin import full_registry
from custom_scheduler.server import leader
from tests.builders import make_node, make_pod
from tests.fake_api import Call, FakeClient

# -- the Fence ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        pytest.param("", FenceReport(True, "", None, 0, 0, 0), id="fresh"),
        pytest.param("aaa", FenceReport(True, "", None, 3, 3, 0), id="admits-while-held"),
        pytest.param("aarA", FenceReport(False, "r0", 1.0, 2, 2, 1), id="refuses-after-revoke"),
        pytest.param("arrAA", FenceReport(False, "r0", 1.0, 1, 1, 2), id="first-revoke-wins"),
    ],
)
def test_fence_admits_until_revoked_and_counts_both_sides(steps: str, expected: FenceReport) -> None:
    """``a`` admit (expected True), ``A`` admit (expected False), ``r`` revoke. The report says
    exactly how many writes were admitted before the revocation and how many were refused."""
    fence = Fence(clock=lambda: 1.0)
    revokes = 0
    for s in steps:
        if s == "a":
            assert fence.admit()
        elif s == "A":
            assert not fence.admit()
        else:
            assert fence.revoke(f"r{revokes}") == (revokes == 0)
            revokes += 1
    assert fence.report() == expected


# -- the elector --------------------------------------------------------------------------------


class FakeLeases:
    """One Lease in memory with resourceVersions, the part of KubeClient the elector uses."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.rv = 0
        self.calls: list[str] = []
        self.fail = False

    def _bump(self, doc: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        doc = copy.deepcopy(doc)
        doc.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
        self.lease = doc
        return copy.deepcopy(doc)

    def get(self, path: str, **kw: Any) -> Any:
        self.calls.append("get")
        if self.fail:
            raise api_errors.ServerError(503, "Injected")
        if self.lease is None:
            raise api_errors.NotFound(404)
        return copy.deepcopy(self.lease)

    def post(self, path: str, body: Any, **kw: Any) -> Any:
        self.calls.append("post")
        if self.fail:
            raise api_errors.ServerError(503, "Injected")
        return self._bump(body)

    def put(self, path: str, body: Any, **kw: Any) -> Any:
        self.calls.append("put")
        if self.fail:
            raise api_errors.ServerError(503, "Injected")
        assert self.lease is not None
        if body["metadata"].get("resourceVersion") != self.lease["metadata"]["resourceVersion"]:
            raise api_errors.Conflict(409)
        return self._bump(body)

    def steal(self, holder: str) -> None:
        assert self.lease is not None
        self._bump({**self.lease, "spec": {**self.lease["spec"], "holderIdentity": holder}})


CFG = LeaderElectionConfig(lease_duration=3.0, renew_deadline=0.3, retry_period=0.05, resource_name="l")


@pytest.mark.parametrize(
    ("fault", "reason", "max_calls"),
    [
        # Seen at once: one PUT (409) and one GET, no retries until the deadline.
        pytest.param("steal", "lease held by intruder", 2, id="another-holder-fences-at-once"),
        pytest.param("down", "renew deadline of 0.3s passed", 50, id="deadline-fences"),
    ],
)
def test_renew_round_revokes_the_fence_on_loss(fault: str, reason: str, max_calls: int) -> None:
    """The elector revokes the fence itself, before is_leader turns false and before any hook."""
    leases = FakeLeases()
    fence = Fence()
    seen: list[tuple[bool, bool]] = []
    el = leader.LeaderElector(
        cast(KubeClient, leases),
        CFG,
        "me",
        fence=fence,
        on_leader_change=lambda leading: seen.append((leading, fence.held)),
    )
    assert el.try_acquire_or_renew()
    el._set_leading(True)
    leases.calls.clear()
    if fault == "steal":
        leases.steal("intruder")
    else:
        leases.fail = True
    t0 = time.monotonic()
    assert not el._renew_round(threading.Event())
    took = time.monotonic() - t0
    assert fence.report().reason == reason
    assert not fence.held
    assert not el.is_leader
    assert seen == [(True, True), (False, False)], "fence revoked before the leader gauge drops"
    assert len(leases.calls) <= max_calls
    if fault == "steal":
        assert took < CFG.retry_period, "no waiting for the renew deadline once another holder is seen"
    else:
        assert took >= CFG.renew_deadline


def test_release_revokes_the_fence() -> None:
    """SIGTERM path: after the binds are done the Lease is released, and nothing may bind after."""
    leases = FakeLeases()
    fence = Fence()
    el = leader.LeaderElector(cast(KubeClient, leases), CFG, "me", fence=fence)
    assert el.try_acquire_or_renew()
    assert el.release()
    assert fence.report().reason == "lease released"


def test_the_fence_names_the_lease_holder() -> None:
    """Records the leader writes (a gang's reservation annotation) name the Lease identity."""
    assert Fence().holder == ""
    fence = Fence()
    leader.LeaderElector(cast(KubeClient, FakeLeases()), CFG, "sched-a_1", fence=fence)
    assert fence.holder == "sched-a_1"


# -- the binder and the scheduler -------------------------------------------------------------


class RecordingClient(FakeClient):
    """Counts Binding POSTs; ``answers`` are what they get in turn (an exception is raised, None or
    none left is a success); ``on_post`` runs before each answer (to revoke mid-retry). The other
    verbs are FakeClient's, so it is a ClusterClient like any fake."""

    def __init__(self, answers: list[Exception | None]) -> None:
        super().__init__()
        self.answers = answers
        self.posts: list[str] = []
        self.on_post: Callable[[], object] | None = None

    def post(self, path: str, body: Mapping[str, Any], *, timeout: Timeout = (5.0, 30.0)) -> Any:
        self.posts.append(path)
        if self.on_post is not None:
            self.on_post()
        a = self.answers.pop(0) if self.answers else None
        if a is not None:
            raise a
        return super().post(path, body, timeout=timeout)


def _binder(client: RecordingClient, fence: Fence) -> default_binder.DefaultBinder:
    from custom_scheduler.framework.types import Snapshot

    handle = SnapshotHandle(Snapshot(), profile_name="p", client=client)
    handle.fence = fence
    return default_binder.DefaultBinder(None, handle)


@pytest.mark.parametrize(
    ("revoke", "answers", "posts", "retries"),
    [
        pytest.param("before", [], 0, 0, id="revoked-before-no-post"),
        # The 503 schedules one retry; the fence refuses it, so it is counted but never sent.
        pytest.param("during-first", [api_errors.ServerError(503, "x")], 1, 1, id="retry-after-revoke-not-sent"),
    ],
)
def test_binder_asks_the_fence_before_every_attempt(
    revoke: str, answers: list[Exception | None], posts: int, retries: int
) -> None:
    client = RecordingClient(list(answers))
    fence = Fence()
    if revoke == "before":
        fence.revoke("lost")
    else:
        client.on_post = lambda: fence.revoke("lost")
    r = _binder(client, fence).bind(CycleState(), make_pod("p").build(), "n1")
    assert r.outcome is BindOutcome.FENCED
    assert not r.is_bound
    assert not r.status.is_success
    assert r.status.reasons == (default_binder.REASON_FENCED,)
    assert r.retries == retries
    assert len(client.posts) == posts


CONFIG = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: custom-scheduler
"""


class HeldExecutor(Executor):
    """Binding cycles wait here until ``release``: a pool whose workers were all busy when the
    scheduling thread handed the cycle over."""

    def __init__(self) -> None:
        self.held: list[Any] = []

    def submit(self, fn: Any) -> None:
        self.held.append(fn)

    def release(self) -> None:
        while self.held:
            self.held.pop(0)()


def test_binding_cycle_queued_before_the_loss_is_cancelled_without_a_write() -> None:
    """A cycle submitted to the pool while leading, started after the loss: no PreBind, no POST,
    no event; the assumption is forgotten and the pod released by the queue."""
    registry = full_registry()
    cfg = config.load_config(CONFIG, registry)
    client = RecordingClient([])
    fence = Fence()
    sched_cache = Cache()
    queue = q.SchedulingQueue(lambda a, b: a.timestamp < b.timestamp)
    executor = HeldExecutor()
    sched = Scheduler(profiles={}, cache=sched_cache, queue=queue, writer=None, fence=fence, executor=executor)
    fwks = build_frameworks(cfg.profiles, registry, sched.snapshot, client=client)
    for f in fwks.values():
        cast(SnapshotHandle, f.handle).fence = fence
    sched.profiles = fwks
    sched_cache.add_node(make_node("n1").build())
    pod = make_pod("p").scheduler("custom-scheduler").build()
    queue.add(pod)
    qpi = queue.pop(timeout=1)
    assert qpi is not None
    d = sched.schedule_one(qpi)
    assert d.result == "scheduled"
    assert len(executor.held) == 1, "the binding cycle is queued, not run"
    assert sched_cache.is_assumed(pod.uid)
    fence.revoke("lost")
    executor.release()
    sched.shutdown()
    assert client.posts == []
    assert sched_cache.get_pod(pod.uid) is None
    assert not queue.contains(pod.uid)
    assert fence.report().refused == 0, "cancelled before the binder was even asked"


def test_scheduling_loop_pops_nothing_once_fenced() -> None:
    fence = Fence()
    fence.revoke("lost")
    queue = q.SchedulingQueue(lambda a, b: a.timestamp < b.timestamp)
    queue.add(make_pod("p").scheduler("custom-scheduler").build())
    sched = Scheduler(profiles={}, cache=Cache(), queue=queue, writer=None, fence=fence)
    t = threading.Thread(target=sched.run, args=(threading.Event(),))
    t.start()
    t.join(2)
    assert not t.is_alive(), "the loop returns once the fence is revoked"
    assert queue.pending_counts()["active"] == 1


def _victim(name: str) -> Pod:
    return make_pod(name).uid(f"uid-{name}").node("n").priority(1).build()


@pytest.mark.parametrize(
    ("revoke_on", "want_paths"),
    [
        # A preemption started by a cycle that was already running when the Lease was lost.
        pytest.param("", [], id="revoked-before-start-nothing-sent"),
        # Lost while the victim's condition was being patched: its DELETE is not sent.
        pytest.param("PATCH", [("PATCH", "/api/v1/namespaces/default/pods/v/status")], id="revoked-mid-victim"),
    ],
)
def test_preemption_evicts_nobody_once_fenced(revoke_on: str, want_paths: list[tuple[str, str]]) -> None:
    """No victim is deleted and no nomination cleared after the loss (evicting is worse than
    binding: the next leader cannot undo it); the evictor reports failure, so the preemptor's
    nomination is dropped and it is released from PreEnqueue."""
    fence = Fence()
    if not revoke_on:
        fence.revoke("lost")

    def on_call(c: Call) -> None:
        if c[0] == revoke_on:
            fence.revoke("lost")

    client = FakeClient(on_call=on_call)
    done: list[tuple[str, bool]] = []
    finished = threading.Event()

    def on_done(preemptor: Pod, ok: bool) -> None:
        done.append((preemptor.key, ok))
        finished.set()

    events: list[str] = []
    evictor = ApiEvictor(client, fence=fence, events=lambda p, **kw: events.append(p.key), on_done=on_done)
    preemptor = make_pod("vip").priority(10).scheduler("custom-scheduler").build()
    lower = make_pod("waiting-low").uid("uid-waiting-low").priority(3).build()
    try:
        evictor.start(preemptor, "n", [_victim("v")], [lower])
        assert finished.wait(10), "on_done was not called"
    finally:
        evictor.shutdown(wait=True)
    assert done == [("default/vip", False)]
    assert client.paths() == want_paths
    assert events == []
    assert fence.report().refused >= 1


def test_clearing_nominations_sends_nothing_once_fenced() -> None:
    fence = Fence()
    fence.revoke("lost")
    client = FakeClient()
    evictor = ApiEvictor(client, fence=fence)
    try:
        evictor.clear_nominations([make_pod("a").nominated("n").build(), make_pod("b").nominated("n").build()])
    finally:
        evictor.shutdown(wait=True)
    assert client.calls == []
    assert fence.report().refused == 1, "it stops at the first refusal"
