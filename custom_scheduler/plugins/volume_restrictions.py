"""VolumeRestrictions: volumes that only one pod, or one node, may use at a time.

kube-scheduler's ``VolumeRestrictions``:

- **ReadWriteOncePod** claims: if any pod already scheduled (bound or assumed, on any node) uses
  one of the pod's RWOP claims, every node is rejected with
  ``node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already
  in-use by another pod``. Unschedulable, not unresolvable: preempting that pod frees the claim,
  which is why PreFilter counts the users once and the PreFilter extensions adjust the count when
  preemption removes (or nominated pods add) a user.
- **In-tree disks** that cannot be mounted twice on one node: a GCE PD or an iSCSI LUN unless both
  uses are read-only, any AWS EBS volume, a Ceph RBD image (same pool and image, overlapping
  monitors) unless both are read-only: ``node(s) had no available disk``.

A claim that does not exist is UnschedulableAndUnresolvable with the API's NotFound message. A pod
with neither disks nor RWOP claims in use is Skip.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from custom_scheduler.api.model import Pod, PodVolume
from custom_scheduler.api.storage import READ_WRITE_ONCE_POD, not_found
from custom_scheduler.framework import cluster_events as ce
from custom_scheduler.framework import registry
from custom_scheduler.framework.interface import Handle
from custom_scheduler.framework.types import SKIP, SUCCESS, Code, CycleState, NodeInfo, StateKey, Status
from custom_scheduler.plugins import signers, volume_hints

NAME = "VolumeRestrictions"

ERR_REASON_DISK_CONFLICT = "node(s) had no available disk"
ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT = (
    "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod"
)

PRE_FILTER_KEY: StateKey[_State] = StateKey(f"PreFilter{NAME}")


@dataclass(slots=True)
class _State:
    rwop_claims: frozenset[str]
    conflicting_refs: int

    def refs_of(self, pod: Pod) -> int:
        return sum(1 for v in pod.volumes if v.claim and not v.ephemeral and v.claim in self.rwop_claims)


def is_volume_conflict(volume: PodVolume, other: Pod) -> bool:
    """Whether ``volume`` (an in-tree disk) cannot be mounted beside ``other``'s volumes."""
    kind = volume.disk[0]
    for ev in other.volumes:
        if not ev.disk or ev.disk[0] != kind or ev.disk[1:] != volume.disk[1:]:
            continue
        both_ro = volume.read_only and ev.read_only
        if kind == "aws":
            return True
        if kind in ("gce", "iscsi") and not both_ro:
            return True
        if kind == "rbd" and not both_ro and volume.monitors & ev.monitors:
            return True
    return False


def satisfies_volume_conflicts(pod: Pod, node_info: NodeInfo) -> bool:
    for v in pod.volumes:
        if not v.disk:
            continue
        for other in node_info.pods.values():
            if is_volume_conflict(v, other):
                return False
    return True


_REJECT_DISK = Status(Code.UNSCHEDULABLE, (ERR_REASON_DISK_CONFLICT,), NAME)
_REJECT_RWOP = Status(Code.UNSCHEDULABLE, (ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT,), NAME)


class VolumeRestrictions:
    name: ClassVar[str] = NAME

    def __init__(self, args: Any, handle: Handle) -> None:
        del args
        self.handle = handle

    def sign_pod(self, pod: Pod) -> signers.Fragments:
        """What this plugin reads of the pod (opportunistic batching)."""
        return signers.volumes(pod)

    def events_to_register(self) -> list[ce.ClusterEventWithHint]:
        """The storage changes that may help (see :mod:`.volume_hints`)."""
        return volume_hints.registrations(NAME, conflict=is_volume_conflict)

    def pre_filter(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        if not pod.volumes:
            return SKIP
        needs_check = any(v.disk for v in pod.volumes)
        store = self.handle.volumes
        rwop: set[str] = set()
        for v in pod.volumes:
            if not v.claim or v.ephemeral:
                continue
            pvc = store.get_pvc_api(pod.namespace, v.claim)
            if pvc is None:
                return Status.unresolvable(not_found("persistentvolumeclaim", v.claim))
            if READ_WRITE_ONCE_POD in pvc.access_modes:
                rwop.add(pvc.name)
        refs = 0
        if rwop:
            # Upstream's snapshot-wide "is this claim used by any pod" (StorageInfos).
            keys = [f"{pod.namespace}/{c}" for c in rwop]
            for key in keys:
                if any(key in ni.pvc_refs for ni in self.handle.snapshot_nodes()):
                    refs += 1
        if not needs_check and refs == 0:
            return SKIP
        state.write(PRE_FILTER_KEY, _State(frozenset(rwop), refs))
        return SUCCESS

    def add_pod(self, state: CycleState, pod: Pod, pod_to_add: Pod, node_info: NodeInfo) -> Status:
        s = state.read(PRE_FILTER_KEY)
        state.write(PRE_FILTER_KEY, _State(s.rwop_claims, s.conflicting_refs + s.refs_of(pod_to_add)))
        return SUCCESS

    def remove_pod(self, state: CycleState, pod: Pod, pod_to_remove: Pod, node_info: NodeInfo) -> Status:
        s = state.read(PRE_FILTER_KEY)
        state.write(PRE_FILTER_KEY, _State(s.rwop_claims, s.conflicting_refs - s.refs_of(pod_to_remove)))
        return SUCCESS

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        if not satisfies_volume_conflicts(pod, node_info):
            return _REJECT_DISK
        s = state.read(PRE_FILTER_KEY)
        if s.conflicting_refs > 0:
            return _REJECT_RWOP
        return SUCCESS


SPEC = registry.PluginSpec(NAME, factory=VolumeRestrictions, parse_args=registry.no_args)
