"""Events: kube-scheduler's fields, MicroTime format, and no storm while a pod backs off."""

from __future__ import annotations

import re
import threading
from typing import Any

from custom_scheduler.core.events import Writer, micro_time, truncate_note
from custom_scheduler.framework.fence import Fence
from custom_scheduler.kube import api_errors
from tests.builders import make_crd_pod_group, make_pod


class FakeClient:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []

    def post(self, path: str, body: Any, **kw: Any) -> Any:
        self.calls.append(("POST", path, body))
        return body

    def patch(self, path: str, body: Any, content_type: str = "", **kw: Any) -> Any:
        self.calls.append(("PATCH", path, body))
        return body


def test_micro_time_always_has_six_fraction_digits() -> None:
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", micro_time(1700000000.0))


def test_note_is_truncated_like_kube_scheduler() -> None:
    note = truncate_note("x" * 2000)
    assert len(note) == 1024
    assert note.endswith(" ...")


def test_repeated_failures_update_one_event_series() -> None:
    client = FakeClient()
    w = Writer(client, reporting_controller="custom-scheduler")  # type: ignore[arg-type]
    w.start()
    pod = make_pod("p").build()
    for _ in range(50):
        w.event(pod, type_="Warning", reason="FailedScheduling", action="Scheduling", note="0/1 nodes are available")
    w.flush()
    w.stop()
    posts = [c for c in client.calls if c[0] == "POST"]
    assert len(posts) == 1
    body = posts[0][2]
    assert body["reason"] == "FailedScheduling"
    assert body["action"] == "Scheduling"
    assert body["reportingController"] == "custom-scheduler"
    assert body["regarding"]["uid"] == pod.uid
    assert len([c for c in client.calls if c[0] == "PATCH"]) <= 1


def test_status_condition_is_not_patched_when_unchanged() -> None:
    client = FakeClient()
    w = Writer(client)  # type: ignore[arg-type]
    w.start()
    pod = make_pod("p").build()
    pod.scheduled_condition = ("False", "Unschedulable", "same")
    w.pod_condition(pod, status="False", reason="Unschedulable", message="same")
    w.pod_condition(pod, status="False", reason="Unschedulable", message="different")
    w.flush()
    w.stop()
    patches = [c for c in client.calls if c[0] == "PATCH"]
    assert len(patches) == 1
    cond = patches[0][2]["status"]["conditions"][0]
    assert (cond["type"], cond["status"], cond["reason"], cond["message"]) == (
        "PodScheduled",
        "False",
        "Unschedulable",
        "different",
    )


def test_dry_run_writes_nothing() -> None:
    client = FakeClient()
    w = Writer(client, dry_run=True)  # type: ignore[arg-type]
    w.start()
    w.event(make_pod().build(), type_="Normal", reason="Scheduled", action="Binding", note="x")
    w.flush(timeout=0.5)
    w.stop()
    assert client.calls == []


def test_writes_queued_before_leadership_was_lost_are_dropped() -> None:
    """Events and conditions queued while leading are not written once the fence is revoked:
    the next leader reports on these pods; a stale leader's FailedScheduling would contradict it."""
    client = FakeClient()
    fence = Fence()
    w = Writer(client, fence=fence)  # type: ignore[arg-type]
    pod = make_pod().build()
    w.event(pod, type_="Normal", reason="Scheduled", action="Binding", note="before")
    w.pod_condition(pod, status="False", reason="Unschedulable", message="queued")
    fence.revoke("test: Lease taken")
    w.start()
    w.flush(timeout=5)
    w.stop()
    assert client.calls == []
    assert w.fenced_writes == 2


def test_a_group_event_names_its_object() -> None:
    client = FakeClient()
    w = Writer(client)  # type: ignore[arg-type]
    w.start()
    group = make_crd_pod_group("train", "ml", min_member=4).build()
    w.event(
        group,
        type_="Warning",
        reason="FailedScheduling",
        action="Scheduling",
        note="pod group is unschedulable",
        kind="PodGroup",
        api_version="scheduling.x-k8s.io/v1alpha1",
    )
    w.flush(timeout=5)
    w.stop()
    ((method, path, body),) = client.calls
    assert (method, path) == ("POST", "/apis/events.k8s.io/v1/namespaces/ml/events")
    assert body["regarding"] == {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "namespace": "ml",
        "name": "train",
        "uid": group.uid,
        "resourceVersion": group.resource_version,
    }


class RacingClient(FakeClient):
    """The pod changes between the failed attempt and the status write: its resourceVersion no
    longer matches (409); a GET then shows it ``bound`` to a node, or still pending."""

    def __init__(self, bound: bool) -> None:
        super().__init__()
        self.bound = bound

    def patch(self, path: str, body: Any, content_type: str = "", **kw: Any) -> Any:
        self.calls.append(("PATCH", path, body))
        if body["metadata"].get("resourceVersion") == "1":
            raise api_errors.Conflict(409, "Conflict", "the object has been modified")
        return body

    def get(self, path: str, **kw: Any) -> Any:
        self.calls.append(("GET", path, None))
        spec = {"nodeName": "n1"} if self.bound else {}
        return {"metadata": {"uid": "uid-p", "resourceVersion": "2"}, "spec": spec}


