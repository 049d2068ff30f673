"""Which unschedulable pods a storage event may help: the volume plugins' EventsToRegister.

kube-scheduler registers, per plugin, the cluster events that may make a pod it rejected
schedulable, with a queueing hint that looks closer. :func:`requeue_for` turns one change of the
:class:`~custom_scheduler.framework.volumes.VolumeStore` into the arguments of
``SchedulingQueue.move_all_to_active_or_backoff``: the event label (upstream's, e.g.
``PersistentVolumeClaimAdd``), the plugins whose rejections it may lift, and a per-pod check.
Events that help no plugin (a PV update that changes nothing VolumeZone reads, when VolumeBinding
is not involved, cannot happen: VolumeBinding takes every PV event) return None.

Hints kept: a claim event only concerns pods in its namespace that use it; a StorageClass update
only matters for its ``allowedTopologies``; a CSINode update for NodeVolumeLimits only when a
driver's limit grew; a CSIStorageCapacity update only when its volume limit grew. Assigned-pod
deletions and node events already move every unschedulable pod elsewhere.

The one storage delete that helps is a VolumeAttachment's: the detached volume frees a slot of
its driver on the node, so NodeVolumeLimits' rejections are retried. Upstream's hint queues a pod
that has a ``persistentVolumeClaim`` volume (not a generic ephemeral one) or an in-tree inline
volume migrated to the attacher's driver. NodeVolumeLimits here counts no inline volumes, so the
claim test is the whole hint (a pod whose claims are all generic ephemeral ones stays put, as
upstream).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from custom_scheduler.api.model import Pod
from custom_scheduler.api.storage import WAIT_FOR_FIRST_CONSUMER, pv_zone_topologies
from custom_scheduler.framework import volumes as fv

#: The volume plugins' names, spelled out: core imports no plugin module (a test keeps them equal).
BINDING, RESTRICTIONS, ZONE, LIMITS = (
    "VolumeBinding",
    "VolumeRestrictions",
    "VolumeZone",
    "NodeVolumeLimits",
)


@dataclass(frozen=True, slots=True)
class Requeue:
    event: str
    plugins: frozenset[str]
    pre_check: Callable[[Pod], bool] | None = None


def _uses_claim(namespace: str, name: str) -> Callable[[Pod], bool]:
    def check(pod: Pod) -> bool:
        return pod.namespace == namespace and any(v.claim == name for v in pod.volumes)

    return check


def _has_claim_volume(pod: Pod) -> bool:
    return any(v.claim and not v.ephemeral for v in pod.volumes)


def _limits(csinode: Any) -> dict[str, int]:
    return {d: c or 0 for d, c in csinode.drivers.items()}


def _pv(old: Any, new: Any) -> set[str]:
    # VolumeZone reads only the PV's zone topology; VolumeBinding takes every PV event.
    if old is None or pv_zone_topologies(old) != pv_zone_topologies(new):
        return {BINDING, ZONE}
    return {BINDING}


def _pvc(old: Any, new: Any) -> set[str]:
    return {BINDING, ZONE, RESTRICTIONS, LIMITS} if old is None else {BINDING, ZONE}


def _storage_class(old: Any, new: Any) -> set[str]:
    plugins = set()
    if old is None or old.allowed_topologies != new.allowed_topologies:
        plugins.add(BINDING)
    if old is None and new.binding_mode == WAIT_FOR_FIRST_CONSUMER:
        plugins.add(ZONE)
    return plugins


def _csi_node(old: Any, new: Any) -> set[str]:
    plugins = set()
    if old is None or old.migrated_plugins != new.migrated_plugins:
        plugins.add(BINDING)
    if old is None or any(c > _limits(old).get(d, 0) for d, c in _limits(new).items()):
        plugins.add(LIMITS)  # only a driver's limit that grew frees room
    return plugins


def _csi_driver(old: Any, new: Any) -> set[str]:
    return {BINDING} if old is not None and old.storage_capacity and not new.storage_capacity else set()


def _csi_capacity(old: Any, new: Any) -> set[str]:
    new_limit, old_limit = new.volume_limit, (old.volume_limit if old is not None else None)
    if old is None or (new_limit is not None and (old_limit is None or new_limit > old_limit)):
        return {BINDING}
    return set()


#: kind -> the plugins an add (old None) or update of that kind may help (its EventsToRegister and hints).
_HELPED_BY: dict[str, Callable[[Any, Any], set[str]]] = {
    fv.PV: _pv,
    fv.PVC: _pvc,
    fv.STORAGE_CLASS: _storage_class,
    fv.CSI_NODE: _csi_node,
    fv.CSI_DRIVER: _csi_driver,
    fv.CSI_CAPACITY: _csi_capacity,
}


def requeue_for(kind: str, old: Any, new: Any) -> Requeue | None:
    """The queue move for a change of ``kind`` (None: nothing it could help)."""
    if new is None:
        if kind == fv.VOLUME_ATTACHMENT:
            return Requeue(f"{kind}Delete", frozenset({LIMITS}), _has_claim_volume)
        return None  # deleting any other storage object makes no pod schedulable
    helped = _HELPED_BY.get(kind)
    plugins = helped(old, new) if helped is not None else set()
    if not plugins:
        return None
    check = _uses_claim(new.namespace, new.name) if kind == fv.PVC else None
    return Requeue(f"{kind}{'Add' if old is None else 'Update'}", frozenset(plugins), check)
