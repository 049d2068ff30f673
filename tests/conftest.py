"""Shared fixtures: one real kube-apiserver + etcd per test session, a namespace per test.

The control plane starts lazily, only when a test asks for it, so unit-test runs stay fast. It is
never replaced by a mock: if the binaries cannot be provisioned the tests that need them fail
with the provisioning error (set ``CS_SKIP_INTEGRATION=1`` to skip them explicitly on a machine
that cannot run them; CI never sets it).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from custom_scheduler.devenv import cluster
from custom_scheduler.devenv.controlplane import ControlPlane, find_binaries
from custom_scheduler.kube import api_errors
from custom_scheduler.kube.client import KubeClient, pod_path
from tests.builders import NodeBuilder


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "integration" in item.nodeid.split("/"):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    if os.environ.get("CS_SKIP_INTEGRATION") == "1":
        pytest.skip("CS_SKIP_INTEGRATION=1: integration tests explicitly disabled")
    cp = ControlPlane(find_binaries()).start()
    try:
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="session")
def kube(control_plane: ControlPlane) -> KubeClient:
    """An admin client (``system:masters``) with client-side limits lifted."""
    return KubeClient.from_kubeconfig(str(control_plane.kubeconfig()), qps=0, burst=1)


@pytest.fixture
def namespace(kube: KubeClient) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:10]}"
    cluster.create_namespace(kube, name)
    yield name
    # The namespace controller deletes its objects; its pods go at once (see delete_namespace).
    cluster.delete_namespace(kube, name)


@pytest.fixture
def nodes(kube: KubeClient) -> Iterator[Callable[[NodeBuilder], dict[str, Any]]]:
    """Create Ready, untainted (unless the builder adds taints) Nodes; delete them afterwards.

    Node names get a unique suffix so parallel or leftover state never collides.
    """
    created: list[str] = []
    suffix = uuid.uuid4().hex[:6]

    def make(builder: NodeBuilder) -> dict[str, Any]:
        obj = builder.obj()
        obj["metadata"]["name"] = f"{obj['metadata']['name']}-{suffix}"
        obj["metadata"]["labels"]["kubernetes.io/hostname"] = obj["metadata"]["name"]
        node = cluster.create_ready_node(kube, obj)
        created.append(node["metadata"]["name"])
        return node

    yield make
    for name in created:
        with contextlib.suppress(api_errors.KubeError):
            kube.delete(f"/api/v1/nodes/{name}")


@pytest.fixture
def create_pod(kube: KubeClient, namespace: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def make(obj: dict[str, Any]) -> dict[str, Any]:
        obj["metadata"]["namespace"] = namespace
        created: dict[str, Any] = kube.post(pod_path(namespace), obj)
        return created

    return make
