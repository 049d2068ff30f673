"""The production daemon: as the ServiceAccount with the ConfigMap's config, probes and metrics,
and two replicas with leader election (exactly one schedules; failover; nothing bound twice)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from custom_scheduler import config
from custom_scheduler.devenv import cluster
from custom_scheduler.devenv.controlplane import ControlPlane
from custom_scheduler.kube import api_errors
from custom_scheduler.kube.client import KubeClient
from custom_scheduler.plugins.builtin import full_registry
from custom_scheduler.server.app import App
from custom_scheduler.server.daemon import serve
from custom_scheduler.server.metrics import Metrics
from tests import secure
from tests.builders import make_node, make_pod
from tests.faultproxy import FaultProxy, Rule
from tests.integration.env import Env
from tests.kubectl import SCHEDULER_USER, apply_rbac, scheduler_config_text

# Part of the integration smoke that CI also runs on the oldest supported Kubernetes.
pytestmark = pytest.mark.smoke


@dataclass
class Replica:
    app: App
    metrics: Metrics
    thread: threading.Thread
    result: list[int]
    token: str = ""  # for /metrics, which needs a token the API server authorizes (the admin's)

    def get(self, path: str) -> tuple[int, str]:
        status, body, _ = secure.get(f"https://127.0.0.1:{self.app.health_port}{path}", token=self.token or None)
        return status, body.decode()


@pytest.fixture
def replicas(control_plane: ControlPlane) -> Iterator[Callable[..., Replica]]:
    started: list[Replica] = []

    def start(config_text: str, client: KubeClient, *, identity: str = "", release_on_stop: bool = True) -> Replica:
        cfg = config.load_config(config_text, full_registry())
        metrics = Metrics(process_collectors=False)
        app = App(cfg, full_registry(), client, metrics=metrics)
        result: list[int] = []
        t = threading.Thread(
            target=lambda: result.append(
                serve(
                    app,
                    metrics,
                    identity=identity or None,
                    release_on_stop=release_on_stop,
                    health_address="127.0.0.1:0",
                    sync_timeout=30,
                )
            ),
            daemon=True,
        )
        t.start()
        r = Replica(app, metrics, t, result, token=control_plane.admin_token)
        started.append(r)
        cluster.wait_for(lambda: app.health_port, timeout=10, what="health server")
        return r

    yield start
    for r in started:
        r.app.stop_event.set()
    for r in started:
        r.thread.join(30)


def _short_lease(text: str, name: str) -> str:
    return (
        text.replace("leaseDuration: 15s", "leaseDuration: 4s")
        .replace("renewDeadline: 10s", "renewDeadline: 3s")
        .replace("retryPeriod: 2s", "retryPeriod: 500ms")
        .replace("resourceName: custom-scheduler", f"resourceName: {name}")
    )


def test_daemon_runs_as_the_service_account_with_the_configmap_config(
    env: Env, replicas: Callable[..., Replica]
) -> None:
    """The manifests' RBAC is enough to schedule, elect and report; the SA cannot read Secrets."""
    apply_rbac(env.control_plane)
    sa = KubeClient.from_kubeconfig(str(env.control_plane.kubeconfig(SCHEDULER_USER)), qps=0, burst=1)
    with pytest.raises(api_errors.ApiError) as denied:
        sa.get("/api/v1/namespaces/kube-system/secrets")
    assert denied.value.status == 403
    env.nodes(make_node("sa-node"))
    r = replicas(scheduler_config_text(), sa)
    cluster.wait_for(lambda: r.get("/readyz")[0] == 200, timeout=30, what="ready")
    for i in range(5):
        env.create_pod(make_pod(f"sa-{i}").req(cpu="100m").obj())
    env.wait_bound(*(f"sa-{i}" for i in range(5)), timeout=40)  # by the SA identity
    status, body = r.get("/metrics")
    assert status == 200
    assert 'scheduler_schedule_attempts_total{profile="custom-scheduler",result="scheduled"}' in body
    assert "custom_scheduler_leader 1.0" in body
    lease = env.kube.get("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/custom-scheduler")
    assert lease["spec"]["holderIdentity"]
    r.app.stop_event.set()
    r.thread.join(30)
    assert r.result == [0]
    released = env.kube.get("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/custom-scheduler")
    assert not released["spec"].get("holderIdentity")


