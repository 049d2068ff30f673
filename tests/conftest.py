"""Shared fixtures: one real kube-apiserver + etcd per test session, one kwok beside it, a
namespace per test.

The control plane and kwok start lazily, only when a test asks for them, so unit-test runs stay
fast. They are never replaced by a mock: if the binaries cannot be provisioned the tests that need
them fail with the provisioning error (set ``CS_SKIP_INTEGRATION=1`` to skip them explicitly on a
machine that cannot run them; CI never sets it).

Why kwok for the whole session: the ``nodes`` fixture's Nodes are kwok's (they heartbeat, their
pods go Running and Ready, graceful deletions finish), so the control plane runs the node-lifecycle
controller as a real cluster does (NotReady Nodes are tainted, their pods evicted). One kwok only:
two managing the same annotation would fight over the same Nodes and pods.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from custom_scheduler.devenv import cluster, kwok
from custom_scheduler.devenv.controlplane import ControlPlane, find_binaries
from custom_scheduler.kube.client import KubeClient, pod_path
from tests.builders import NodeBuilder

#: kwok's Node leases in the session: renewed every 3 s (a quarter), so a test sees a renewal within
#: its deadline; the node-lifecycle controller's grace (50 s) holds four of them.
LEASE_SECONDS = 12


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "integration" in item.nodeid.split("/"):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    if os.environ.get("CS_SKIP_INTEGRATION") == "1":
        pytest.skip("CS_SKIP_INTEGRATION=1: integration tests explicitly disabled")
    cp = ControlPlane(find_binaries(), node_lifecycle=True).start()
    try:
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="session")
def kwok_proc(control_plane: ControlPlane) -> Iterator[kwok.Kwok]:
    """kwok against the session's control plane (built first if not cached): the kubelet of every
    Node the ``nodes`` fixture or :func:`kwok.create_node` makes. It runs with 8 workers per kind
    (a KwokConfiguration file, ``Kwok.parallelism``), which also proves kwok takes that file."""
    k = kwok.Kwok.for_control_plane(control_plane, node_lease_duration_seconds=LEASE_SECONDS, parallelism=8).start()
    try:
        yield k
    finally:
        k.stop()


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
def nodes(kube: KubeClient, kwok_proc: kwok.Kwok) -> Iterator[Callable[[NodeBuilder], dict[str, Any]]]:
    """Create kwok-run Nodes (Ready by kwok's report, heartbeating, untainted unless the builder
    adds taints); delete them afterwards. Returns the Node once it is Ready and free of the
    not-ready taint, so a pod created next can be placed there.

    Node names get a unique suffix so parallel or leftover state never collides. A test whose Node
    must not be touched by a kubelet (its conditions or pods' status written by the test) uses
    :func:`custom_scheduler.devenv.cluster.create_ready_node` instead.
    """
    created: list[str] = []
    suffix = uuid.uuid4().hex[:6]

    def make(builder: NodeBuilder) -> dict[str, Any]:
        obj = builder.obj()
        obj["metadata"]["name"] = f"{obj['metadata']['name']}-{suffix}"
        obj["metadata"]["labels"]["kubernetes.io/hostname"] = obj["metadata"]["name"]
        created.append(obj["metadata"]["name"])
        try:
            return kwok.create_node(kube, obj)
        except TimeoutError as e:
            raise AssertionError(f"{e}\nkwok log:\n{kwok_proc.log_tail()}") from e

    yield make
    for name in created:
        kwok.delete_node(kube, name)


@pytest.fixture
def create_pod(kube: KubeClient, namespace: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def make(obj: dict[str, Any]) -> dict[str, Any]:
        obj["metadata"]["namespace"] = namespace
        created: dict[str, Any] = kube.post(pod_path(namespace), obj)
        return created

    return make
