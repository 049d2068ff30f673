"""The test control plane is a real API server: Nodes, Pods and the pods/binding subresource."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from custom_scheduler.devenv import cluster
from custom_scheduler.devenv.controlplane import ControlPlane
from custom_scheduler.kube import api_errors
from custom_scheduler.kube.client import KubeClient, node_path
from tests.builders import NodeBuilder, make_node, make_pod
from tests.integration.env import Env


def test_server_reports_version(control_plane: ControlPlane) -> None:
    """The fixture exposes the server version so tests of newer fields can skip only on old servers."""
    assert control_plane.version.startswith("1.")
    assert control_plane.minor_version >= 20


def test_ready_node_has_no_not_ready_taint(kube: KubeClient, nodes: Callable[[NodeBuilder], dict[str, Any]]) -> None:
    """TaintNodesByCondition adds not-ready:NoSchedule; the helper lifts it and keeps ours."""
    n = nodes(make_node("ready").capacity(cpu="2", memory="4Gi", pods="10").taint("dedicated", "gpu"))
    got = kube.get(node_path(n["metadata"]["name"]))
    taints = [(t["key"], t.get("value", ""), t["effect"]) for t in got["spec"].get("taints", [])]
    assert taints == [("dedicated", "gpu", "NoSchedule")]
    conds = {c["type"]: c["status"] for c in got["status"]["conditions"]}
    assert conds["Ready"] == "True"
    assert got["status"]["allocatable"]["cpu"] == "2"


def test_bind_sets_node_name_and_second_bind_conflicts(env: Env) -> None:
    """POST pods/binding assigns the pod; a second binding is refused with 409 Conflict."""
    n1 = env.node(make_node("bind-a"))
    n2 = env.node(make_node("bind-b"))
    pod = env.create_pod(make_pod("p").req(cpu="100m").obj())
    uid = pod["metadata"]["uid"]

    cluster.bind(env.kube, env.namespace, "p", n1, uid=uid)
    got = env.pod("p")
    assert got["spec"]["nodeName"] == n1
    assert any(c["type"] == "PodScheduled" and c["status"] == "True" for c in got["status"]["conditions"])

    with pytest.raises(api_errors.Conflict) as exc:
        cluster.bind(env.kube, env.namespace, "p", n2, uid=uid)
    assert exc.value.status == 409
    assert env.pod("p")["spec"]["nodeName"] == n1


def test_rbac_is_enforced(control_plane: ControlPlane) -> None:
    """RBAC is on: an identity without bindings cannot list pods."""
    nobody = KubeClient.from_kubeconfig(str(control_plane.kubeconfig("nobody")), qps=0, burst=1)
    with pytest.raises(api_errors.ApiError) as exc:
        nobody.get("/api/v1/pods")
    assert exc.value.status == 403
