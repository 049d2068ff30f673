"""Fixtures that run the scheduler daemon in-process against the session's real API server."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from custom_scheduler import config
from custom_scheduler.devenv import cluster
from custom_scheduler.devenv.controlplane import ControlPlane
from custom_scheduler.kube import api_errors
from custom_scheduler.kube.client import KubeClient
from custom_scheduler.plugins.builtin import full_registry
from custom_scheduler.server.app import App
from tests import kubectl as k
from tests.builders import NodeBuilder
from tests.faultproxy import FaultProxy
from tests.integration.env import Env

MINIMAL_CONFIG = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection: {leaderElect: false}
profiles:
- schedulerName: custom-scheduler
"""

#: GangScheduling on (upstream enables it only with the GenericWorkload gate, so not by default).
GANG_CONFIG = (
    MINIMAL_CONFIG
    + """  plugins:
    multiPoint:
      enabled: [{name: GangScheduling}]
"""
)


@pytest.fixture
def start_scheduler(control_plane: ControlPlane) -> Iterator[Callable[..., App]]:
    """Start an :class:`App` (informers synced, scheduling) with a config; stopped after the test."""
    apps: list[App] = []

    def start(config_text: str = MINIMAL_CONFIG, *, client: KubeClient | None = None, **kw: Any) -> App:
        cfg = config.load_config(config_text, full_registry())
        kube = client or KubeClient.from_kubeconfig(str(control_plane.kubeconfig()), qps=0, burst=1)
        app = App(cfg, full_registry(), kube, **kw)
        apps.append(app)
        app.start(sync_timeout=30)
        return app

    yield start
    for app in apps:
        app.stop()


@pytest.fixture
def env(
    control_plane: ControlPlane,
    kube: KubeClient,
    namespace: str,
    nodes: Callable[[NodeBuilder], dict[str, Any]],
    create_pod: Callable[[dict[str, Any]], dict[str, Any]],
    start_scheduler: Callable[..., App],
) -> Env:
    """The fixtures most tests take, bundled with their shared helpers (see :mod:`tests.integration.env`)."""
    return Env(control_plane, kube, namespace, nodes, create_pod, start_scheduler)


@pytest.fixture
def proxy(control_plane: ControlPlane) -> Iterator[FaultProxy]:
    """A fault-injecting proxy in front of the session's API server."""
    p = FaultProxy(control_plane).start()
    yield p
    p.stop()


@pytest.fixture
def proxied(proxy: FaultProxy, start_scheduler: Callable[..., App], tmp_path: Path) -> Callable[..., App]:
    """Start the daemon behind the fault proxy, with a short watch read timeout."""

    def start(**kw: Any) -> App:
        client = KubeClient.from_kubeconfig(proxy.kubeconfig(tmp_path), qps=0, burst=1)
        return start_scheduler(client=client, watch_read_timeout=3.0, **kw)

    return start


PODGROUP_CRD = "podgroups.scheduling.x-k8s.io"


@pytest.fixture
def crd(kube: KubeClient) -> Iterator[Callable[[], None]]:
    """Install manifests/optional's scheduler-plugins PodGroup CRD on demand (for real), and
    remove it afterwards (the next test starts without it)."""
    path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{PODGROUP_CRD}"
    installed: list[bool] = []

    def install() -> None:
        (doc,) = k.load_docs(k.manifest("optional/podgroups.scheduling.x-k8s.io.yaml").read_text())
        kube.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", doc)
        installed.append(True)

        def established() -> bool:
            got = kube.get(path)
            conds = got.get("status", {}).get("conditions") or []
            return any(c["type"] == "Established" and c["status"] == "True" for c in conds)

        cluster.wait_for(established, timeout=30, what="the CRD to be established")

    yield install
    with contextlib.suppress(api_errors.NotFound):
        kube.delete(path)

    def gone() -> bool:
        try:
            kube.get(path)
        except api_errors.NotFound:
            return True
        return False

    # Removing a CRD deletes its objects first.
    cluster.wait_for(gone, timeout=60, what="the CRD to be removed")


@pytest.fixture
def metrics_reader_token(kube: KubeClient, namespace: str) -> Iterator[str]:
    """A token (TokenRequest) for the ServiceAccount ``<namespace>/prometheus``, bound to the
    manifests' metrics-reader ClusterRole (``/metrics`` only) as the README tells a Prometheus
    operator to do."""
    kube.post(
        f"/api/v1/namespaces/{namespace}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "prometheus"}},
    )
    request = kube.post(
        f"/api/v1/namespaces/{namespace}/serviceaccounts/prometheus/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 600}},
    )
    binding = f"metrics-reader-{namespace}"
    kube.post(
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": binding},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "custom-scheduler-metrics-reader",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": namespace}],
        },
    )
    try:
        yield str(request["status"]["token"])
    finally:
        with contextlib.suppress(api_errors.NotFound):
            kube.delete(f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{binding}")


@pytest.fixture
def priority_class(kube: KubeClient) -> Iterator[Callable[..., str]]:
    """``priority_class(value, never=False)`` creates a PriorityClass with a unique name (with
    ``preemptionPolicy: Never`` when ``never``) and returns the name; all are deleted afterwards."""
    created: list[str] = []
    suffix = uuid.uuid4().hex[:6]

    def make(value: int, *, never: bool = False) -> str:
        name = f"pc-{suffix}-{value}{'-never' if never else ''}"
        body: dict[str, Any] = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
        }
        if never:
            body["preemptionPolicy"] = "Never"
        cluster.create_priority_class(kube, body)
        created.append(name)
        return name

    yield make
    for name in created:
        with contextlib.suppress(api_errors.KubeError):
            kube.delete(f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}")
