"""The volume plugins' requeue rules: which storage changes may help a pod each one rejected.

Upstream's EventsToRegister of VolumeBinding, VolumeRestrictions, VolumeZone and NodeVolumeLimits
(v1.37.2), with their hints, in one module because the four read the same objects (the
:class:`~custom_scheduler.framework.volumes.VolumeStore` kinds) and share their tests. Each
plugin's ``events_to_register`` returns :func:`registrations` of its name.

Hints kept: a claim event only concerns pods in its namespace that use it; a StorageClass update
only matters to VolumeBinding for its ``allowedTopologies``, and to VolumeZone only when added with
``WaitForFirstConsumer``; a PV matters to VolumeZone only when its zone topology changed; a CSINode
update to NodeVolumeLimits only when a driver's limit grew, to VolumeBinding when its migrated
plugins changed; a CSIDriver update only when storage capacity tracking was turned off; a
CSIStorageCapacity only when added or its volume limit grew.

Deletes that help: an assigned pod's (its volumes no longer conflict, for VolumeRestrictions; its
attachments go, for NodeVolumeLimits) and a VolumeAttachment's (a slot of the driver frees on
the node; upstream queues a pod with a ``persistentVolumeClaim`` volume, not only generic
ephemeral ones — NodeVolumeLimits counts no inline volumes here, so the claim test is the hint).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from custom_scheduler.api.model import Pod
from custom_scheduler.api.storage import WAIT_FOR_FIRST_CONSUMER, pv_zone_topologies
from custom_scheduler.framework.cluster_events import (
    ASSIGNED_POD_DELETE,
    NODE_ADD,
    Action,
    ClusterEvent,
    ClusterEventWithHint,
    Hint,
    HintFn,
    Resource,
)

BINDING, RESTRICTIONS, ZONE, LIMITS = "VolumeBinding", "VolumeRestrictions", "VolumeZone", "NodeVolumeLimits"

_ADD_OR_UPDATE = Action.ADD | Action.UPDATE
_NODE_ADD_OR_LABEL = ClusterEvent(Resource.NODE, Action.ADD | Action.UPDATE_NODE_LABEL)


def _q(ok: bool) -> Hint:
    return Hint.QUEUE if ok else Hint.SKIP


def uses_claim(pod: Pod, claim: Any) -> Hint:
    """The claim (added or changed) is one of the pod's volumes."""
    return _q(pod.namespace == claim.namespace and any(v.claim == claim.name for v in pod.volumes))


def _claim_changed(pod: Pod, old: Any, new: Any) -> Hint:
    return uses_claim(pod, new)


def has_claim_volume(pod: Pod, old: Any = None, new: Any = None) -> Hint:
    return _q(any(v.claim and not v.ephemeral for v in pod.volumes))


def _limits(csinode: Any) -> dict[str, int]:
    return {d: c or 0 for d, c in csinode.drivers.items()}


def _pv_zone_changed(pod: Pod, old: Any, new: Any) -> Hint:
    return _q(old is None or pv_zone_topologies(old) != pv_zone_topologies(new))


def _class_topologies_changed(pod: Pod, old: Any, new: Any) -> Hint:
    return _q(old is None or old.allowed_topologies != new.allowed_topologies)


def _class_waits_for_consumer(pod: Pod, old: Any, new: Any) -> Hint:
    return _q(new.binding_mode == WAIT_FOR_FIRST_CONSUMER)


def _csinode_migration_changed(pod: Pod, old: Any, new: Any) -> Hint:
    return _q(old is None or old.migrated_plugins != new.migrated_plugins)


def _csinode_limit_grew(pod: Pod, old: Any, new: Any) -> Hint:
    before = _limits(old)
    return _q(any(c > before.get(d, 0) for d, c in _limits(new).items()))


def _capacity_tracking_off(pod: Pod, old: Any, new: Any) -> Hint:
    return _q(bool(old.storage_capacity) and not new.storage_capacity)


def _capacity_grew(pod: Pod, old: Any, new: Any) -> Hint:
    if old is None:
        return Hint.QUEUE
    return _q(new.volume_limit is not None and (old.volume_limit is None or new.volume_limit > old.volume_limit))