def test_a_failure_status_never_overwrites_a_binding_that_came_first() -> None:
    """A preemptor's PodScheduled=False is written after its next attempt bound it (the writer is
    asynchronous): the write carries the pod's resourceVersion, the 409 leads to a read, and a
    bound pod is left alone; a pod still pending gets the write with the fresh version."""
    for bound, patches in ((True, 1), (False, 2)):
        client = RacingClient(bound)
        w = Writer(client)  # type: ignore[arg-type]
        w.start()
        pod = make_pod("p").uid("uid-p").build()
        pod.resource_version = "1"
        w.pod_condition(pod, status="False", reason="Unschedulable", message="0/1 nodes")
        w.flush()
        w.stop()
        sent = [c[2] for c in client.calls if c[0] == "PATCH"]
        assert len(sent) == patches
        assert sent[0]["metadata"] == {"uid": "uid-p", "resourceVersion": "1"}
        if not bound:
            assert sent[1]["metadata"] == {"uid": "uid-p", "resourceVersion": "2"}


class BlockedClient(FakeClient):
    """Holds the writer thread in its first write until released, so writes pile up."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.entered = threading.Event()

    def post(self, path: str, body: Any, **kw: Any) -> Any:
        self.entered.set()
        self.release.wait(10)
        return super().post(path, body, **kw)


def test_a_full_queue_drops_events_but_never_a_pods_status() -> None:
    """Cluster-autoscaler scales up for pods whose PodScheduled condition says Unschedulable: a
    burst of failures must not lose those writes (kube-scheduler never drops them). Events may be
    dropped, as client-go's broadcaster drops them."""
    client = BlockedClient()
    w = Writer(client, max_queue=3)  # type: ignore[arg-type]
    w.start()
    pods = [make_pod(f"p{i}").build() for i in range(10)]
    w.event(pods[0], type_="Warning", reason="FailedScheduling", action="Scheduling", note="first")
    assert client.entered.wait(5)  # the writer is now stuck in that POST
    for p in pods:
        w.event(p, type_="Warning", reason="FailedScheduling", action="Scheduling", note="0/1 nodes")
        w.pod_condition(p, status="False", reason="Unschedulable", message="0/1 nodes")
    client.release.set()
    w.flush()
    w.stop()
    statuses = [c[1] for c in client.calls if c[0] == "PATCH" and c[1].endswith("/status")]
    assert statuses == [f"/api/v1/namespaces/default/pods/p{i}/status" for i in range(10)]
    assert len([c for c in client.calls if c[0] == "POST"]) == 1 + 3  # the first, then three queued
    assert w.dropped == 7


class PatchBlockedClient(FakeClient):
    """Holds the status writer in its first PATCH until released, so status writes pile up."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.entered = threading.Event()

    def patch(self, path: str, body: Any, content_type: str = "", **kw: Any) -> Any:
        self.entered.set()
        self.release.wait(10)
        return super().patch(path, body, content_type, **kw)


def test_a_pods_status_is_written_while_events_wait() -> None:
    """Events and pods' status have a writer each: a stuck Event POST does not hold back the
    PodScheduled condition that tools wait on."""
    client = BlockedClient()
    w = Writer(client)  # type: ignore[arg-type]
    w.start()
    a = make_pod("a").build()
    w.event(a, type_="Warning", reason="FailedScheduling", action="Scheduling", note="x")
    assert client.entered.wait(5)  # the Event writer is stuck in that POST
    w.pod_condition(a, status="False", reason="Unschedulable", message="0/1 nodes")
    written = threading.Event()
    w._status_q.put_marker(written.set)  # after the status write, on its writer
    assert written.wait(5)
    assert [c[0] for c in client.calls] == ["PATCH"]  # the condition, while the Event still waits
    client.release.set()
    w.flush()
    w.stop()
    assert [c[0] for c in client.calls] == ["PATCH", "POST"]


def test_a_newer_status_of_a_pod_replaces_the_queued_one_and_is_written_last() -> None:
    client = PatchBlockedClient()
    w = Writer(client)  # type: ignore[arg-type]
    w.start()
    a, b, c = make_pod("a").build(), make_pod("b").build(), make_pod("c").build()
    w.pod_condition(c, status="False", reason="Unschedulable", message="c")
    assert client.entered.wait(5)  # the status writer is stuck in that PATCH
    w.pod_condition(a, status="False", reason="Unschedulable", message="first")
    w.nominate(a, "n1")
    w.pod_condition(b, status="False", reason="Unschedulable", message="b")
    w.pod_condition(a, status="False", reason="SchedulerError", message="second")
    client.release.set()
    w.flush()
    w.stop()
    writes = [(c[1].split("/")[-2], c[2]["status"]) for c in client.calls if c[0] == "PATCH"]
    assert [
        (pod, st.get("nominatedNodeName"), [x["message"] for x in st.get("conditions", [])]) for pod, st in writes
    ] == [
        ("c", None, ["c"]),
        ("a", "n1", []),
        ("b", None, ["b"]),
        ("a", None, ["second"]),
    ]
