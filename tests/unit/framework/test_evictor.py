"""ApiEvictor: carrying out a preemption DefaultPreemption decided, against a recording client.

What is sent and in which order (DisruptionTarget PATCH before the uid-preconditioned DELETE, the
Preempted event, the lost nominations last), what is tolerated (404/409, victims already
terminating), what is retried (transient errors) and what a failure reports (``on_done(preemptor,
False)`` with no nomination cleared). Each test waits for ``on_done`` with a deadline; nothing
sleeps. The last tests drive the whole scheduling cycle so the hand-over from the PostFilter
result to the evictor is covered too. Fencing is in ``tests/unit/framework/test_fence.py``; the real
server's answers in the integration tests.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from custom_scheduler import config
from custom_scheduler.api.model import Pod
from custom_scheduler.core import queue as q
from custom_scheduler.core.binding import Executor
from custom_scheduler.core.cache import Cache
from custom_scheduler.core.scheduler import Scheduler
from custom_scheduler.framework.clusterapi import Timeout
from custom_scheduler.framework.evictor import ApiEvictor
from custom_scheduler.framework.fence import Fence
from custom_scheduler.framework.handle import SnapshotHandle
from custom_scheduler.framework.profiles import build_frameworks
from custom_scheduler.kube import api_errors
from custom_scheduler.plugins.builtin import full_registry
from tests.builders import make_node, make_pod
from tests.fake_api import Call, FakeClient

WAIT = 10.0
"""Deadline for one preemption's calls (they are in memory: far less in practice)."""

PODS = "/api/v1/namespaces/default/pods"


def pod(name: str, priority: int = 1, *, node: str = "n", terminating: bool = False) -> Pod:
    b = make_pod(name).uid(f"uid-{name}").priority(priority).req(cpu="1")
    if node:
        b = b.node(node)
    if terminating:
        b = b.terminating()
    return b.build()


PREEMPTOR = make_pod("vip").uid("uid-vip").priority(10).req(cpu="2").scheduler("custom-scheduler").build()


def clear_call(p: Pod) -> Call:
    """The PATCH that nulls ``p``'s nomination (uid-checked, like every preemption write)."""
    return ("PATCH", f"{PODS}/{p.name}/status", {"metadata": {"uid": p.uid}, "status": {"nominatedNodeName": None}})


@dataclass
class Harness:
    """An ApiEvictor over ``client`` whose ``on_done`` and event sink record into this object."""

    client: FakeClient
    fence: Fence = field(default_factory=Fence)
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    done: list[tuple[str, bool]] = field(default_factory=list)
    finished: threading.Event = field(default_factory=threading.Event)
    evictor: ApiEvictor = field(init=False)

    def __post_init__(self) -> None:
        self.evictor = ApiEvictor(self.client, fence=self.fence, events=self._event, on_done=self._done, workers=2)

    def _event(self, p: Pod, **kw: Any) -> None:
        self.events.append((p.key, kw))

    def _done(self, preemptor: Pod, ok: bool) -> None:
        self.done.append((preemptor.key, ok))
        self.finished.set()

    def run(self, victims: Sequence[Pod], cleared: Sequence[Pod] = (), node: str = "n") -> bool:
        """Start one preemption for PREEMPTOR and wait for its ``on_done``; its ``ok``."""
        self.evictor.start(PREEMPTOR, node, victims, cleared)
        assert self.finished.wait(WAIT), "on_done was not called"
        assert len(self.done) == 1
        assert not self.evictor.running(PREEMPTOR.uid)
        return self.done[0][1]


@pytest.fixture
def harness() -> Iterator[Any]:
    """``harness(client)`` builds one; every evictor built is shut down after the test."""
    built: list[Harness] = []

    def make(client: FakeClient, fence: Fence | None = None) -> Harness:
        h = Harness(client, fence or Fence())
        built.append(h)
        return h

    yield make
    for h in built:
        h.evictor.shutdown(wait=True)


# -- a preemption -------------------------------------------------------------------------------


