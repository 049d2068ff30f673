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
from custom_scheduler.kube.client import MERGE_PATCH_CT, node_path, pod_path
from custom_scheduler.server.app import App
from custom_scheduler.server.delegated_auth import DelegatingAuth
from custom_scheduler.server.health import HealthServer
from custom_scheduler.server.metrics import Metrics
from tests import secure
from tests.builders import make_node, make_pod
from tests.integration.env import Env

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


def _pod_scheduled(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in (pod.get("status") or {}).get("conditions") or () if c.get("type") == "PodScheduled"]


def test_gated_pod_is_not_attempted_until_its_gates_are_removed(
    gates_supported: None, env: Env, scraped: tuple[App, Callable[[], str]]
) -> None:
    app, scrape = scraped
    node = env.node(make_node("gates"))
    gated = env.create_pod(make_pod("gated").gates("example.com/a").obj())
    uid = gated["metadata"]["uid"]
    assert [g["name"] for g in gated["spec"]["schedulingGates"]] == ["example.com/a"]
    # Control pods prove the scheduler has gone past the gated pod: "free" was created after it, and
    # "free-2" after a node update, a cluster event that moves unschedulable pods back to the active
    # queue (gated ones must stay). At the same priority the gated pod, created earlier, would have
    # been popped before either had it been active, and anything written about it (a condition, an
    # event) queued before their Scheduled events; so once those are out, we look once.
    env.create_pod(make_pod("free").obj())
    env.wait_bound("free", timeout=15)
    cluster.wait_for(lambda: app.queue.where(uid) is SubQueue.GATED, timeout=10, what="gated in the queue")
    env.kube.patch(node_path(node), {"metadata": {"labels": {"touched": "yes"}}}, MERGE_PATCH_CT)
    # Only the updated node fits "free-2": it is bound once the scheduler has seen the update.
    env.create_pod(make_pod("free-2").node_selector(touched="yes").obj())
    env.wait_bound("free-2", timeout=15)
    cluster.wait_for(lambda: env.events("Scheduled", about="free-2"), timeout=10, what="free-2's Scheduled event")

    pod = env.pod("gated")
    assert not pod["spec"].get("nodeName"), "a gated pod was bound"
    # The API server itself sets PodScheduled=False/SchedulingGated on a gated pod's creation;
    # anything else (Unschedulable, SchedulerError) would be our write.
    assert all(c.get("reason") == "SchedulingGated" for c in _pod_scheduled(pod)), _pod_scheduled(pod)
    assert not pod["status"].get("nominatedNodeName")
    assert app.queue.where(uid) is SubQueue.GATED
    assert env.events(about="gated") == []
    body = scrape()
    assert 'scheduler_pending_pods{queue="gated"} 1.0' in body
    assert 'scheduler_pending_pods{queue="unschedulable"} 0.0' in body
    qpi = app.queue.get(uid)
    assert qpi is not None
    assert qpi.attempts == 0

    # Remove the gate (the API server allows removing, never adding): bound within seconds.
    start = time.monotonic()
    env.kube.patch(pod_path(env.namespace, "gated"), {"spec": {"schedulingGates": None}}, MERGE_PATCH_CT)
    bound = cluster.wait_for(
        lambda: env.node_of("gated"), timeout=UNGATED_BIND_SECONDS, interval=0.05, what="ungated pod bound"
    )
    assert bound == node
    assert time.monotonic() - start < UNGATED_BIND_SECONDS
    scheduled = cluster.wait_for(
        lambda: env.events("Scheduled", about="gated"),
        timeout=10,
        what="Scheduled event",
    )
    assert scheduled[0]["note"] == f"Successfully assigned {env.namespace}/gated to {node}"
    assert env.events("FailedScheduling", about="gated") == []
    assert 'scheduler_pending_pods{queue="gated"} 0.0' in scrape()
    assert app.cache.check_invariants() == []
