"""Events: kube-scheduler's fields, MicroTime format, and no storm while a pod backs off."""

from __future__ import annotations

import re
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
