"""Pods from the real kube-controller-manager, as users' pods come: a Deployment scaled up and down,
a StatefulSet, an Indexed Job; and namespace deletion by the real namespace controller."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from custom_scheduler.devenv import cluster
from custom_scheduler.kube import api_errors
from custom_scheduler.kube.client import MERGE_PATCH_CT, KubeClient
from tests.builders import make_node
from tests.integration.env import Env

# Part of the integration smoke that CI also runs on the oldest supported Kubernetes.
pytestmark = pytest.mark.smoke


def _template(app: str, cpu: str = "100m") -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": app}},
        "spec": {
            "schedulerName": "custom-scheduler",
            "containers": [
                {"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": cpu}}}
            ],
        },
    }


def _live(kube: KubeClient, namespace: str, app: str) -> list[dict[str, Any]]:
    return [p for p in cluster.list_pods(kube, namespace, f"app={app}") if not p["metadata"].get("deletionTimestamp")]


def _scheduled_by_us(env: Env) -> set[str]:
    return {
        e["regarding"]["name"] for e in env.events("Scheduled") if e.get("reportingController") == "custom-scheduler"
    }


def _wait_scheduled_by_us(env: Env, want: set[str]) -> None:
    cluster.wait_for(
        lambda: _scheduled_by_us(env) >= want,
        timeout=15,
        what="a Scheduled event from custom-scheduler for every live pod",
    )


def _wait_all_bound(
    kube: KubeClient, namespace: str, app: str, count: int, timeout: float = 60
) -> list[dict[str, Any]]:
    def done() -> list[dict[str, Any]] | None:
        live = _live(kube, namespace, app)
        return live if len(live) == count and all(p["spec"].get("nodeName") for p in live) else None

    pods: list[dict[str, Any]] = cluster.wait_for(done, timeout=timeout, what=f"{count} live {app} pods, all bound")
    return pods


def test_deployment_scaled_12_30_5_has_every_live_pod_bound_by_us(env: Env) -> None:
    names = {env.node(make_node(f"deploy-{i}").capacity(cpu="4", memory="8Gi", pods="20")) for i in range(4)}
    app = env.start_scheduler()
    deploy = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {"replicas": 12, "selector": {"matchLabels": {"app": "web"}}, "template": _template("web")},
    }
    path = f"/apis/apps/v1/namespaces/{env.namespace}/deployments"
    env.kube.post(path, deploy)
    for replicas in (12, 30, 5):
        if replicas != 12:
            env.kube.patch(f"{path}/web", {"spec": {"replicas": replicas}}, MERGE_PATCH_CT)
        live = _wait_all_bound(env.kube, env.namespace, "web", replicas)
        assert {p["spec"]["nodeName"] for p in live} <= names
        assert all(p["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet" for p in live)
        want = {p["metadata"]["name"] for p in live}
        _wait_scheduled_by_us(env, want)
    assert app.cache.check_invariants() == []


def test_statefulset_and_indexed_job_pods_are_bound(env: Env) -> None:
    for i in range(2):
        env.nodes(make_node(f"ctl-{i}").capacity(cpu="4", memory="8Gi", pods="20"))
    env.start_scheduler()
    env.kube.post(
        f"/apis/apps/v1/namespaces/{env.namespace}/statefulsets",
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": "db"},
            "spec": {
                "replicas": 3,
                "podManagementPolicy": "Parallel",  # no kubelet makes pods Ready for OrderedReady
                "serviceName": "db",
                "selector": {"matchLabels": {"app": "db"}},
                "template": _template("db"),
            },
        },
    )
    job_template = _template("train")
    job_template["spec"]["restartPolicy"] = "Never"
    env.kube.post(
        f"/apis/batch/v1/namespaces/{env.namespace}/jobs",
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "train"},
            "spec": {"completions": 4, "parallelism": 4, "completionMode": "Indexed", "template": job_template},
        },
    )
    db = _wait_all_bound(env.kube, env.namespace, "db", 3)
    assert sorted(p["metadata"]["name"] for p in db) == ["db-0", "db-1", "db-2"]
    train = _wait_all_bound(env.kube, env.namespace, "train", 4)
    indexes = sorted(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] for p in train)
    assert indexes == ["0", "1", "2", "3"]


def test_namespace_deletion_removes_bound_pods(env: Env) -> None:
    """The namespace controller deletes a namespace's pods; kwok finishes the bound ones' graceful
    deletes (nothing else does: ``finish_pods=False``), and the namespace goes."""
    env.nodes(make_node("nsdel").capacity(cpu="4", memory="8Gi", pods="20"))
    env.start_scheduler()
    ns = f"t-nsdel-{uuid.uuid4().hex[:8]}"
    cluster.create_namespace(env.kube, ns)
    env.kube.post(
        f"/apis/apps/v1/namespaces/{ns}/deployments",
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web"},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}, "template": _template("web")},
        },
    )
    _wait_all_bound(env.kube, ns, "web", 3)
    cluster.delete_namespace(env.kube, ns, finish_pods=False, wait=60)
    with pytest.raises(api_errors.NotFound):
        env.kube.get(f"/api/v1/namespaces/{ns}")
