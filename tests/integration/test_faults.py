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

from custom_scheduler.devenv import cluster
from custom_scheduler.kube import api_errors
from custom_scheduler.kube.client import KubeClient, pod_path
from custom_scheduler.server.app import App
from tests.builders import make_node, make_pod
from tests.faultproxy import FaultProxy, Rule
from tests.integration.env import Env
from tests.observers import RetriesSeen


def _successful_binds(proxy: FaultProxy, namespace: str) -> Counter[str]:
    return Counter(
        path.split("/pods/")[1].split("/")[0]
        for method, path, status in proxy.log
        if method == "POST" and f"/namespaces/{namespace}/pods/" in path and path.endswith("/binding") and status == 201
    )


def _assert_healthy(kube: KubeClient, app: App) -> None:
    assert cluster.overcommitted_nodes(kube) == []
    assert app.cache.check_invariants() == []


def test_apiserver_restart_mid_burst(env: Env, proxied: Callable[..., App], proxy: FaultProxy) -> None:
    for i in range(4):
        env.nodes(make_node(f"restart-{i}").capacity(cpu="4", memory="8Gi", pods="30"))
    app = proxied()
    names = [f"p{i}" for i in range(60)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(env.create_pod, [make_pod(n).req(cpu="200m", memory="128Mi").obj() for n in names[:30]]))
    env.control_plane.restart_apiserver()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(env.create_pod, [make_pod(n).req(cpu="200m", memory="128Mi").obj() for n in names[30:]]))
    env.wait_bound(*names, timeout=90)
    assert all(v <= 1 for v in _successful_binds(proxy, env.namespace).values())
    _assert_healthy(env.kube, app)


def test_watch_expired_410_relists_and_turns_vanished_pods_into_deletes(
    env: Env, proxied: Callable[..., App], proxy: FaultProxy
) -> None:
    env.nodes(make_node("small").capacity(cpu="1", memory="1Gi", pods="10"))
    app = proxied()
    env.create_pod(make_pod("doomed").req(cpu="2").obj())  # unschedulable for now
    cluster.wait_for(lambda: app.queue.pending_counts()["unschedulable"] >= 1, timeout=15, what="doomed queued")
    relists = app.pods.reflector.relists
    # The next pods watch waits 2 s, then answers 410 Expired; meanwhile the pod goes away.
    proxy.add(Rule("GET", r"^/api/v1/pods\?.*watch=true", times=1, delay=2.0, watch_error=410))
    proxy.break_streams()
    env.delete_pod_now("doomed")
    env.create_pod(make_pod("newcomer").req(cpu="100m").obj())
    cluster.wait_for(lambda: app.pods.reflector.relists > relists, timeout=20, what="pods re-listed")
    env.nodes(make_node("big").capacity(cpu="8", memory="8Gi", pods="10"))
    env.wait_bound("newcomer", timeout=30)
    assert "doomed" not in env.placements()
    assert not any(pod.name == "doomed" and pod.namespace == env.namespace for _, pod in app.queue.pending_pods())
    _assert_healthy(env.kube, app)


def test_silent_watch_is_noticed_by_the_read_timeout(env: Env, proxied: Callable[..., App], proxy: FaultProxy) -> None:
    app = proxied()
    silent = proxy.add(Rule("GET", r"^/api/v1/nodes\?.*watch=true", times=1, silent=True))
    proxy.break_streams()
    env.create_pod(make_pod("waiting").req(cpu="100m").obj())
    # The reflector has re-opened its nodes watch and the proxy stalls it: from now on a new node
    # reaches the scheduler only after the read timeout noticed the silent stream.
    cluster.wait_for(lambda: silent.hits == 1, timeout=15, what="the nodes watch re-opened and stalled")
    t0 = time.monotonic()
    env.nodes(make_node("late"))
    env.wait_bound("waiting", timeout=30)
    # The 3 s read timeout noticed the stalled stream and the reflector resumed.
    assert time.monotonic() - t0 < 20
    _assert_healthy(env.kube, app)


def test_bind_whose_answer_is_lost_is_retried_and_409_same_node_counts_as_success(
    env: Env, proxied: Callable[..., App], proxy: FaultProxy
) -> None:
    node = env.node(make_node("lossy"))
    proxy.add(Rule("POST", rf"/namespaces/{env.namespace}/pods/lost/binding", times=1, drop_after_forward=True))
    observed = RetriesSeen()
    app = proxied(observer=observed)
    env.create_pod(make_pod("lost").obj())
    assert env.wait_bound("lost", timeout=60)["lost"] == node
    binds = cluster.wait_for(
        lambda: (b := [s for m, p, s in proxy.log if p.endswith("/pods/lost/binding")]) and len(b) >= 2 and b,
        timeout=10,
        what="the retried bind",
    )
    assert binds == [201, 409]  # the first went through but its answer was lost
    cluster.wait_for(lambda: observed.retries, timeout=10, what="the binding cycle's report")
    assert observed.retries == [1]  # one bind call, retried once: the 409 (same node) is its success
    assert env.events("FailedScheduling") == []
    _assert_healthy(env.kube, app)


