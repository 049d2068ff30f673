"""NodeVolumeLimits: a node's CSI drivers attach at most ``allocatable.count`` volumes each.

kube-scheduler's ``NodeVolumeLimits`` (CSILimits). For the node's CSINode, each driver reporting
``allocatable.count`` has a limit. The pod's new volumes (claims whose PV is CSI, or, for an
unbound claim, whose class's provisioner is the driver) are counted per driver, minus those
already attached through the node's pods (the same PV counts once); if the attached ones plus the
new ones exceed a limit: Unschedulable ``node(s) exceed max volume count``. With
VolumeLimitScaling (beta, on by default in 1.37), a driver whose CSIDriver sets
``preventPodSchedulingIfMissing`` must be installed on the node's CSINode:
``<driver> CSI driver is not installed on the node``.

Attached also means named by a VolumeAttachment for the node: a volume whose pod is gone stays
attached until it is detached, and the node cannot take another one of that driver meanwhile. An
attachment counts under its ``attacher`` when it names a PV that exists and has a CSI source (an
in-tree PV is not translated here, as upstream), and only once if a pod on the node uses the same
volume. Upstream does not take the attachments' volumes out of the new pod's, so a pod coming back
to a volume still attached (with no pod using it) counts that volume twice; kept as is.

A claim of the pod that does not exist is UnschedulableAndUnresolvable (``looking up PVC ...``).
An in-tree provisioner counts under its CSI driver only when the CSINode lists it as migrated.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any, ClassVar

from custom_scheduler.api.model import Pod
from custom_scheduler.api.storage import CSINode, PersistentVolumeClaim, not_found
from custom_scheduler.framework import cluster_events as ce
from custom_scheduler.framework import registry
from custom_scheduler.framework.interface import Handle
from custom_scheduler.framework.types import SKIP, SUCCESS, Code, CycleState, NodeInfo, Status
from custom_scheduler.framework.volumes import VolumeStore
from custom_scheduler.plugins import signers, volume_hints

NAME = "NodeVolumeLimits"

ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED = "node(s) exceed max volume count"

#: In-tree provisioners and the CSI drivers they migrate to (csi-translation-lib).
MIGRATABLE_PROVISIONERS = {
    "kubernetes.io/aws-ebs": "ebs.csi.aws.com",
    "kubernetes.io/gce-pd": "pd.csi.storage.gke.io",
    "kubernetes.io/azure-disk": "disk.csi.azure.com",
    "kubernetes.io/azure-file": "file.csi.azure.com",
    "kubernetes.io/cinder": "cinder.csi.openstack.org",
    "kubernetes.io/vsphere-volume": "csi.vsphere.vmware.com",
    "kubernetes.io/portworx-volume": "pxd.portworx.com",
}

_REJECT = Status(Code.UNSCHEDULABLE, (ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED,), NAME)


class MissingClaimError(LookupError):
    pass


def driver_info(
    pvc: PersistentVolumeClaim, csinode: CSINode | None, store: VolumeStore, prefix: str
) -> tuple[str, str]:
    """(CSI driver, volume handle) of a claim, or ("", "") when it is not counted: the bound PV's
    CSI source, else (unbound, or its PV unknown) the class's provisioner with a placeholder handle
    unique to the claim."""
    if pvc.volume_name:
        pv = store.get_pv_api(pvc.volume_name)
        if pv is not None:
            return (pv.csi_driver, pv.csi_handle) if pv.csi_driver else ("", "")
    if not pvc.class_name:
        return "", ""
    sc = store.storage_class(pvc.class_name)
    if sc is None:
        return "", ""
    handle = f"{prefix}-{pvc.namespace}/{pvc.name}"
    driver = MIGRATABLE_PROVISIONERS.get(sc.provisioner)
    if driver is not None:
        if csinode is None or sc.provisioner not in csinode.migrated_plugins:
            return "", ""
        return driver, handle
    return sc.provisioner, handle


def attachable_volumes(
    pod: Pod, csinode: CSINode | None, store: VolumeStore, prefix: str, *, new_pod: bool
) -> dict[str, str]:
    """Unique volume name (``driver/handle``) → driver for the pod's CSI volumes. A missing claim
    raises MissingClaimError for the pod being scheduled and is skipped for pods already placed."""
    out: dict[str, str] = {}
    for v in pod.volumes:
        if not v.claim:
            continue
        pvc = store.get_pvc_api(pod.namespace, v.claim)
        if pvc is None:
            if new_pod:
                raise MissingClaimError(
                    f"looking up PVC {pod.namespace}/{v.claim}: {not_found('persistentvolumeclaim', v.claim)}"
                )
            continue
        driver, handle = driver_info(pvc, csinode, store, prefix)
        if driver and handle:
            out[f"{driver}/{handle}"] = driver
    return out


def attached_by_volume_attachments(node_name: str, store: VolumeStore) -> dict[str, str]:
    """Unique volume name (``attacher/handle``) → attacher for the VolumeAttachments of the node.
    One without an attacher or a PV name, or whose PV is unknown or not CSI, is not counted."""
    out: dict[str, str] = {}
    for va in store.volume_attachments_on(node_name):
        if not va.attacher or not va.pv_name:
            continue
        pv = store.get_pv_api(va.pv_name)
        if pv is None or not pv.csi_driver:
            continue
        out[f"{va.attacher}/{pv.csi_handle}"] = va.attacher
    return out


def volume_limits(csinode: CSINode | None) -> dict[str, int]:
    if csinode is None:
        return {}
    return {name: count for name, count in csinode.drivers.items() if count is not None}


class NodeVolumeLimits:
    name: ClassVar[str] = NAME

    def __init__(self, args: Any, handle: Handle) -> None:
        del args
        self.handle = handle
        # Placeholder handles of unbound claims must not collide with real volume handles.
        self._prefix = secrets.token_hex(16)

    def sign_pod(self, pod: Pod) -> signers.Fragments:
        """What this plugin reads of the pod (opportunistic batching)."""
        return signers.volumes(pod)

    def events_to_register(self) -> list[ce.ClusterEventWithHint]:
        """The storage changes that may help (see :mod:`.volume_hints`)."""
        return volume_hints.registrations(NAME)

    def pre_filter(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        return SUCCESS if any(v.claim for v in pod.volumes) else SKIP

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        node = node_info.node
        if node is None:
            return Status.as_error("node not found")
        store = self.handle.volumes
        csinode = store.csinode(node.name)
        try:
            new = attachable_volumes(pod, csinode, store, self._prefix, new_pod=True)
        except MissingClaimError as e:
            return Status.unresolvable(str(e))
        if not new:
            return SUCCESS
        for driver in set(new.values()):
            d = store.csidriver(driver)
            installed = csinode is not None and driver in csinode.drivers
            if d is not None and d.prevent_pod_scheduling_if_missing and not installed:
                return Status(Code.UNSCHEDULABLE, (f"{driver} CSI driver is not installed on the node",))
        limits = volume_limits(csinode)
        if not limits:
            return SUCCESS
        attached: dict[str, str] = {}
        for other in node_info.pods.values():
            if other.volumes:
                attached.update(attachable_volumes(other, csinode, store, self._prefix, new_pod=False))
        attached_count: dict[str, int] = {}
        for unique, driver in attached.items():
            new.pop(unique, None)
            attached_count[driver] = attached_count.get(driver, 0) + 1
        for unique, driver in attached_by_volume_attachments(node.name, store).items():
            if unique not in attached:
                attached_count[driver] = attached_count.get(driver, 0) + 1
        new_count: dict[str, int] = {}
        for driver in new.values():
            new_count[driver] = new_count.get(driver, 0) + 1
        for driver, count in new_count.items():
            limit = limits.get(driver)
            if limit is not None and attached_count.get(driver, 0) + count > limit:
                return _REJECT
        return SUCCESS


SPEC = registry.PluginSpec(NAME, factory=NodeVolumeLimits, parse_args=registry.no_args)