def test_evicts_victims_and_then_clears_the_lost_nominations(harness: Any) -> None:
    running_during: list[bool] = []
    client = FakeClient()
    h = harness(client)
    client.on_call = lambda _: running_during.append(h.evictor.running(PREEMPTOR.uid))
    lower = pod("waiting-low", 3, node="")
    victims = [pod("low-2", 2), pod("low-1", 1)]
    assert h.run(victims, [lower], node="n-low") is True

    assert h.done == [("default/vip", True)]
    # The preemptor is "running a preemption" (held out of activeQ) for every call it sends.
    assert running_during == [True] * 5
    victim_calls = [c for c in client.paths() if "waiting" not in c[1]]
    assert sorted(victim_calls) == sorted(
        [
            ("PATCH", f"{PODS}/low-1/status"),
            ("DELETE", f"{PODS}/low-1"),
            ("PATCH", f"{PODS}/low-2/status"),
            ("DELETE", f"{PODS}/low-2"),
        ]
    )
    patch = next(b for m, p, b in client.calls if p.endswith("low-1/status"))
    cond = patch["status"]["conditions"][0]
    assert {k: v for k, v in cond.items() if k != "lastTransitionTime"} == {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "PreemptionByScheduler",
        "message": "custom-scheduler: preempting to accommodate a higher priority pod",
    }
    assert patch["metadata"] == {"uid": "uid-low-1"}
    delete = next(b for m, p, b in client.calls if m == "DELETE" and p.endswith("low-1"))
    assert delete == {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": "uid-low-1"}}
    # Each victim is marked before it is deleted (the condition is what tells kubelet and the
    # next cycle why it goes).
    order = client.paths()
    for name in ("low-1", "low-2"):
        assert order.index(("PATCH", f"{PODS}/{name}/status")) < order.index(("DELETE", f"{PODS}/{name}"))
    assert sorted(h.events, key=lambda e: e[0]) == [
        (
            f"default/{name}",
            {
                "type_": "Normal",
                "reason": "Preempted",
                "action": "Preempting",
                "note": "Preempted by pod uid-vip on node n-low",
                "controller": "custom-scheduler",
            },
        )
        for name in ("low-1", "low-2")
    ]
    # The nominations are cleared last, once every victim is gone or going.
    assert client.calls[-1] == clear_call(lower)
    assert len(client.calls) == 5


def test_the_preempted_event_reports_the_preemptors_profile(harness: Any) -> None:
    h = harness(FakeClient())
    assert h.run([pod("low-1")]) is True
    assert [kw.get("controller") for _, kw in h.events] == ["custom-scheduler"]


def test_victims_are_evicted_in_parallel(harness: Any) -> None:
    """Both victims' first calls must be in flight at once to pass the barrier; sent one after the
    other, the barrier breaks and the preemption reports failure."""
    barrier = threading.Barrier(2, timeout=WAIT)

    def meet(c: Call) -> None:
        if c[1].endswith("/status"):
            barrier.wait()

    client = FakeClient(on_call=meet)
    assert harness(client).run([pod("a"), pod("b")]) is True


def test_victims_already_terminating_get_no_second_request(harness: Any) -> None:
    client = FakeClient()
    h = harness(client)
    assert h.run([pod("going", terminating=True), pod("staying")]) is True
    assert sorted(client.paths()) == [("DELETE", f"{PODS}/staying"), ("PATCH", f"{PODS}/staying/status")]
    assert [k for k, _ in h.events] == ["default/staying"]


def test_only_terminating_victims_still_clear_the_lost_nominations(harness: Any) -> None:
    client = FakeClient()
    lower = pod("waiting-low", 3, node="")
    assert harness(client).run([pod("going", terminating=True)], [lower]) is True
    assert client.calls == [clear_call(lower)]


@pytest.mark.parametrize(
    ("fail", "want_paths", "want_events"),
    [
        pytest.param(
            {"low-1/status": api_errors.NotFound(404, "NotFound", "gone")},
            [("PATCH", f"{PODS}/low-1/status")],
            [],
            id="404-on-the-condition-patch-no-delete",
        ),
        pytest.param(
            {"pods/low-1": api_errors.Conflict(409, "Conflict", "uid precondition failed")},
            [("PATCH", f"{PODS}/low-1/status"), ("DELETE", f"{PODS}/low-1")],
            [],
            id="409-on-delete-replaced-by-a-namesake",
        ),
    ],
)
def test_a_victim_already_gone_is_not_an_error(
    harness: Any, fail: dict[str, Exception], want_paths: list[tuple[str, str]], want_events: list[str]
) -> None:
    client = FakeClient(fail=fail)
    h = harness(client)
    lower = pod("waiting-low", 3, node="")
    assert h.run([pod("low-1")], [lower]) is True
    assert client.paths() == [*want_paths, clear_call(lower)[:2]]
    assert [k for k, _ in h.events] == want_events


def test_api_failure_reports_not_ok_and_clears_no_nomination(harness: Any) -> None:
    client = FakeClient(fail={"pods/low-2": api_errors.ApiError(403, "Forbidden", "no")})
    h = harness(client)
    lower = pod("waiting-low", 3, node="")
    assert h.run([pod("low-2", 2), pod("low-1", 1)], [lower]) is False
    assert h.done == [("default/vip", False)]
    # The other victim was evicted (they run side by side); low-2 stopped at its forbidden DELETE
    # (not retried: 403 is not transient); nobody's nomination is touched.
    assert sorted(client.paths()) == sorted(
        [
            ("PATCH", f"{PODS}/low-1/status"),
            ("DELETE", f"{PODS}/low-1"),
            ("PATCH", f"{PODS}/low-2/status"),
            ("DELETE", f"{PODS}/low-2"),
        ]
    )
    assert not [c for c in client.paths() if "waiting" in c[1]]
    assert [k for k, _ in h.events] == ["default/low-1"]


class Flaky(FakeClient):
    """DELETE answers 503 ``failures`` times, then succeeds."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    def delete(self, path: str, body: Mapping[str, Any] | None = None, *, timeout: Timeout = (5.0, 30.0)) -> Any:
        if self.failures:
            self.failures -= 1
            self.calls.append(("DELETE", path, body))
            raise api_errors.ServerError(503, "ServiceUnavailable", "busy")
        return super().delete(path, body, timeout=timeout)


@pytest.mark.parametrize(
    ("failures", "want_ok", "want_methods"),
    [
        pytest.param(0, True, ["PATCH", "DELETE"], id="no-failure"),
        pytest.param(2, True, ["PATCH", "DELETE", "DELETE", "DELETE"], id="two-503s-retried"),
        pytest.param(3, False, ["PATCH", "DELETE", "DELETE", "DELETE"], id="three-attempts-then-give-up"),
    ],
)
def test_transient_api_errors_are_retried(harness: Any, failures: int, want_ok: bool, want_methods: list[str]) -> None:
    client = Flaky(failures)
    h = harness(client)
    assert h.run([pod("v")]) is want_ok
    assert [m for m, _, _ in client.calls] == want_methods
    assert [k for k, _ in h.events] == (["default/v"] if want_ok else [])


def test_a_crashing_client_reports_not_ok_and_releases_the_preemptor(harness: Any) -> None:
    """A bug below (not an API error) must not leave the preemptor gated in PreEnqueue forever."""
    client = FakeClient(fail={"/status": ValueError("bug")})
    assert harness(client).run([pod("v")]) is False


# -- clearing a nomination ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fail", "want_patched"),
    [
        pytest.param({}, ["a", "b"], id="both"),
        pytest.param({"a/status": api_errors.NotFound(404, "NotFound", "gone")}, ["a", "b"], id="404-tolerated"),
        pytest.param({"a/status": api_errors.Conflict(409, "Conflict", "uid")}, ["a", "b"], id="409-tolerated"),
        pytest.param({"a/status": api_errors.ApiError(403, "Forbidden", "no")}, ["a", "b"], id="403-logged-next-pod"),
    ],
)
def test_clear_nominations_nulls_each_pods_nominated_node(
    harness: Any, fail: dict[str, Exception], want_patched: list[str]
) -> None:
    """What the scheduling cycle asks when PostFilter fails for a nominated pod (the nomination
    cannot work any more): one uid-checked PATCH per pod, a failure on one not stopping the next."""
    client = FakeClient(fail=fail)
    pods = [pod(n, node="") for n in ("a", "b")]
    h = harness(client)
    h.evictor.clear_nominations(pods)
    h.evictor.shutdown(wait=True)  # it runs on the evictor's pool, off the caller's thread
    assert client.calls == [clear_call(p) for p in pods if p.name in want_patched]


def test_clear_nominations_retries_a_transient_error(harness: Any) -> None:
    answers: list[Exception] = [api_errors.ServerError(503, "ServiceUnavailable", "busy")]

    def flaky(c: Call) -> None:
        if answers:
            raise answers.pop()

    client = FakeClient(on_call=flaky)
    p = pod("a", node="")
    h = harness(client)
    h.evictor.clear_nominations([p])
    h.evictor.shutdown(wait=True)
    assert client.calls == [clear_call(p), clear_call(p)]


def test_nothing_is_sent_after_shutdown(harness: Any) -> None:
    client = FakeClient()
    h = harness(client)
    h.evictor.shutdown(wait=True)
    h.evictor.start(PREEMPTOR, "n", [pod("v")], [])
    assert not h.evictor.running(PREEMPTOR.uid)
    assert client.calls == []
    assert h.done == []


# -- through the scheduling cycle ---------------------------------------------------------------

CONFIG = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: custom-scheduler
"""


@dataclass
class Cluster:
    sched: Scheduler
    queue: q.SchedulingQueue
    client: FakeClient
    done: list[tuple[str, bool]]
    finished: threading.Event
    evictor: ApiEvictor

    def schedule(self, p: Pod) -> str:
        self.queue.add(p)
        qpi = self.queue.pop(timeout=1)
        assert qpi is not None
        return self.sched.schedule_one(qpi).result


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    """One 2-cpu node holding two priority-1 pods of 1 cpu; the daemon's wiring, with the
    recording client behind the evictor and nothing behind the binder (no bind is expected)."""
    registry = full_registry()
    cfg = config.load_config(CONFIG, registry)
    client = FakeClient()
    done: list[tuple[str, bool]] = []
    finished = threading.Event()
    holder: list[Scheduler] = []

    def on_done(preemptor: Pod, ok: bool) -> None:
        holder[0].preemption_done(preemptor, ok)
        done.append((preemptor.key, ok))
        finished.set()

    fence = Fence()
    evictor = ApiEvictor(client, fence=fence, on_done=on_done, workers=2)
    cache = Cache()
    queue = q.SchedulingQueue(lambda a, b: a.timestamp < b.timestamp)
    sched = Scheduler(
        profiles={}, cache=cache, queue=queue, writer=None, fence=fence, evictor=evictor, executor=Executor()
    )
    holder.append(sched)
    fwks = build_frameworks(cfg.profiles, registry, sched.snapshot, client=None)
    for f in fwks.values():
        cast(SnapshotHandle, f.handle).nominated_lister = sched.nominator.pods_on
    sched.profiles = fwks
    cache.add_node(make_node("n").capacity(cpu="2", memory="8Gi", pods="110").build())
    for name in ("low-1", "low-2"):
        cache.add_pod(pod(name))
    yield Cluster(sched, queue, client, done, finished, evictor)
    evictor.shutdown(wait=True)
    sched.shutdown()


def test_the_cycle_hands_the_decision_to_the_evictor(cluster: Cluster) -> None:
    assert cluster.schedule(PREEMPTOR) == "unschedulable"
    assert cluster.finished.wait(WAIT)
    assert cluster.done == [("default/vip", True)]
    assert sorted(cluster.client.paths()) == sorted(
        [(m, f"{PODS}/{n}{s}") for n in ("low-1", "low-2") for m, s in (("PATCH", "/status"), ("DELETE", ""))]
    )
    # The nomination is recorded in memory at once, and kept after a successful preemption.
    assert cluster.sched.nominator.node_of(PREEMPTOR.uid) == "n"


def test_the_cycle_clears_a_nomination_that_cannot_work(cluster: Cluster) -> None:
    """The nominated pod needs more than the node can ever hold: PostFilter finds no candidate,
    the cycle drops the nomination and the evictor nulls it in the API; no victim is touched."""
    big = make_pod("big").uid("uid-big").priority(10).req(cpu="3").nominated("n").build()
    cluster.sched.nominator.add(big, "n")
    assert cluster.schedule(big) == "unschedulable"
    cluster.evictor.shutdown(wait=True)  # the PATCH runs off the scheduling thread
    assert cluster.client.calls == [clear_call(big)]
    assert cluster.sched.nominator.node_of(big.uid) is None
    assert cluster.done == []


def test_with_a_view_of_the_cluster_the_preemptor_runs_until_its_victims_show_terminating() -> None:
    """upstream's lastVictimsPendingPreemption: the deletes are answered before the informers
    report them, and a gang retried in between saw its victims still running and preempted again.
    With ``lookup`` (the scheduler's cache) the preemptor stays running until every victim it
    deleted shows terminating or gone there; a failed preemption is not kept running."""
    seen: dict[str, Pod] = {}
    done = threading.Event()
    client = FakeClient()
    evictor = ApiEvictor(client, fence=Fence(), on_done=lambda p, ok: done.set(), workers=2, lookup=seen.get)
    try:
        victims = [pod("low-1"), pod("low-2")]
        seen.update({v.uid: v for v in victims})
        evictor.start(PREEMPTOR, "n", victims, ())
        assert done.wait(WAIT)
        assert evictor.running(PREEMPTOR.uid)  # sent, but the cache still shows both running
        seen["uid-low-1"] = pod("low-1", terminating=True)
        assert evictor.running(PREEMPTOR.uid)
        del seen["uid-low-2"]
        assert not evictor.running(PREEMPTOR.uid)
        assert not evictor.running(PREEMPTOR.uid)  # and forgotten

        done.clear()
        client.fail["pods/low-3"] = api_errors.ApiError(403, "Forbidden", "no")
        seen["uid-low-3"] = pod("low-3")
        evictor.start(PREEMPTOR, "n", [seen["uid-low-3"]], ())
        assert done.wait(WAIT)
        assert not evictor.running(PREEMPTOR.uid)
    finally:
        evictor.shutdown(wait=True)