def test_slow_binds_do_not_stall_scheduling(env: Env, proxied: Callable[..., App], proxy: FaultProxy) -> None:
    env.nodes(make_node("slow"))
    proxy.add(Rule("POST", rf"/namespaces/{env.namespace}/pods/[^/]+/binding", times=12, delay=1.5))
    app = proxied()
    names = [f"s{i}" for i in range(12)]
    with ThreadPoolExecutor(12) as pool:
        list(pool.map(env.create_pod, [make_pod(n).obj() for n in names]))
    t0 = time.monotonic()
    env.wait_bound(*names, timeout=30)
    # Twelve 1.5 s binds ran concurrently, not one after another (18 s).
    assert time.monotonic() - t0 < 9
    _assert_healthy(env.kube, app)


def test_pod_deleted_while_its_bind_is_in_flight(env: Env, proxied: Callable[..., App], proxy: FaultProxy) -> None:
    env.nodes(make_node("gone"))
    rule = proxy.add(Rule("POST", rf"/namespaces/{env.namespace}/pods/ghost/binding", times=1, delay=1.5))
    app = proxied()
    pod = env.create_pod(make_pod("ghost").req(cpu="500m").obj())
    cluster.wait_for(lambda: rule.hits == 1, timeout=15, what="bind in flight")
    env.delete_pod_now("ghost")
    cluster.wait_for(
        lambda: [s for _, p, s in proxy.log if p.endswith("/pods/ghost/binding")], timeout=10, what="bind answered"
    )
    assert [s for _, p, s in proxy.log if p.endswith("/pods/ghost/binding")] == [404]
    cluster.wait_for(lambda: app.cache.get_pod(pod["metadata"]["uid"]) is None, timeout=10, what="forgotten")
    assert not app.queue.contains(pod["metadata"]["uid"])
    env.create_pod(make_pod("after").obj())
    env.wait_bound("after", timeout=60)
    _assert_healthy(env.kube, app)


def test_pod_deleted_or_changed_while_queued(env: Env) -> None:
    env.nodes(make_node("tiny").capacity(cpu="500m", memory="1Gi", pods="10"))
    app = env.start_scheduler()
    gone = env.create_pod(make_pod("gone").req(cpu="1").obj())
    changed = env.create_pod(make_pod("changed").req(cpu="1").obj())
    cluster.wait_for(lambda: app.queue.pending_counts()["unschedulable"] == 2, timeout=15, what="both queued")
    env.delete_pod_now("gone")
    env.kube.patch(pod_path(env.namespace, "changed"), {"metadata": {"labels": {"touched": "yes"}}})
    cluster.wait_for(lambda: not app.queue.contains(gone["metadata"]["uid"]), timeout=10, what="gone dropped")
    qpi = cluster.wait_for(
        lambda: (q := app.queue.get(changed["metadata"]["uid"])) and q.pod.labels.get("touched") == "yes" and q,
        timeout=10,
        what="changed updated in place",
    )
    assert qpi.pod.labels["touched"] == "yes"
    env.nodes(make_node("roomy").capacity(cpu="4", memory="4Gi", pods="10"))
    assert env.wait_bound("changed", timeout=60)["changed"]
    _assert_healthy(env.kube, app)


def test_another_scheduler_binding_on_the_same_nodes_is_counted(env: Env) -> None:
    """Pods bound by someone else (straight through pods/binding) while our daemon runs use up
    room our burst would otherwise take: we must never put our pods on top of them."""
    names = [env.node(make_node(f"shared-{i}").capacity(cpu="2", memory="4Gi", pods="20")) for i in range(3)]
    app = env.start_scheduler()
    theirs = [
        env.create_pod(make_pod(f"theirs-{i}").scheduler("other-scheduler").req(cpu="500m").obj()) for i in range(9)
    ]
    stop = threading.Event()

    def competitor() -> None:
        # Three per node: 1500m of each node's 2000m, bound while our burst is being scheduled.
        for i, pod in enumerate(theirs):
            if stop.is_set():
                return
            try:
                cluster.bind(env.kube, env.namespace, pod["metadata"]["name"], names[i % 3], uid=pod["metadata"]["uid"])
            except api_errors.KubeError:
                pass

    t = threading.Thread(target=competitor)
    t.start()
    t.join(30)
    ours = [f"ours-{i}" for i in range(8)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(env.create_pod, [make_pod(n).req(cpu="250m").obj() for n in ours]))
    # Room left: 3 × 500m = six of our 250m pods; the other two must stay pending.
    cluster.wait_for(lambda: sum(1 for n in ours if env.placements().get(n)) == 6, timeout=30, what="six of ours bound")
    cluster.wait_for(
        lambda: app.queue.pending_counts()["unschedulable"] + app.queue.pending_counts()["backoff"] >= 2,
        timeout=15,
        what="two pending",
    )
    assert sum(1 for n in ours if env.placements().get(n)) == 6
    _assert_healthy(env.kube, app)
