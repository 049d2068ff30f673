"""DynamicResourcesArgs ``filterTimeout`` against the real API server (resource.k8s.io/v1).

One node publishes 64 GPUs over two NUMA nodes and 4 NICs. The claim ``boom`` asks for five GPUs
and a NIC that share ``gpu.example.com/numa``, an attribute no NIC has (theirs is in the NIC
driver's domain): the API server accepts it, and an exhaustive search would try every same-NUMA
GPU combination, for hours, before proving it cannot fit. With ``filterTimeout: 300ms`` the pod
gets kube-scheduler's error for the node (``node <name>: timed out trying to allocate devices``)
as a FailedScheduling event and is retried later, while a pod asking for one GPU of the same node
schedules and gets its device.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from custom_scheduler.devenv import cluster
from custom_scheduler.kube import api_errors
from custom_scheduler.kube.client import KubeClient
from tests.builders import make_node, make_pod
from tests.integration.env import Env

API = "/apis/resource.k8s.io/v1"
GPU, NIC = "gpu.example.com", "nic.example.com"

CONFIG = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection: {leaderElect: false}
profiles:
- schedulerName: custom-scheduler
  pluginConfig:
  - name: DynamicResources
    args: {filterTimeout: 300ms}
"""


class Cluster:
    """The cluster-scoped DRA objects of one test (names carry the namespace), deleted after it."""

    def __init__(self, kube: KubeClient, namespace: str) -> None:
        self.kube = kube
        self.ns = namespace
        self.created: list[str] = []

    def post(self, resource: str, obj: dict[str, Any]) -> str:
        self.kube.post(f"{API}/{resource}", obj)
        path = f"{API}/{resource}/{obj['metadata']['name']}"
        self.created.append(path)
        return str(obj["metadata"]["name"])

    def device_class(self, name: str, driver: str) -> str:
        sel = [{"cel": {"expression": f'device.driver == "{driver}"'}}]
        return self.post("deviceclasses", {"metadata": {"name": f"{name}-{self.ns}"}, "spec": {"selectors": sel}})

    def slice(self, node: str, driver: str, devices: int) -> None:
        spec = {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": f"dev-{i}", "attributes": {"numa": {"int": i % 2}}} for i in range(devices)],
        }
        self.post("resourceslices", {"metadata": {"name": f"{node}-{driver.split('.', maxsplit=1)[0]}"}, "spec": spec})

    def cleanup(self) -> None:
        for path in self.created:
            with contextlib.suppress(api_errors.KubeError):
                self.kube.delete(path)


@pytest.fixture
def objects(kube: KubeClient, namespace: str) -> Iterator[Cluster]:
    c = Cluster(kube, namespace)
    yield c
    c.cleanup()


def claim_pod(name: str, *, claim: str = "", template: str = "") -> dict[str, Any]:
    obj = make_pod(name).obj()
    ref = {"resourceClaimName": claim} if claim else {"resourceClaimTemplateName": template}
    obj["spec"]["resourceClaims"] = [{"name": "devices", **ref}]
    obj["spec"]["containers"][0]["resources"] = {"claims": [{"name": "devices"}]}
    return obj


def test_filter_timeout_fails_the_exploding_pod_with_upstreams_reason_and_others_schedule(
    env: Env, objects: Cluster
) -> None:
    node = env.node(make_node("dra-timeout"))
    objects.slice(node, GPU, 64)
    objects.slice(node, NIC, 4)
    gpu, nic = objects.device_class("gpu", GPU), objects.device_class("nic", NIC)
    requests = [{"name": f"gpu{i}", "exactly": {"deviceClassName": gpu}} for i in range(5)]
    requests.append({"name": "nic", "exactly": {"deviceClassName": nic}})
    devices = {"requests": requests, "constraints": [{"matchAttribute": f"{GPU}/numa"}]}
    env.kube.post(
        f"{API}/namespaces/{env.namespace}/resourceclaims", {"metadata": {"name": "boom"}, "spec": {"devices": devices}}
    )
    one = {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": gpu}}]}}
    env.kube.post(
        f"{API}/namespaces/{env.namespace}/resourceclaimtemplates",
        {"metadata": {"name": "one-gpu"}, "spec": {"spec": one}},
    )
    env.start_scheduler(CONFIG)
    env.create_pod(claim_pod("boom", claim="boom"))
    env.create_pod(claim_pod("fine", template="one-gpu"))

    notes = env.wait_failed_scheduling("boom", timeout=60)
    assert any(f"node {node}: timed out trying to allocate devices" in n for n in notes), notes
    assert env.wait_bound("fine", timeout=60)["fine"] == node

    def fine_allocated() -> list[str] | None:
        for c in env.kube.get(f"{API}/namespaces/{env.namespace}/resourceclaims")["items"]:
            alloc = (c.get("status") or {}).get("allocation")
            if c["metadata"]["name"] != "boom" and alloc:
                return [r["device"] for r in alloc["devices"]["results"]]
        return None

    assert len(cluster.wait_for(fine_allocated, timeout=30, what="the fine pod's claim allocated")) == 1
    boom = env.kube.get(f"{API}/namespaces/{env.namespace}/resourceclaims/boom")
    assert not (boom.get("status") or {}).get("allocation")
    assert not env.node_of("boom")
