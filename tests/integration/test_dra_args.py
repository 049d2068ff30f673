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

from typing import Any

from custom_scheduler.devenv import cluster
from tests.builders import make_node
from tests.integration.dra_objects import DRAObjects, claim_pod, dra_objects
from tests.integration.env import Env

__all__ = ["dra_objects"]

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


def numa_devices(n: int) -> list[dict[str, Any]]:
    """``n`` devices ``dev-i`` alternating between NUMA nodes 0 and 1 (attribute ``numa``)."""
    return [{"name": f"dev-{i}", "attributes": {"numa": {"int": i % 2}}} for i in range(n)]


def test_filter_timeout_fails_the_exploding_pod_with_upstreams_reason_and_others_schedule(
    env: Env, dra_objects: DRAObjects
) -> None:
    node = env.node(make_node("dra-timeout"))
    dra_objects.slice(node, "gpu", driver=GPU, devices=numa_devices(64))
    dra_objects.slice(node, "nic", driver=NIC, devices=numa_devices(4))
    gpu, nic = dra_objects.device_class("gpu", driver=GPU), dra_objects.device_class("nic", driver=NIC)
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
