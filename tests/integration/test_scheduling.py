"""End to end on the real API server: the daemon binds pods, respects capacity, reports failures."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from custom_scheduler.api import quantity
from custom_scheduler.devenv import cluster
from custom_scheduler.kube.client import KubeClient, pod_path
from custom_scheduler.server.app import App
from tests.builders import NodeBuilder, make_node, make_pod

# Part of the integration smoke that CI also runs on the oldest supported Kubernetes.
pytestmark = pytest.mark.smoke


def _bound(kube: KubeClient, namespace: str) -> dict[str, str]:
    return {p["metadata"]["name"]: p["spec"].get("nodeName", "") for p in cluster.list_pods(kube, namespace)}


def _events(kube: KubeClient, namespace: str, reason: str) -> list[dict[str, Any]]:
    doc = kube.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")
    return [e for e in doc.get("items", []) if e.get("reason") == reason]


def test_burst_of_300_pods_fits_on_20_nodes_without_overcommit(
    kube: KubeClient,
    namespace: str,
    nodes: Callable[[NodeBuilder], dict[str, Any]],
    create_pod: Callable[[dict[str, Any]], dict[str, Any]],
    start_scheduler: Callable[..., App],
) -> None:
    """300 pods in one burst over 20 nodes: all bound, none over a node's pods/cpu/memory."""
    node_objs = [nodes(make_node(f"burst-{i}").capacity(cpu="4", memory="8Gi", pods="16")) for i in range(20)]
    app = start_scheduler()
    pods = [
        make_pod(f"p{i}").req(cpu=("200m" if i % 3 else "300m"), memory=("256Mi" if i % 2 else "512Mi")).obj()
        for i in range(300)
    ]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(create_pod, pods))

    bound = cluster.wait_for(
        lambda: (b := _bound(kube, namespace)) and all(b.values()) and b, timeout=60, what="300 pods bound"
    )
    assert len(bound) == 300
    alloc = {n["metadata"]["name"]: n["status"]["allocatable"] for n in node_objs}
    per_node: dict[str, list[dict[str, Any]]] = {}
    for p in cluster.list_pods(kube, namespace):
        per_node.setdefault(p["spec"]["nodeName"], []).append(p)
    for node, ps in per_node.items():
        assert node in alloc, f"pod bound to unknown node {node}"
        cpu = sum(quantity.to_milli(c["resources"]["requests"]["cpu"]) for p in ps for c in p["spec"]["containers"])
        mem = sum(quantity.to_int(c["resources"]["requests"]["memory"]) for p in ps for c in p["spec"]["containers"])
        assert len(ps) <= int(alloc[node]["pods"])
        assert cpu <= quantity.to_milli(alloc[node]["cpu"])
        assert mem <= quantity.to_int(alloc[node]["memory"])
    assert app.cache.check_invariants() == []


def test_pods_of_other_schedulers_are_not_touched(
    kube: KubeClient,
    namespace: str,
    nodes: Callable[[NodeBuilder], dict[str, Any]],
    create_pod: Callable[[dict[str, Any]], dict[str, Any]],
    start_scheduler: Callable[..., App],
) -> None:
    """A pod for another schedulerName stays pending and gets no event from us."""
    nodes(make_node("other"))
    start_scheduler()
    create_pod(make_pod("theirs").scheduler("default-scheduler").obj())
    create_pod(make_pod("ours").obj())
    cluster.wait_for(lambda: _bound(kube, namespace).get("ours"), timeout=30, what="our pod bound")
    app_writer_flushed = _bound(kube, namespace)
    assert app_writer_flushed["theirs"] == ""
    theirs = kube.get(pod_path(namespace, "theirs"))
    assert not [c for c in theirs.get("status", {}).get("conditions", []) if c["type"] == "PodScheduled"]
    assert all(e["regarding"]["name"] != "theirs" for e in _events(kube, namespace, "FailedScheduling"))


def test_unschedulable_pod_reports_reasons_then_binds_when_a_node_fits(
    kube: KubeClient,
    namespace: str,
    nodes: Callable[[NodeBuilder], dict[str, Any]],
    create_pod: Callable[[dict[str, Any]], dict[str, Any]],
    start_scheduler: Callable[..., App],
) -> None:
    """FailedScheduling event with kube-scheduler's aggregated message and PodScheduled=False;
    bound within seconds once a fitting node is added."""
    nodes(make_node("small-a").capacity(cpu="1", memory="2Gi", pods="10"))
    nodes(make_node("small-b").capacity(cpu="1", memory="2Gi", pods="10"))
    nodes(make_node("tainted").capacity(cpu="8", memory="16Gi", pods="10").taint("dedicated", "gpu"))
    app = start_scheduler()
    create_pod(make_pod("big").req(cpu="4", memory="1Gi").obj())

    def failed() -> list[dict[str, Any]]:
        return _events(kube, namespace, "FailedScheduling")

    ev = cluster.wait_for(failed, timeout=30, what="FailedScheduling event")[0]
    assert ev["type"] == "Warning"
    assert ev["reportingController"] == "custom-scheduler"
    assert ev["note"] == (
        # 4 cpu is more than the small nodes have at all: Unresolvable, so preemption skips them too.
        "0/3 nodes are available: 1 node(s) had untolerated taint(s), 2 Insufficient cpu. "
        "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
    )
    pod = cluster.wait_for(
        lambda: next(
            (
                c
                for c in kube.get(pod_path(namespace, "big"))["status"].get("conditions", [])
                if c["type"] == "PodScheduled" and c["status"] == "False"
            ),
            None,
        ),
        timeout=30,
        what="PodScheduled=False",
    )
    assert pod["reason"] == "Unschedulable"
    assert "2 Insufficient cpu" in pod["message"]

    big = nodes(make_node("big").capacity(cpu="8", memory="16Gi", pods="10"))["metadata"]["name"]
    cluster.wait_for(lambda: _bound(kube, namespace).get("big") == big, timeout=15, what="bound to the new node")
    scheduled = cluster.wait_for(lambda: _events(kube, namespace, "Scheduled"), timeout=15, what="Scheduled event")
    assert scheduled[0]["note"] == f"Successfully assigned {namespace}/big to {big}"
    assert app.cache.check_invariants() == []