def _deleted_pod_had_claims(pod: Pod, old: Pod, new: Any) -> Hint:
    return _q(bool(old.node_name) and any(v.claim for v in old.volumes) and any(v.claim for v in pod.volumes))


def _deleted_pod_conflicted(conflict: Callable[[Any, Pod], bool]) -> HintFn:
    """VolumeRestrictions' hint for a deleted assigned pod, as upstream's: in the pod's namespace,
    one whose in-tree disk conflicted with the pod's, or that used a claim the pod uses (the claim
    may be ReadWriteOncePod; upstream does not read the claim to tell)."""

    def hint(pod: Pod, old: Pod, new: Any) -> Hint:
        if old.namespace != pod.namespace:
            return Hint.SKIP
        if any(v.disk and conflict(v, old) for v in pod.volumes):
            return Hint.QUEUE
        claims = {v.claim for v in pod.volumes if v.claim and not v.ephemeral}
        return _q(any(v.claim in claims for v in old.volumes if v.claim and not v.ephemeral))

    return hint


def registrations(plugin: str, conflict: Callable[[Any, Pod], bool] | None = None) -> list[ClusterEventWithHint]:
    """``plugin``'s EventsToRegister (one of the four names); VolumeRestrictions passes its
    ``is_volume_conflict`` as ``conflict``."""
    pv = Resource.PERSISTENT_VOLUME
    pvc = Resource.PERSISTENT_VOLUME_CLAIM
    if plugin == BINDING:
        return [
            ClusterEventWithHint(ClusterEvent(Resource.STORAGE_CLASS, _ADD_OR_UPDATE), _class_topologies_changed),
            ClusterEventWithHint(ClusterEvent(pvc, _ADD_OR_UPDATE), _claim_changed),
            ClusterEventWithHint(ClusterEvent(pv, _ADD_OR_UPDATE)),
            ClusterEventWithHint(_NODE_ADD_OR_LABEL),
            ClusterEventWithHint(ClusterEvent(Resource.CSI_NODE, _ADD_OR_UPDATE), _csinode_migration_changed),
            ClusterEventWithHint(ClusterEvent(Resource.CSI_DRIVER, Action.UPDATE), _capacity_tracking_off),
            ClusterEventWithHint(ClusterEvent(Resource.CSI_STORAGE_CAPACITY, _ADD_OR_UPDATE), _capacity_grew),
        ]
    if plugin == ZONE:
        return [
            ClusterEventWithHint(ClusterEvent(Resource.STORAGE_CLASS, Action.ADD), _class_waits_for_consumer),
            ClusterEventWithHint(_NODE_ADD_OR_LABEL),
            ClusterEventWithHint(ClusterEvent(pvc, _ADD_OR_UPDATE), _claim_changed),
            ClusterEventWithHint(ClusterEvent(pv, _ADD_OR_UPDATE), _pv_zone_changed),
        ]
    if plugin == RESTRICTIONS:
        assert conflict is not None
        return [
            ClusterEventWithHint(ASSIGNED_POD_DELETE, _deleted_pod_conflicted(conflict)),
            ClusterEventWithHint(NODE_ADD),
            ClusterEventWithHint(ClusterEvent(pvc, Action.ADD), _claim_changed),
        ]
    if plugin == LIMITS:
        return [
            ClusterEventWithHint(ClusterEvent(Resource.CSI_NODE, Action.ADD)),
            ClusterEventWithHint(ClusterEvent(Resource.CSI_NODE, Action.UPDATE), _csinode_limit_grew),
            ClusterEventWithHint(ASSIGNED_POD_DELETE, _deleted_pod_had_claims),
            ClusterEventWithHint(ClusterEvent(pvc, Action.ADD), _claim_changed),
            ClusterEventWithHint(ClusterEvent(Resource.VOLUME_ATTACHMENT, Action.DELETE), has_claim_volume),
        ]
    raise ValueError(f"not a volume plugin: {plugin!r}")
