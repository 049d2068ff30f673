"""DynamicResources' requeue rules: which DRA changes may help a pod it rejected.

Upstream's ``DynamicResources.EventsToRegister`` (v1.37.2): a node added, relabelled or with new
allocatable; a ResourceClaim added, changed or deleted (hint below); the pod's own generated
claims appearing in its status (here part of its spec signature, see ``model.PodResourceClaim``);
any DeviceClass or ResourceSlice added or changed (a DeviceTaintRule change arrives as a slice
update, as upstream's resourceslice tracker reports it).

The claim hint: a deleted or deallocated claim frees its devices for anyone, so it may help any
pod DynamicResources rejected; any other claim change matters to the pods in its namespace that
name it or own it (the resourceclaim controller's claim for a template, before the pod's status
names it).
"""

from __future__ import annotations

from typing import Any

from custom_scheduler.api.model import Pod
from custom_scheduler.framework.cluster_events import Action, ClusterEvent, ClusterEventWithHint, Hint, Resource


def after_claim_change(pod: Pod, old: Any, new: Any) -> Hint:
    if new is None or (old is not None and old.allocation is not None and new.allocation is None):
        return Hint.QUEUE  # deleted or deallocated: its devices are free
    if pod.namespace != new.namespace or not pod.resource_claims:
        return Hint.SKIP
    mine = pod.uid == new.owner_uid or any(rc.claim == new.name for rc in pod.resource_claims)
    return Hint.QUEUE if mine else Hint.SKIP


def claim_targets(old: Any, new: Any) -> frozenset[str] | None:
    """The pods a claim change can concern before any hint runs (upstream's preQueueingHint): a
    claim made from a pod's template concerns only that pod; a deleted or deallocated claim, or one
    that pods name directly, may concern any of them."""
    if new is None or (old is not None and old.allocation is not None and new.allocation is None):
        return None
    return frozenset({new.owner_uid}) if new.owner_kind == "Pod" and new.owner_uid else None


def registrations() -> list[ClusterEventWithHint]:
    add_or_update = Action.ADD | Action.UPDATE
    return [
        ClusterEventWithHint(
            ClusterEvent(Resource.NODE, Action.ADD | Action.UPDATE_NODE_LABEL | Action.UPDATE_NODE_ALLOCATABLE)
        ),
        ClusterEventWithHint(
            ClusterEvent(Resource.RESOURCE_CLAIM, Action.ADD | Action.UPDATE | Action.DELETE),
            after_claim_change,
            claim_targets,
        ),
        ClusterEventWithHint(ClusterEvent(Resource.TARGET_POD, Action.UPDATE_POD_GENERATED_RESOURCE_CLAIM)),
        ClusterEventWithHint(ClusterEvent(Resource.DEVICE_CLASS, add_or_update)),
        ClusterEventWithHint(ClusterEvent(Resource.RESOURCE_SLICE, add_or_update)),
    ]
