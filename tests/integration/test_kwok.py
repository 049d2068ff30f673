"""A living cluster: kwok (sigs.k8s.io/kwok, :mod:`custom_scheduler.devenv.kwok`) plays the kubelet
of marked Nodes on the session's real control plane, and our scheduler places pods there.

The session runs one kwok (``kwok_proc``, tests/conftest.py) and the node-lifecycle controller, so
nothing is played by hand: the Nodes heartbeat, the pods our scheduler binds run, a Job's pod
finishes and frees its room, a graceful delete finishes, a Node goes NotReady when asked, the
controller taints it and evicts the pods that do not tolerate that. Each test makes its own Nodes
(a unique name and label, so its pods land only there) and deletes them afterwards.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import pytest

from custom_scheduler.devenv import cluster, kwok
from custom_scheduler.kube import api_errors
from custom_scheduler.kube.client import KubeClient, node_path, pod_path
from tests.builders import make_node, make_pod
from tests.integration.env import Env


@pytest.fixture
def kwok_node(kwok_proc: kwok.Kwok, kube: KubeClient) -> Iterator[Callable[..., str]]:
    """Create a kwok-managed Node (Ready by kwok's report), labelled ``pool=<its name>``; return its
    name. The Nodes are deleted after the test."""
    made: list[str] = []

    def make(prefix: str = "kwok", **capacity: str) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:6]}"
        obj = make_node(name).capacity(**(capacity or {"cpu": "4", "memory": "8Gi", "pods": "110"}))
        made.append(name)
        try:
            kwok.create_node(kube, obj.label("pool", name).obj())
        except TimeoutError as e:
            raise AssertionError(f"{e}\nkwok log:\n{kwok_proc.log_tail()}") from e
        return name

    yield make
    for name in made:
        kwok.delete_node(kube, name)


def _condition(pod: dict[str, Any], kind: str) -> str:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return str(c.get("status") or "")
    return ""


def _wait_pod(env: Env, name: str, check: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        pod = env.pod(name)
        return pod if check(pod) else None

    got: dict[str, Any] = cluster.wait_for(done, timeout=30, interval=0.2, what=f"pod {name} {what}")
    return got


def _seconds(rfc3339: str) -> float:
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


def _running_and_ready(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running" and _condition(pod, "Ready") == "True"


def test_kwok_node_becomes_ready_and_renews_its_lease_and_leaves_hand_made_nodes_alone(
    env: Env, kwok_proc: kwok.Kwok, kwok_node: Callable[..., str]
) -> None:
    hand_made = f"by-hand-{uuid.uuid4().hex[:6]}"
    cluster.create_ready_node(env.kube, make_node(hand_made).obj())
    try:
        _ready_and_heartbeating(env, kwok_proc, kwok_node(), hand_made)
    finally:
        kwok.delete_node(env.kube, hand_made)


def _ready_and_heartbeating(env: Env, kwok_proc: kwok.Kwok, name: str, hand_made: str) -> None:
    lease_seconds = kwok_proc.node_lease_duration_seconds
    node = env.kube.get(node_path(name))
    assert kwok.ready_status(node) == "True"
    # kwok's node-initialize stage wrote these, not us.
    assert node["status"]["nodeInfo"]["kubeletVersion"].startswith("kwok-")
    assert {a["type"] for a in node["status"]["addresses"]} >= {"InternalIP", "Hostname"}
    assert node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] == kwok_proc.port
    assert not any(t["key"] == kwok.NOT_READY_TAINT for t in node["spec"].get("taints") or [])

    first = cluster.wait_for(lambda: kwok.node_lease(env.kube, name), timeout=15, what=f"the Lease of {name}")
    assert first["spec"]["leaseDurationSeconds"] == lease_seconds
    assert first["metadata"]["ownerReferences"][0]["name"] == name
    renewed = cluster.wait_for(
        lambda: (lease := kwok.node_lease(env.kube, name)) and lease["spec"]["renewTime"] > first["spec"]["renewTime"],
        timeout=3 * lease_seconds,
        what=f"the Lease of {name} to be renewed",
    )
    assert renewed
    # kwok has run a full renewal round since both nodes existed: the hand-made one is not its own.
    assert kwok.node_lease(env.kube, hand_made) is None
    assert not env.kube.get(node_path(hand_made))["status"].get("nodeInfo", {}).get("kubeletVersion")


def test_pod_bound_by_our_scheduler_goes_running_and_ready(env: Env, kwok_node: Callable[..., str]) -> None:
    name = kwok_node()
    env.start_scheduler()
    env.create_pod(make_pod("web").req(cpu="500m").node_selector(pool=name).obj())
    assert env.wait_bound("web")["web"] == name
    pod = _wait_pod(env, "web", _running_and_ready, "Running and Ready")
    status = pod["status"]
    assert _condition(pod, "ContainersReady") == "True"
    (container,) = status["containerStatuses"]
    assert container["name"] == "c0"
    assert container["ready"] is True
    assert "running" in container["state"]
    assert status["podIP"]
    assert status["hostIP"]


def _job(name: str, pool: str, run_for: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "completions": 1,
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": {kwok.COMPLETE_AFTER_ANNOTATION: run_for}},
                "spec": {
                    "schedulerName": "custom-scheduler",
                    "restartPolicy": "Never",
                    "nodeSelector": {"pool": pool},
                    "containers": [
                        {
                            "name": "work",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": "800m"}},
                        }
                    ],
                },
            },
        },
    }


def _job_complete(env: Env, name: str) -> bool:
    job = env.kube.get(f"/apis/batch/v1/namespaces/{env.namespace}/jobs/{name}")
    conds = (job.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Complete" and c["status"] == "True" for c in conds)


def test_job_pod_succeeds_after_its_set_time_and_the_pod_waiting_for_its_room_binds(
    env: Env, kwok_node: Callable[..., str]
) -> None:
    name = kwok_node(cpu="1", memory="4Gi", pods="10")
    env.start_scheduler()
    env.kube.post(f"/apis/batch/v1/namespaces/{env.namespace}/jobs", _job("batch", name, "4s"))
    (job_pod,) = cluster.wait_for(
        lambda: cluster.list_pods(env.kube, env.namespace, "job-name=batch"), timeout=30, what="the Job's pod"
    )
    job_pod_name = job_pod["metadata"]["name"]
    assert env.wait_bound(job_pod_name)[job_pod_name] == name
    _wait_pod(env, job_pod_name, _running_and_ready, "Running and Ready")

    # 800m of the node's 1 CPU is taken: the second pod does not fit while the Job's pod runs.
    env.create_pod(make_pod("next").req(cpu="800m").node_selector(pool=name).obj())
    notes = env.wait_failed_scheduling("next")
    assert any("Insufficient cpu" in n for n in notes), notes
    assert env.node_of("next") == ""

    done = _wait_pod(env, job_pod_name, lambda p: p["status"].get("phase") == "Succeeded", "Succeeded")
    (container,) = done["status"]["containerStatuses"]
    finished = container["state"]["terminated"]
    assert finished["reason"] == "Completed"
    assert finished["exitCode"] == 0
    # It ran its set time (4 s; the timestamps have whole seconds) before it succeeded.
    ran = _seconds(finished["finishedAt"]) - _seconds(done["status"]["startTime"])
    assert ran >= 3, (done["status"]["startTime"], finished["finishedAt"])
    cluster.wait_for(lambda: _job_complete(env, "batch"), timeout=30, what="the Job to complete")
    # The scheduler saw the pod finish (it leaves the non-terminal pods' watch) and its room free.
    assert env.wait_bound("next")["next"] == name
    _wait_pod(env, "next", _running_and_ready, "Running and Ready")


def test_graceful_deletion_of_a_running_pod_finishes(env: Env, kwok_node: Callable[..., str]) -> None:
    name = kwok_node()
    env.start_scheduler()
    env.create_pod(make_pod("doomed").node_selector(pool=name).obj())
    env.wait_bound("doomed")
    _wait_pod(env, "doomed", _running_and_ready, "Running and Ready")

    deleting = env.kube.delete(pod_path(env.namespace, "doomed"), {"gracePeriodSeconds": 30})
    assert deleting["metadata"]["deletionTimestamp"]  # graceful: the API server only marked it

    def gone() -> bool:
        try:
            env.pod("doomed")
        except api_errors.NotFound:
            return True
        return False

    # Well inside the grace period: kwok finished it, as a kubelet does once the containers stop.
    cluster.wait_for(gone, timeout=15, interval=0.2, what="the pod to be deleted")


def test_node_made_not_ready_on_demand_reports_ready_false_then_recovers(
    env: Env, kwok_proc: kwok.Kwok, kwok_node: Callable[..., str]
) -> None:
    name = kwok_node()
    kwok.make_not_ready(env.kube, name)
    node = kwok.wait_ready_status(env.kube, name, "False", timeout=30)
    (ready,) = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
    assert ready["reason"] == "nodeFailed"
    # Still heartbeating: kwok renews the Lease of a NotReady node (a kubelet alive but unhealthy).
    before = kwok.node_lease(env.kube, name)
    assert before is not None
    cluster.wait_for(
        lambda: (lease := kwok.node_lease(env.kube, name)) and lease["spec"]["renewTime"] > before["spec"]["renewTime"],
        timeout=3 * kwok_proc.node_lease_duration_seconds,
        what=f"the Lease of NotReady {name} to be renewed",
    )
    assert kwok.ready_status(env.kube.get(node_path(name))) == "False"

    kwok.make_ready(env.kube, name)
    kwok.wait_ready_status(env.kube, name, "True", timeout=30)


def _taints(env: Env, name: str) -> set[tuple[str, str]]:
    return {(t["key"], t["effect"]) for t in env.kube.get(node_path(name))["spec"].get("taints") or []}


def test_node_lifecycle_controller_taints_a_not_ready_node_and_evicts_what_does_not_tolerate_it(
    env: Env, kwok_node: Callable[..., str]
) -> None:
    name = kwok_node()
    # A Ready node beside it: when every Node is NotReady, the controller blames itself (its
    # "master disruption" mode) and taints nothing NoExecute, so nothing would be evicted.
    kwok_node("healthy")
    env.start_scheduler()
    # "brief" tolerates a NotReady node for 1 s; "patient" gets the API server's default (300 s).
    brief = make_pod("brief").node_selector(pool=name).obj()
    brief["spec"]["tolerations"] = [
        {"key": kwok.NOT_READY_TAINT, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 1}
    ]
    env.create_pod(brief)
    env.create_pod(make_pod("patient").node_selector(pool=name).obj())
    env.wait_bound("brief", "patient")

    kwok.make_not_ready(env.kube, name)
    want = {(kwok.NOT_READY_TAINT, "NoSchedule"), (kwok.NOT_READY_TAINT, "NoExecute")}
    cluster.wait_for(lambda: _taints(env, name) >= want, timeout=30, what=f"{name} tainted not-ready")

    def brief_gone() -> bool:
        return "brief" not in env.pods()

    # Taint-based eviction deleted it (a graceful delete that kwok finished).
    cluster.wait_for(brief_gone, timeout=30, interval=0.2, what="the intolerant pod evicted")
    assert env.node_of("patient") == name
    # The NoSchedule taint keeps new pods off it meanwhile.
    env.create_pod(make_pod("late").node_selector(pool=name).obj())
    notes = env.wait_failed_scheduling("late")
    assert any("1 node(s) had untolerated taint" in n for n in notes), notes

    kwok.make_ready(env.kube, name)
    cluster.wait_for(lambda: not _taints(env, name) & want, timeout=30, what=f"{name} untainted")
    assert env.wait_bound("late")["late"] == name
