"""PodFinisher on the real API server: the e2e run's replacement for kwok's pod-delete stage
finishes a graceful deletion, keeps a preStop pod for its grace period, and its final delete can
never remove a newer pod that took the old one's name (the UID precondition answers 409)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from custom_scheduler.devenv import cluster
from custom_scheduler.devenv.pod_finisher import PodFinisher, final_delete_body
from custom_scheduler.kube import api_errors
from custom_scheduler.kube.client import KubeClient, pod_path
from tests.builders import make_node, make_pod


@pytest.fixture
def node(kube: KubeClient) -> Iterator[str]:
    """A Ready Node no kubelet runs: a graceful delete there stays Terminating until finished."""
    name = f"finisher-{uuid.uuid4().hex[:6]}"
    cluster.create_ready_node(kube, make_node(name).capacity(cpu="4", memory="8Gi", pods="110").obj())
    yield name
    cluster.delete_nodes(kube, [name])


def _get(kube: KubeClient, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        pod: dict[str, Any] = kube.get(pod_path(namespace, name))
        return pod
    except api_errors.NotFound:
        return None


def test_a_late_final_delete_never_removes_the_new_pod_of_the_same_name(
    kube: KubeClient, namespace: str, node: str, create_pod: Callable[[dict[str, Any]], dict[str, Any]]
) -> None:
    create_pod(make_pod("without-label").node(node).obj())
    kube.delete(pod_path(namespace, "without-label"), {"gracePeriodSeconds": 30})
    old = _get(kube, namespace, "without-label")
    assert old is not None
    assert old["metadata"].get("deletionTimestamp"), "no kubelet here: the pod stays Terminating"

    finisher = PodFinisher(kube, namespace=namespace)
    assert finisher.sweep() == 1
    assert _get(kube, namespace, "without-label") is None

    new = create_pod(make_pod("without-label").node(node).obj())
    # kwok's late second delete, replayed the kubelet's way: the old instance's UID no longer matches.
    with pytest.raises(api_errors.Conflict):
        kube.delete(pod_path(namespace, "without-label"), final_delete_body(old))
    survivor = _get(kube, namespace, "without-label")
    assert survivor is not None
    assert survivor["metadata"]["uid"] == new["metadata"]["uid"]
    assert finisher.sweep() == 0


def test_a_pre_stop_pod_stays_terminating_for_its_grace_period(
    kube: KubeClient, namespace: str, node: str, create_pod: Callable[[dict[str, Any]], dict[str, Any]]
) -> None:
    obj = make_pod("hooked").node(node).obj()
    obj["spec"]["containers"][0]["lifecycle"] = {"preStop": {"exec": {"command": ["sleep", "79"]}}}
    create_pod(obj)
    kube.delete(pod_path(namespace, "hooked"), {"gracePeriodSeconds": 3})
    finisher = PodFinisher(kube, namespace=namespace, interval=0.1).start()
    try:
        assert finisher.sweep() == 0
        assert _get(kube, namespace, "hooked") is not None
        cluster.wait_for(
            lambda: _get(kube, namespace, "hooked") is None, timeout=20, interval=0.1, what="hooked pod finished"
        )
    finally:
        finisher.stop()
    assert finisher.finished == 1
