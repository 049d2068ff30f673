"""Extended resources backed by DRA against the real API server (DRAExtendedResource, GA in 1.37).

A DeviceClass names ``extendedResourceName``; the node publishes GPUs only as a ResourceSlice
(nothing in its allocatable). A pod asking ``<resource>: 2`` is bound: the scheduler created the
pod's claim (owned by the pod, annotated), allocated two devices to it and reserved it for the
pod, and recorded the mapping in ``status.extendedResourceClaimStatus``; the next pod asking for
two of the three GPUs stays pending with DynamicResources' reason, one asking for one gets the
third. No device is ever held twice.
"""

from __future__ import annotations

from typing import Any

from custom_scheduler.devenv import cluster
from tests.builders import make_node
from tests.integration.dra_objects import DRAObjects, dra_objects, extended_pod, held_twice, results
from tests.integration.env import Env

__all__ = ["dra_objects"]

ANNOTATION = "resource.kubernetes.io/extended-resource-claim"


def _claim_of(dra: DRAObjects, pod: dict[str, Any]) -> dict[str, Any] | None:
    """The claim the scheduler made for ``pod`` (annotated, controlled by it), or None."""
    uid = pod["metadata"]["uid"]
    for c in dra.claims():
        meta = c["metadata"]
        owners = [o for o in meta.get("ownerReferences") or () if o.get("controller") and o.get("uid") == uid]
        if owners and (meta.get("annotations") or {}).get(ANNOTATION) == "true":
            return c
    return None


def test_a_pod_asking_for_an_extended_resource_gets_devices_through_its_claim(
    env: Env, dra_objects: DRAObjects
) -> None:
    resource = f"example.com/gpu-{env.namespace}"[:63]
    node = env.node(make_node("dra-only").capacity(cpu="8", memory="16Gi", pods="20"))
    dra_objects.gpus(node, 3)
    cls = dra_objects.device_class("ext", extended=resource)
    env.start_scheduler()

    env.create_pod(extended_pod("two", resource, 2))
    assert env.wait_bound("two", timeout=60)["two"] == node
    pod = env.pod("two")
    claim = cluster.wait_for(lambda: _claim_of(dra_objects, pod), what="the pod's extended-resource claim")
    meta = claim["metadata"]
    assert meta["name"].startswith("two-extended-resources-")
    assert [o["kind"] for o in meta["ownerReferences"]] == ["Pod"]
    got = results(claim)
    assert len(got) == 2
    assert {r["pool"] for r in got} == {node}
    assert {r["request"] for r in got} == {"container-0-request-1"}
    assert claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == cls
    assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": "two", "uid": pod["metadata"]["uid"]}]
    status = pod["status"].get("extendedResourceClaimStatus")
    assert status == {
        "resourceClaimName": meta["name"],
        "requestMappings": [{"containerName": "c0", "resourceName": resource, "requestName": "container-0-request-1"}],
    }

    env.create_pod(extended_pod("again", resource, 2))
    notes = env.wait_failed_scheduling("again", timeout=60)
    assert any("cannot allocate all claims" in n for n in notes), notes
    env.create_pod(extended_pod("one", resource, 1))
    env.wait_bound("one", timeout=60)
    one = cluster.wait_for(lambda: _claim_of(dra_objects, env.pod("one")), what="the second claim")
    assert len(results(one)) == 1
    assert held_twice(dra_objects.claims()) == []
    assert env.node_of("again") == ""
    assert _claim_of(dra_objects, env.pod("again")) is None, "no claim left for the pod that did not fit"