def test_readyz_is_false_until_caches_sync_and_metrics_move(
    env: Env, proxy: FaultProxy, replicas: Callable[..., Replica], tmp_path: Path
) -> None:
    proxy.add(Rule("GET", r"^/api/v1/pods\?(?!.*watch=true)", times=1, delay=2.0))  # a slow first LIST
    client = KubeClient.from_kubeconfig(proxy.kubeconfig(tmp_path), qps=0, burst=1)
    env.nodes(make_node("probe").capacity(cpu="1", memory="1Gi", pods="10"))
    text = _short_lease(scheduler_config_text(), f"probe-{env.namespace}")
    r = replicas(text, client)
    assert r.get("/readyz")[0] == 503
    assert r.get("/healthz")[0] == 200
    cluster.wait_for(lambda: r.get("/readyz")[0] == 200, timeout=30, what="ready after sync")
    env.create_pod(make_pod("fits").req(cpu="100m").obj())
    env.create_pod(make_pod("too-big").req(cpu="4").obj())
    env.wait_bound("fits")

    def pending_unschedulable() -> bool:
        return r.metrics.sample("scheduler_pending_pods", {"queue": "unschedulable"}) == 1.0

    cluster.wait_for(pending_unschedulable, timeout=30, what="pending gauge")
    body = r.get("/metrics")[1]
    assert 'scheduler_schedule_attempts_total{profile="custom-scheduler",result="unschedulable"}' in body


def test_two_replicas_exactly_one_schedules_and_the_other_takes_over(
    env: Env, replicas: Callable[..., Replica]
) -> None:
    env.nodes(make_node("ha-1"))
    env.nodes(make_node("ha-2"))
    text = _short_lease(scheduler_config_text(), f"ha-{env.namespace}")
    admin = str(env.control_plane.kubeconfig())
    a = replicas(text, KubeClient.from_kubeconfig(admin, qps=0, burst=1), identity="replica-a", release_on_stop=False)
    cluster.wait_for(lambda: a.metrics.sample("custom_scheduler_leader") == 1.0, timeout=15, what="a leads")
    b = replicas(text, KubeClient.from_kubeconfig(admin, qps=0, burst=1), identity="replica-b", release_on_stop=False)
    cluster.wait_for(lambda: b.get("/readyz")[0] == 200, timeout=30, what="b warm standby")

    first = [f"first-{i}" for i in range(10)]
    for n in first:
        env.create_pod(make_pod(n).req(cpu="100m").obj())
    env.wait_bound(*first)
    assert b.metrics.sample("custom_scheduler_leader") == 0.0
    assert (
        b.metrics.sample("scheduler_schedule_attempts_total", {"profile": "custom-scheduler", "result": "scheduled"})
        or 0
    ) == 0

    # "Kill" the leader: it stops without releasing the Lease, like a crashed process.
    killed_at = time.monotonic()
    a.app.stop_event.set()
    a.thread.join(30)
    cluster.wait_for(lambda: b.metrics.sample("custom_scheduler_leader") == 1.0, timeout=20, what="b takes over")
    takeover = time.monotonic() - killed_at
    assert takeover < 4 + 6  # leaseDuration plus a few seconds
    second = [f"second-{i}" for i in range(10)]
    for n in second:
        env.create_pod(make_pod(n).req(cpu="100m").obj())
    env.wait_bound(*second)

    # The Scheduled events are written after the binds: wait for all of them, then count.
    def all_scheduled() -> Counter[str] | None:
        c = Counter(e["regarding"]["name"] for e in env.events("Scheduled"))
        return c if set(c) >= {*first, *second} else None

    scheduled: Counter[str] = cluster.wait_for(all_scheduled, timeout=15, what="a Scheduled event per pod")
    assert set(scheduled) == set(first) | set(second)
    assert max(scheduled.values()) == 1  # nothing bound twice
    lease = env.kube.get(f"/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/ha-{env.namespace}")
    assert lease["spec"]["holderIdentity"] == "replica-b"
    assert lease["spec"]["leaseTransitions"] >= 1


def test_a_stop_before_the_caches_sync_ends_the_daemon_at_once(
    env: Env, proxy: FaultProxy, replicas: Callable[..., Replica], tmp_path: Path
) -> None:
    """SIGTERM's handler sets the stop event; while the Pod LIST keeps failing the daemon must end
    cleanly then, not wait out its 30 s sync timeout (kube-scheduler's WaitForCacheSync ends with
    its context)."""
    proxy.add(Rule("GET", r"^/api/v1/pods\?(?!.*watch=true)", times=10_000, status=503))
    client = KubeClient.from_kubeconfig(proxy.kubeconfig(tmp_path), qps=0, burst=1)
    r = replicas(_short_lease(scheduler_config_text(), f"nosync-{env.namespace}"), client)
    cluster.wait_for(lambda: proxy.rules[-1].hits >= 2, timeout=20, what="the Pod LIST failing")
    assert r.get("/readyz")[0] == 503
    stopped = time.monotonic()
    r.app.stop_event.set()
    r.thread.join(10)
    assert not r.thread.is_alive(), "the daemon still waits for its caches after the stop"
    assert r.result == [0]
    assert time.monotonic() - stopped < 10
