"""In-place pod resize (GA since 1.35) on the real API server: the scheduler counts a running pod
as upstream's NodeInfo does, at the max of its spec and the kubelet's allocated and actuated
resources, and a scale-down the kubelet reports actuated retries the pods that lacked the room.

There is no kubelet here: the test plays it, patching the pod's status as a kubelet would after
admitting and applying a resize (``containerStatuses[].allocatedResources`` and ``.resources``)."""

from __future__ import annotations

from typing import Any

from custom_scheduler.devenv import cluster
from custom_scheduler.kube.client import pod_path
from custom_scheduler.server.app import App
from tests.builders import make_node, make_pod
from tests.integration.env import Env

STRATEGIC = "application/strategic-merge-patch+json"


def _running(env: Env, name: str, cpu: str) -> dict[str, Any]:
    """Report pod ``name`` running with its one container admitted and applied at ``cpu``."""
    pod = env.pod(name)
    c = pod["spec"]["containers"][0]
    status = {
        "name": c["name"],
        "image": c["image"],
        "imageID": "",
        "ready": True,
        "restartCount": 0,
        "started": True,
        "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
        "allocatedResources": {"cpu": cpu},
        "resources": {"requests": {"cpu": cpu}},
    }
    doc: dict[str, Any] = env.kube.patch(
        pod_path(env.namespace, name) + "/status",
        {"status": {"phase": "Running", "containerStatuses": [status]}},
    )
    return doc


def _resize(env: Env, name: str, cpu: str) -> dict[str, Any]:
    """Ask for a new CPU request through the ``resize`` subresource, as ``kubectl --subresource``."""
    c = env.pod(name)["spec"]["containers"][0]["name"]
    body = {"spec": {"containers": [{"name": c, "resources": {"requests": {"cpu": cpu}}}]}}
    doc: dict[str, Any] = env.kube.patch(pod_path(env.namespace, name) + "/resize", body, STRATEGIC)
    return doc


def _counted(app: App, doc: dict[str, Any]) -> int | None:
    """The milli-CPU the scheduler's cache counts for the pod once it has seen version ``doc``."""
    pod = app.cache.get_pod(doc["metadata"]["uid"])
    if pod is None or pod.resource_version != doc["metadata"]["resourceVersion"]:
        return None
    return pod.requests.milli_cpu


def _wait_counted(app: App, doc: dict[str, Any], want: int) -> None:
    cluster.wait_for(lambda: _counted(app, doc) == want, timeout=15, what=f"cache counts {want}m")


def test_a_pod_resized_up_is_counted_at_its_new_size(env: Env) -> None:
    """1 CPU running, resized to 3 and actuated: a 2-CPU pod, which the old size left room for,
    stays pending for lack of CPU."""
    env.nodes(make_node("resize-up").capacity(cpu="4", memory="8Gi", pods="10"))
    app = env.start_scheduler()
    env.create_pod(make_pod("grower").req(cpu="1").obj())
    env.wait_bound("grower")
    _wait_counted(app, _running(env, "grower", "1"), 1000)
    _resize(env, "grower", "3")
    _wait_counted(app, _running(env, "grower", "3"), 3000)

    env.create_pod(make_pod("newcomer").req(cpu="2").obj())
    notes = env.wait_failed_scheduling("newcomer")
    assert any("Insufficient cpu" in n for n in notes), notes
    assert env.node_of("newcomer") == ""


def test_a_pod_resized_down_makes_room_once_actuated(env: Env) -> None:
    """3 CPU running, a 2-CPU pod pending; resized to 1: still counted at 3 until the kubelet
    reports the smaller size applied, then the waiting pod binds within seconds."""
    node = env.node(make_node("resize-down").capacity(cpu="4", memory="8Gi", pods="10"))
    app = env.start_scheduler()
    env.create_pod(make_pod("shrinker").req(cpu="3").obj())
    env.wait_bound("shrinker")
    _wait_counted(app, _running(env, "shrinker", "3"), 3000)
    env.create_pod(make_pod("waiting").req(cpu="2").obj())
    assert any("Insufficient cpu" in n for n in env.wait_failed_scheduling("waiting"))

    # Desired 1 CPU, but the kubelet still reports 3 allocated and applied: no room yet.
    _wait_counted(app, _resize(env, "shrinker", "1"), 3000)
    assert env.node_of("waiting") == ""
    _running(env, "shrinker", "1")
    # The scale-down is the event that retries it: far sooner than the 5-minute unschedulable flush.
    assert env.wait_bound("waiting", timeout=15)["waiting"] == node
