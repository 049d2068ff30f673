"""NodeResourcesFit's requeue rules: which changes may free room for a pod it rejected.

Upstream's ``Fit.EventsToRegister`` and its hints (noderesources/fit.go at v1.37.2), in their own
module so the plugin's module stays about filtering and scoring:

- an assigned pod deleted (room freed): QUEUE when the deleted pod was bound or nominated;
- a node added, or its allocatable changed: QUEUE when the pod's requests fit the node's
  allocatable at all and (on an update) a resource the pod requests grew;
- an assigned pod scaled down (an in-place resize counted once actuated): QUEUE when it lowered a
  resource the rejected pod requests; the rejected pod itself scaled down: QUEUE;
- a DeviceClass added or changed whose extended resource name the pod requests (extended
  resources backed by DRA).

Pure functions of the objects; the plugin lists them in :func:`registrations`.
"""

from __future__ import annotations

from typing import Any

from custom_scheduler.api.dra import DeviceClass
from custom_scheduler.api.model import Node, Pod
from custom_scheduler.api.resources import CPU, EPHEMERAL_STORAGE, MEMORY, PODS
from custom_scheduler.framework import cluster_events as ce
from custom_scheduler.framework.cluster_events import Action, ClusterEvent, ClusterEventWithHint, Hint, Resource

#: The resource name a DeviceClass implies without ``extendedResourceName`` (upstream's
#: ``resourceapi.ResourceDeviceClassPrefix``).
DEVICE_CLASS_PREFIX = "deviceclass.resource.kubernetes.io/"


def _requested(pod: Pod) -> list[str]:
    names = [r for r in (CPU, MEMORY, EPHEMERAL_STORAGE) if pod.requests.get(r) > 0]
    return names + [r for r, v in pod.requests.scalar.items() if v > 0]


def fits_empty_node(pod: Pod, node: Node) -> bool:
    """Whether ``pod``'s requests fit ``node``'s allocatable with nothing else on it (upstream's
    ``isFit``): a node too small even when empty can never take it."""
    if node.allocatable.get(PODS) < 1:
        return False
    return all(pod.requests.get(r) <= node.allocatable.get(r) for r in _requested(pod))


def after_node_change(pod: Pod, old: Node | None, new: Node) -> Hint:
    if not fits_empty_node(pod, new):
        return Hint.SKIP
    if old is None:
        return Hint.QUEUE
    grew = new.allocatable.get(PODS) > old.allocatable.get(PODS) or any(
        new.allocatable.get(r) > old.allocatable.get(r) for r in _requested(pod)
    )
    return Hint.QUEUE if grew else Hint.SKIP


def after_assigned_pod_delete(pod: Pod, old: Pod, new: Any) -> Hint:
    # A pod that was neither bound nor nominated held no room anywhere.
    return Hint.QUEUE if old.node_name or old.nominated_node_name else Hint.SKIP


def after_assigned_pod_scale_down(pod: Pod, old: Pod, new: Pod) -> Hint:
    lowered = ce.scaled_down(old, new)
    return Hint.QUEUE if any(pod.requests.get(r) > 0 for r in lowered) else Hint.SKIP


def after_target_pod_scale_down(pod: Pod, old: Any, new: Any) -> Hint:
    return Hint.QUEUE


def after_device_class_event(pod: Pod, old: DeviceClass | None, new: DeviceClass) -> Hint:
    """A class that now maps an extended resource the pod requests may satisfy it (DRA)."""
    if old is not None and old.extended_resource_name == new.extended_resource_name:
        return Hint.SKIP
    names = [new.extended_resource_name] if new.extended_resource_name else []
    if old is None:
        names.append(DEVICE_CLASS_PREFIX + new.name)
    return Hint.QUEUE if any(pod.requests.scalar.get(n, 0) > 0 for n in names) else Hint.SKIP


def registrations() -> list[ClusterEventWithHint]:
    """NodeResourcesFit's EventsToRegister (DRAExtendedResource and InPlacePodVerticalScaling on,
    as in 1.37's defaults; resize-deferral preemption, alpha, is not registered)."""
    return [
        ClusterEventWithHint(ce.ASSIGNED_POD_DELETE, after_assigned_pod_delete),
        ClusterEventWithHint(
            ClusterEvent(Resource.NODE, Action.ADD | Action.UPDATE_NODE_ALLOCATABLE),
            after_node_change,
        ),
        ClusterEventWithHint(
            ClusterEvent(Resource.DEVICE_CLASS, Action.ADD | Action.UPDATE),
            after_device_class_event,
        ),
        ClusterEventWithHint(
            ClusterEvent(Resource.ASSIGNED_POD, Action.UPDATE_POD_SCALE_DOWN),
            after_assigned_pod_scale_down,
        ),
        ClusterEventWithHint(
            ClusterEvent(Resource.TARGET_POD, Action.UPDATE_POD_SCALE_DOWN), after_target_pod_scale_down
        ),
    ]
