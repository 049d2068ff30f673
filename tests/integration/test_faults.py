"""Faults around the real API server: nothing lost, nothing bound twice, nothing over-committed.

The daemon under test talks to the API server through :mod:`tests.faultproxy`, which forwards to
the real kube-apiserver and injects faults; the test's own admin client talks to the server directly.
After each scenario: every pod that fits is bound exactly once, no node's bound pods exceed its
allocatable (:func:`cluster.overcommitted_nodes`), and the scheduler's cache is self-consistent.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from custom_scheduler.devenv import cluster
from custom_scheduler.devenv.controlplane import ControlPlane
from custom_scheduler.kube import api_errors
from custom_scheduler.kube.client import KubeClient, pod_path
from custom_scheduler.server.app import App
from tests.builders import NodeBuilder, make_node, make_pod
from tests.faultproxy import FaultProxy, Rule
from tests.observers import RetriesSeen

Nodes = Callable[[NodeBuilder], dict[str, Any]]
CreatePod = Callable[[dict[str, Any]], dict[str, Any]]


def _nodes_of(kube: KubeClient, namespace: str) -> dict[str, str]:
    return {p["metadata"]["name"]: p["spec"].get("nodeName") or "" for p in cluster.list_pods(kube, namespace)}


def _wait_bound(kube: KubeClient, namespace: str, names: list[str], timeout: float = 60) -> dict[str, str]:
    def done() -> dict[str, str] | None:
        got = _nodes_of(kube, namespace)
        return got if all(got.get(n) for n in names) else None

    result: dict[str, str] = cluster.wait_for(done, timeout=timeout, what=f"{len(names)} pods bound")
    return result


def _successful_binds(proxy: FaultProxy, namespace: str) -> Counter[str]:
    return Counter(
        path.split("/pods/")[1].split("/")[0]
        for method, path, status in proxy.log
        if method == "POST" and f"/namespaces/{namespace}/pods/" in path and path.endswith("/binding") and status == 201
    )


def _assert_healthy(kube: KubeClient, app: App) -> None:
    assert cluster.overcommitted_nodes(kube) == []
    assert app.cache.check_invariants() == []


def test_apiserver_restart_mid_burst(
    control_plane: ControlPlane,
    kube: KubeClient,
    namespace: str,
    nodes: Nodes,
    create_pod: CreatePod,
    proxied: Callable[..., App],
    proxy: FaultProxy,
) -> None:
    for i in range(4):
        nodes(make_node(f"restart-{i}").capacity(cpu="4", memory="8Gi", pods="30"))
    app = proxied()
    names = [f"p{i}" for i in range(60)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create_pod, [make_pod(n).req(cpu="200m", memory="128Mi").obj() for n in names[:30]]))
    control_plane.restart_apiserver()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create_pod, [make_pod(n).req(cpu="200m", memory="128Mi").obj() for n in names[30:]]))
    _wait_bound(kube, namespace, names, timeout=90)
    assert all(v <= 1 for v in _successful_binds(proxy, namespace).values())
    _assert_healthy(kube, app)


def test_watch_expired_410_relists_and_turns_vanished_pods_into_deletes(
    kube: KubeClient,
    namespace: str,
    nodes: Nodes,
    create_pod: CreatePod,
    proxied: Callable[..., App],
    proxy: FaultProxy,
) -> None:
    nodes(make_node("small").capacity(cpu="1", memory="1Gi", pods="10"))
    app = proxied()
    create_pod(make_pod("doomed").req(cpu="2").obj())  # unschedulable for now
    cluster.wait_for(lambda: app.queue.pending_counts()["unschedulable"] >= 1, timeout=15, what="doomed queued")
    relists = app.pods.reflector.relists
    # The next pods watch waits 2 s, then answers 410 Expired; meanwhile the pod goes away.
    proxy.add(Rule("GET", r"^/api/v1/pods\?.*watch=true", times=1, delay=2.0, watch_error=410))
    proxy.break_streams()
    kube.delete(pod_path(namespace, "doomed"), {"gracePeriodSeconds": 0})
    create_pod(make_pod("newcomer").req(cpu="100m").obj())
    cluster.wait_for(lambda: app.pods.reflector.relists > relists, timeout=20, what="pods re-listed")
    nodes(make_node("big").capacity(cpu="8", memory="8Gi", pods="10"))
    _wait_bound(kube, namespace, ["newcomer"], timeout=30)
    assert "doomed" not in _nodes_of(kube, namespace)
    assert not any(pod.name == "doomed" and pod.namespace == namespace for _, pod in app.queue.pending_pods())
    _assert_healthy(kube, app)


def test_silent_watch_is_noticed_by_the_read_timeout(
    kube: KubeClient,
    namespace: str,
    nodes: Nodes,
    create_pod: CreatePod,
    proxied: Callable[..., App],
    proxy: FaultProxy,
) -> None:
    app = proxied()
    proxy.add(Rule("GET", r"^/api/v1/nodes\?.*watch=true", times=1, silent=True))
    proxy.break_streams()
    create_pod(make_pod("waiting").req(cpu="100m").obj())
    time.sleep(0.5)  # the nodes watch is now stalled behind the proxy
    t0 = time.monotonic()
    nodes(make_node("late"))
    _wait_bound(kube, namespace, ["waiting"], timeout=30)
    # The 3 s read timeout noticed the stalled stream and the reflector resumed.
    assert time.monotonic() - t0 < 20
    _assert_healthy(kube, app)


def test_bind_whose_answer_is_lost_is_retried_and_409_same_node_counts_as_success(
    kube: KubeClient,
    namespace: str,
    nodes: Nodes,
    create_pod: CreatePod,
    proxied: Callable[..., App],
    proxy: FaultProxy,
) -> None:
    node = nodes(make_node("lossy"))["metadata"]["name"]
    proxy.add(Rule("POST", rf"/namespaces/{namespace}/pods/lost/binding", times=1, drop_after_forward=True))
    observed = RetriesSeen()
    app = proxied(observer=observed)
    create_pod(make_pod("lost").obj())
    assert _wait_bound(kube, namespace, ["lost"])["lost"] == node
    binds = cluster.wait_for(
        lambda: (b := [s for m, p, s in proxy.log if p.endswith("/pods/lost/binding")]) and len(b) >= 2 and b,
        timeout=10,
        what="the retried bind",
    )
    assert binds == [201, 409]  # the first went through but its answer was lost
    cluster.wait_for(lambda: observed.retries, timeout=10, what="the binding cycle's report")
    assert observed.retries == [1]  # one bind call, retried once: the 409 (same node) is its success
    failed = kube.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")["items"]
    assert not [e for e in failed if e["reason"] == "FailedScheduling"]
    _assert_healthy(kube, app)


def test_slow_binds_do_not_stall_scheduling(
    kube: KubeClient,
    namespace: str,
    nodes: Nodes,
    create_pod: CreatePod,
    proxied: Callable[..., App],
    proxy: FaultProxy,
) -> None:
    nodes(make_node("slow"))
    proxy.add(Rule("POST", rf"/namespaces/{namespace}/pods/[^/]+/binding", times=12, delay=1.5))
    app = proxied()
    names = [f"s{i}" for i in range(12)]
    with ThreadPoolExecutor(12) as pool:
        list(pool.map(create_pod, [make_pod(n).obj() for n in names]))
    t0 = time.monotonic()
    _wait_bound(kube, namespace, names, timeout=30)
    # Twelve 1.5 s binds ran concurrently, not one after another (18 s).
    assert time.monotonic() - t0 < 9
    _assert_healthy(kube, app)


def test_pod_deleted_while_its_bind_is_in_flight(
    kube: KubeClient,
    namespace: str,
    nodes: Nodes,
    create_pod: CreatePod,
    proxied: Callable[..., App],
    proxy: FaultProxy,
) -> None:
    nodes(make_node("gone"))
    rule = proxy.add(Rule("POST", rf"/namespaces/{namespace}/pods/ghost/binding", times=1, delay=1.5))
    app = proxied()
    pod = create_pod(make_pod("ghost").req(cpu="500m").obj())
    cluster.wait_for(lambda: rule.hits == 1, timeout=15, what="bind in flight")
    kube.delete(pod_path(namespace, "ghost"), {"gracePeriodSeconds": 0})
    cluster.wait_for(
        lambda: [s for _, p, s in proxy.log if p.endswith("/pods/ghost/binding")], timeout=10, what="bind answered"
    )
    assert [s for _, p, s in proxy.log if p.endswith("/pods/ghost/binding")] == [404]
    cluster.wait_for(lambda: app.cache.get_pod(pod["metadata"]["uid"]) is None, timeout=10, what="forgotten")
    assert not app.queue.contains(pod["metadata"]["uid"])
    create_pod(make_pod("after").obj())
    _wait_bound(kube, namespace, ["after"])
    _assert_healthy(kube, app)


def test_pod_deleted_or_changed_while_queued(
    kube: KubeClient,
    namespace: str,
    nodes: Nodes,
    create_pod: CreatePod,
    start_scheduler: Callable[..., App],
) -> None:
    nodes(make_node("tiny").capacity(cpu="500m", memory="1Gi", pods="10"))
    app = start_scheduler()
    gone = create_pod(make_pod("gone").req(cpu="1").obj())
    changed = create_pod(make_pod("changed").req(cpu="1").obj())
    cluster.wait_for(lambda: app.queue.pending_counts()["unschedulable"] == 2, timeout=15, what="both queued")
    kube.delete(pod_path(namespace, "gone"), {"gracePeriodSeconds": 0})
    kube.patch(pod_path(namespace, "changed"), {"metadata": {"labels": {"touched": "yes"}}})
    cluster.wait_for(lambda: not app.queue.contains(gone["metadata"]["uid"]), timeout=10, what="gone dropped")
    qpi = cluster.wait_for(
        lambda: (q := app.queue.get(changed["metadata"]["uid"])) and q.pod.labels.get("touched") == "yes" and q,
        timeout=10,
        what="changed updated in place",
    )
    assert qpi.pod.labels["touched"] == "yes"
    nodes(make_node("roomy").capacity(cpu="4", memory="4Gi", pods="10"))
    assert _wait_bound(kube, namespace, ["changed"])["changed"]
    _assert_healthy(kube, app)


def test_another_scheduler_binding_on_the_same_nodes_is_counted(
    kube: KubeClient,
    namespace: str,
    nodes: Nodes,
    create_pod: CreatePod,
    start_scheduler: Callable[..., App],
) -> None:
    """Pods bound by someone else (straight through pods/binding) while our daemon runs use up
    room our burst would otherwise take: we must never put our pods on top of them."""
    names = [
        nodes(make_node(f"shared-{i}").capacity(cpu="2", memory="4Gi", pods="20"))["metadata"]["name"] for i in range(3)
    ]
    app = start_scheduler()
    theirs = [create_pod(make_pod(f"theirs-{i}").scheduler("other-scheduler").req(cpu="500m").obj()) for i in range(9)]
    stop = threading.Event()

    def competitor() -> None:
        # Three per node: 1500m of each node's 2000m, bound while our burst is being scheduled.
        for i, pod in enumerate(theirs):
            if stop.is_set():
                return
            try:
                cluster.bind(kube, namespace, pod["metadata"]["name"], names[i % 3], uid=pod["metadata"]["uid"])
            except api_errors.KubeError:
                pass

    t = threading.Thread(target=competitor)
    t.start()
    t.join(30)
    ours = [f"ours-{i}" for i in range(8)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create_pod, [make_pod(n).req(cpu="250m").obj() for n in ours]))
    # Room left: 3 × 500m = six of our 250m pods; the other two must stay pending.
    cluster.wait_for(
        lambda: sum(1 for n in ours if _nodes_of(kube, namespace).get(n)) == 6, timeout=30, what="six of ours bound"
    )
    cluster.wait_for(
        lambda: app.queue.pending_counts()["unschedulable"] + app.queue.pending_counts()["backoff"] >= 2,
        timeout=15,
        what="two pending",
    )
    assert sum(1 for n in ours if _nodes_of(kube, namespace).get(n)) == 6
    _assert_healthy(kube, app)
