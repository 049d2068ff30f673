"""SchedulingGates end to end on the real API server: a gated pod is left alone (no attempt, no
event, no condition from us, ``scheduler_pending_pods{queue="gated"}``), and bound within seconds
of the update that removes its last gate."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from custom_scheduler.core.queue import SubQueue
from custom_scheduler.devenv import cluster
from custom_scheduler.devenv.controlplane import ControlPlane
from custom_scheduler.kube.client import MERGE_PATCH_CT, KubeClient, pod_path
from custom_scheduler.server.app import App
from custom_scheduler.server.delegated_auth import DelegatingAuth
from custom_scheduler.server.health import HealthServer
from custom_scheduler.server.metrics import Metrics
from tests import secure
from tests.builders import NodeBuilder, make_node, make_pod

#: How long the gated pod is watched for anything the scheduler should not do to it.
OBSERVE_SECONDS = 4.0
#: The bound on "scheduled within a second or two" once the last gate is gone.
UNGATED_BIND_SECONDS = 3.0


@pytest.fixture
def gates_supported(control_plane: ControlPlane) -> None:
    if control_plane.minor_version < 27:
        pytest.skip(
            f"spec.schedulingGates needs Kubernetes 1.27+ (the 1.{control_plane.minor_version} API server "
            "drops the field, so the pod would not be gated at all)"
        )


@pytest.fixture
def scraped(
    control_plane: ControlPlane, start_scheduler: Callable[..., App]
) -> Iterator[tuple[App, Callable[[], str]]]:
    """The in-process daemon with its metrics served on /metrics, as ``daemon.serve`` wires them
    (HTTPS, delegated authn/authz: scraped with the admin's token)."""
    metrics = Metrics(process_collectors=False)
    app = start_scheduler(metrics=metrics)
    metrics.track_pending(app.queue.pending_counts)
    auth = DelegatingAuth(app.client.clone(qps=0))
    server = HealthServer("127.0.0.1:0", ready=lambda: app.ready, metrics=metrics, auth=auth).start()

    def scrape() -> str:
        status, body, _ = secure.get(f"{server.url}/metrics", token=control_plane.admin_token)
        assert status == 200, body
        return body.decode()

    yield app, scrape
    server.stop()


def _events_about(kube: KubeClient, namespace: str, name: str) -> list[dict[str, Any]]:
    doc = kube.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")
    return [e for e in doc.get("items", []) if (e.get("regarding") or {}).get("name") == name]


def _pod_scheduled(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in (pod.get("status") or {}).get("conditions") or () if c.get("type") == "PodScheduled"]


def test_gated_pod_is_not_attempted_until_its_gates_are_removed(
    gates_supported: None,
    kube: KubeClient,
    namespace: str,
    nodes: Callable[[NodeBuilder], dict[str, Any]],
    create_pod: Callable[[dict[str, Any]], dict[str, Any]],
    scraped: tuple[App, Callable[[], str]],
) -> None:
    app, scrape = scraped
    node = nodes(make_node("gates"))["metadata"]["name"]
    gated = create_pod(make_pod("gated").gates("example.com/a").obj())
    uid = gated["metadata"]["uid"]
    assert [g["name"] for g in gated["spec"]["schedulingGates"]] == ["example.com/a"]
    # A control pod: the scheduler is working during the observation window.
    create_pod(make_pod("free").obj())
    cluster.wait_for(
        lambda: kube.get(pod_path(namespace, "free"))["spec"].get("nodeName"), timeout=15, what="control pod bound"
    )
    cluster.wait_for(lambda: app.queue.where(uid) is SubQueue.GATED, timeout=10, what="gated in the queue")

    deadline = time.monotonic() + OBSERVE_SECONDS
    while time.monotonic() < deadline:
        pod = kube.get(pod_path(namespace, "gated"))
        assert not pod["spec"].get("nodeName"), "a gated pod was bound"
        # The API server itself sets PodScheduled=False/SchedulingGated on a gated pod's creation;
        # anything else (Unschedulable, SchedulerError) would be our write.
        assert all(c.get("reason") == "SchedulingGated" for c in _pod_scheduled(pod)), _pod_scheduled(pod)
        assert not pod["status"].get("nominatedNodeName")
        assert app.queue.where(uid) is SubQueue.GATED
        time.sleep(0.25)
    assert _events_about(kube, namespace, "gated") == []
    body = scrape()
    assert 'scheduler_pending_pods{queue="gated"} 1.0' in body
    assert 'scheduler_pending_pods{queue="unschedulable"} 0.0' in body
    qpi = app.queue.get(uid)
    assert qpi is not None
    assert qpi.attempts == 0

    # Remove the gate (the API server allows removing, never adding): bound within seconds.
    start = time.monotonic()
    kube.patch(pod_path(namespace, "gated"), {"spec": {"schedulingGates": None}}, MERGE_PATCH_CT)
    bound = cluster.wait_for(
        lambda: kube.get(pod_path(namespace, "gated"))["spec"].get("nodeName"),
        timeout=UNGATED_BIND_SECONDS,
        interval=0.05,
        what="ungated pod bound",
    )
    assert bound == node
    assert time.monotonic() - start < UNGATED_BIND_SECONDS
    scheduled = cluster.wait_for(
        lambda: [e for e in _events_about(kube, namespace, "gated") if e["reason"] == "Scheduled"],
        timeout=10,
        what="Scheduled event",
    )
    assert scheduled[0]["note"] == f"Successfully assigned {namespace}/gated to {node}"
    assert not [e for e in _events_about(kube, namespace, "gated") if e["reason"] == "FailedScheduling"]
    assert 'scheduler_pending_pods{queue="gated"} 0.0' in scrape()
    assert app.cache.check_invariants() == []
