"""PodTopologySpread's system default constraints: pods selected by the same Service /
ReplicaSet are spread, as kube-scheduler spreads a Deployment's replicas by default."""

from __future__ import annotations

from collections import Counter
from typing import Any

from custom_scheduler.devenv import cluster
from tests.builders import make_node, make_pod
from tests.integration.env import Env


def _service(namespace: str, name: str, selector: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": selector, "ports": [{"port": 80}]},
    }


def _replicaset(namespace: str, name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}]},
            },
        },
    }


def test_selectors_of_services_and_replicasets_select_the_pod(env: Env) -> None:
    env.kube.post(f"/api/v1/namespaces/{env.namespace}/services", _service(env.namespace, "web", {"app": "web"}))
    env.kube.post(
        f"/apis/apps/v1/namespaces/{env.namespace}/replicasets",
        _replicaset(env.namespace, "web-1", {"app": "web", "v": "1"}),
    )
    app = env.start_scheduler()
    pod = make_pod("w", env.namespace).labels(app="web", v="1").build()
    other = make_pod("o", env.namespace).labels(app="db").build()
    sel = cluster.wait_for(lambda: app.selectors.for_pod(pod), timeout=10, what="selectors synced")
    assert sel.matches({"app": "web", "v": "1"})
    assert not sel.matches({"app": "web", "v": "2"})  # the ReplicaSet's requirement is part of it
    assert app.selectors.for_pod(other) is None


def test_replicas_of_a_service_spread_over_nodes_against_least_allocated(env: Env) -> None:
    """LeastAllocated alone would put every replica on the much bigger node; the default
    hostname constraint (maxSkew 3, weight 2) moves some to the small one."""
    big = env.node(make_node("big").capacity(cpu="64", memory="128Gi", pods="110"))
    small = env.node(make_node("small").capacity(cpu="8", memory="16Gi", pods="110"))
    env.kube.post(f"/api/v1/namespaces/{env.namespace}/services", _service(env.namespace, "web", {"app": "web"}))
    env.start_scheduler()
    names = [f"web-{i}" for i in range(8)]
    for n in names:  # one at a time, so each decision sees the previous ones
        env.create_pod(make_pod(n).label("app", "web").req(cpu="500m", memory="512Mi").obj())
        env.wait_bound(n, timeout=20)
    placed = Counter(env.placements().values())
    # Measured: 4/4 with the Service; 7 big / 1 small without it (LeastAllocated alone).
    assert placed[small] >= 3, placed
    assert placed[big] >= 3, placed
