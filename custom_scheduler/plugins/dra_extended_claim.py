"""DynamicResources' claim for extended resources backed by DRA (``extendeddynamicresources.go``).

A pod asking for ``example.com/gpu: 2`` where a DeviceClass backs ``example.com/gpu`` gets, in
PreFilter, an in-memory claim ``<extended-resources>`` (owned by the pod, annotated
``resource.kubernetes.io/extended-resource-claim: "true"``, no requests yet) beside its own
claims, or the claim an earlier attempt created for it. Filter gives it requests for each node
(:func:`for_node`): on a node whose allocatable lacks the resource, one ``exactly`` request per
container for the devices it asks for (:func:`custom_scheduler.api.dra_extended.requests_and_mappings`);
a node offering the resource itself (a device plugin) needs no devices. PreBind creates the claim
(``generateName: <pod>-extended-resources-``), writes its allocation and reservation as for any
claim, and patches the pod's ``status.extendedResourceClaimStatus`` with the request mappings;
Unreserve and PostFilter delete a claim so created (its finalizer removed first).

A claim left from an earlier attempt is never reused: Filter answers ``cannot schedule extended
resource claim`` on every node and PostFilter deletes it (``deletion of ResourceClaim
completed``), so the next attempt starts afresh, as upstream.
"""

from __future__ import annotations

import copy
import dataclasses
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from custom_scheduler.api import dra, dra_extended
from custom_scheduler.api.model import Pod
from custom_scheduler.framework.clusterapi import ClusterClient
from custom_scheduler.framework.clusterapi import api_errors as kerr
from custom_scheduler.framework.dra_store import DRAStore
from custom_scheduler.framework.types import Status

REASON_EXISTING = "cannot schedule extended resource claim"
REASON_CANNOT_FIT = "cannot fit resource"
DELETED = "deletion of ResourceClaim completed"

#: client-go's DefaultRetry attempts for the finalizer's removal on a conflict.
CONFLICT_RETRIES = 5


@dataclasses.dataclass(frozen=True, slots=True)
class NodeClaim:
    """The pod's extended-resource claim with the requests one node needs, and the mappings."""

    claim: dra.ResourceClaim
    mappings: tuple[dra_extended.RequestMapping, ...]
    requests: tuple[dra_extended.ExtRequest, ...]


def backed_resources(pod: Pod, store: DRAStore) -> dict[str, int]:
    """The pod's extended resource requests (non-zero), when a DeviceClass backs at least one of
    them (``hasDeviceClassMappedExtendedResource``); else empty: the pod has no such claim."""
    if not pod.extended_containers:
        return {}
    wanted = {n: q for n, q in pod.requests.scalar.items() if q and dra_extended.is_extended_resource_name(n)}
    if not any(store.extended_resource_class(n) is not None for n in wanted):
        return {}
    return wanted


def special_claim(pod: Pod) -> dra.ResourceClaim:
    """The in-memory claim PreFilter adds for the pod (a fresh UID each attempt: its pending
    allocation is keyed by it)."""
    raw: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "namespace": pod.namespace,
            "name": dra_extended.SPECIAL_CLAIM_NAME,
            "uid": str(uuid.uuid4()),
            "generateName": f"{pod.name}-extended-resources-",
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": pod.name, "uid": pod.uid, "controller": True}
            ],
            "annotations": {dra_extended.CLAIM_ANNOTATION: "true"},
        },
        "spec": {},
    }
    return dra.resource_claim_from_json(raw)


def is_special(claim: dra.ResourceClaim) -> bool:
    return claim.name == dra_extended.SPECIAL_CLAIM_NAME


def for_node(
    claim: dra.ResourceClaim,
    wanted: Mapping[str, int],
    allocatable: Mapping[str, int],
    class_of: Callable[[str], str | None],
    pod: Pod,
) -> tuple[Status | None, NodeClaim | None]:
    """``filterExtendedResources``: a rejection for this node, or the claim with this node's
    requests (None: the node serves none of them from devices, or the claim is allocated)."""
    if claim.requests:
        return Status.unschedulable(REASON_EXISTING), None
    on_devices = {}
    for name, qty in wanted.items():
        have = allocatable.get(name)
        if class_of(name) is not None and not have:
            on_devices[name] = qty
        elif have is None:
            return Status.unschedulable(REASON_CANNOT_FIT), None
    if not on_devices or claim.allocation is not None:
        return None, None
    reqs, maps = dra_extended.requests_and_mappings(pod.extended_containers, on_devices, class_of)
    spec = {"devices": {"requests": [r.to_json() for r in reqs]}}
    with_requests = dra.resource_claim_from_json({**claim.raw, "spec": spec})
    return None, NodeClaim(dataclasses.replace(with_requests, uid=claim.uid), tuple(maps), tuple(reqs))


def without_requests(claim: dra.ResourceClaim) -> dra.ResourceClaim:
    """The claim with nothing to allocate (a node that needs no devices for it)."""
    return dataclasses.replace(claim, requests=())


def create(client: ClusterClient, node_claim: NodeClaim) -> dra.ResourceClaim:
    """``createExtendedResourceClaimInAPI``: the claim as the API server created it."""
    raw = copy.deepcopy(node_claim.claim.raw)
    meta = raw["metadata"]
    for k in ("name", "uid", "resourceVersion"):
        meta.pop(k, None)
    raw.pop("status", None)
    path = f"{dra.API}/namespaces/{meta['namespace']}/resourceclaims"
    try:
        return dra.resource_claim_from_json(client.post(path, raw))
    except Exception as e:
        raise RuntimeError(
            f"create claim for extended resources {meta['namespace']}/{meta['generateName']}: {e}"
        ) from e


def patch_pod_status(client: ClusterClient, pod: Pod, claim_name: str, node_claim: NodeClaim) -> None:
    """``patchPodExtendedResourceClaimStatus``: which container's resource maps to which request."""
    if not node_claim.mappings:
        raise RuntimeError(
            f"nil or empty request mappings, no update of pod {pod.namespace}/{pod.name} ExtendedResourceClaimStatus"
        )
    body = {
        "status": {
            "extendedResourceClaimStatus": {
                "requestMappings": [m.to_json() for m in node_claim.mappings],
                "resourceClaimName": claim_name,
            }
        }
    }
    try:
        client.patch(f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status", body)
    except Exception as e:
        raise RuntimeError(f"update pod {pod.namespace}/{pod.name} ExtendedResourceClaimStatus: {e}") from e


def delete(client: ClusterClient, claim: dra.ResourceClaim, store: DRAStore) -> None:
    """``deleteClaim``: drop the allocation finalizer (re-reading on a conflict), then delete; a
    claim already gone is fine."""
    path = f"{dra.API}/namespaces/{claim.namespace}/resourceclaims/{claim.name}"
    raw = copy.deepcopy(claim.raw)
    for attempt in range(CONFLICT_RETRIES):
        meta = raw.setdefault("metadata", {})
        meta["finalizers"] = [f for f in meta.get("finalizers") or () if f != dra.FINALIZER]
        try:
            client.put(path, raw)
            break
        except kerr.NotFound:
            store.forget_claim(claim.key)
            return
        except kerr.Conflict:
            if attempt == CONFLICT_RETRIES - 1:
                raise
            raw = client.get(path)
    try:
        client.delete(path)
    except kerr.NotFound:
        pass
    store.forget_claim(claim.key)
