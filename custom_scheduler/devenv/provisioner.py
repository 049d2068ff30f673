"""A dynamic provisioner stand-in, for a control plane that runs no CSI external-provisioner.

For a ``WaitForFirstConsumer`` StorageClass whose ``provisioner`` is this stand-in's name, the
scheduler (VolumeBinding's PreBind) annotates a claim with ``volume.kubernetes.io/selected-node``.
That is the signal local-path or a CSI external-provisioner acts on: :class:`Provisioner` then
creates a PV on that node (a ``local`` volume with node affinity to the node's hostname label),
of the claim's class, size, access and volume modes, pre-bound to the claim through its claimRef
and annotated ``pv.kubernetes.io/provisioned-by``. The PV controller (kube-controller-manager's
binder) completes the binding, which is what the scheduler's PreBind waits for. When a claim it
provisioned for is deleted and the PV becomes Released, the stand-in deletes the PV, as a
provisioner does for ``reclaimPolicy: Delete``.

It watches PVCs and PVs with the same informers as the daemon and writes only through the admin
client it is given. Claims of other provisioners, Immediate classes, claims already bound or
without the annotation are left alone.
"""

from __future__ import annotations

import threading
from typing import Any

import structlog

from custom_scheduler.api import storage
from custom_scheduler.core.informers import Informer, store_sink
from custom_scheduler.kube import api_errors
from custom_scheduler.kube.client import KubeClient

log = structlog.get_logger("custom_scheduler.provisioner")

DEFAULT_NAME = "custom-scheduler.test/provisioner"


def _nothing(obj: object) -> None:
    return None


class Provisioner:
    """Provisions local PVs on the selected node for claims of classes naming ``name``."""

    def __init__(self, kube: KubeClient, name: str = DEFAULT_NAME) -> None:
        self.kube = kube
        self.name = name
        self.provisioned: list[str] = []
        self._lock = threading.Lock()
        self._done: set[str] = set()  # claim UIDs already provisioned for
        # An add or an update is looked at in its latest version; a deletion needs nothing.
        claims = store_sink(self.consider, _nothing)
        volumes = store_sink(self.reclaim, _nothing)
        self._claims = Informer(
            kube, "/api/v1/persistentvolumeclaims", storage.pvc_from_json, lambda c: c.key, claims, name="pvc"
        )
        self._volumes = Informer(
            kube, "/api/v1/persistentvolumes", storage.pv_from_json, lambda v: v.name, volumes, name="pv"
        )

    def start(self) -> Provisioner:
        self._claims.start()
        self._volumes.start()
        self._claims.synced.wait(30)
        self._volumes.synced.wait(30)
        return self

    def stop(self) -> None:
        self._claims.stop()
        self._volumes.stop()

    def _class(self, name: str) -> storage.StorageClass | None:
        try:
            return storage.storage_class_from_json(self.kube.get(f"/apis/storage.k8s.io/v1/storageclasses/{name}"))
        except api_errors.NotFound:
            return None

    def consider(self, pvc: storage.PersistentVolumeClaim) -> None:
        """Provision for ``pvc`` if it is ours to provision and not done yet."""
        node = pvc.selected_node
        if not node or pvc.volume_name or pvc.deleting or not pvc.class_name:
            return
        with self._lock:
            if pvc.uid in self._done:
                return
        sc = self._class(pvc.class_name)
        if sc is None or sc.provisioner != self.name or sc.binding_mode != storage.WAIT_FOR_FIRST_CONSUMER:
            return
        pv = self.volume_for(pvc, node)
        try:
            self.kube.post("/api/v1/persistentvolumes", pv)
        except api_errors.Conflict:
            pass  # an earlier event already created it
        except api_errors.KubeError as e:
            log.warning("provisioning_failed", claim=pvc.key, error=str(e)[:200])
            return
        with self._lock:
            self._done.add(pvc.uid)
            self.provisioned.append(pv["metadata"]["name"])
        log.info("provisioned", claim=pvc.key, node=node, pv=pv["metadata"]["name"])

    def volume_for(self, pvc: storage.PersistentVolumeClaim, node: str) -> dict[str, Any]:
        """The PV a local provisioner would create for ``pvc`` on ``node``."""
        name = f"pvc-{pvc.uid}"
        term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}
        return {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": name, "annotations": {storage.ANN_PROVISIONED_BY: self.name}},
            "spec": {
                "capacity": {"storage": str(pvc.request or 1)},
                "accessModes": list(pvc.access_modes) or ["ReadWriteOnce"],
                "volumeMode": pvc.volume_mode,
                "storageClassName": pvc.class_name,
                "persistentVolumeReclaimPolicy": "Delete",
                "local": {"path": f"/var/lib/provisioner/{name}"},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [term]}},
                "claimRef": {
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "namespace": pvc.namespace,
                    "name": pvc.name,
                    "uid": pvc.uid,
                },
            },
        }

    def reclaim(self, pv: storage.PersistentVolume) -> None:
        """Delete a Released PV this stand-in provisioned (its claim is gone)."""
        if (
            pv.phase != "Released"
            or pv.raw.get("metadata", {}).get("annotations", {}).get(storage.ANN_PROVISIONED_BY) != self.name
        ):
            return
        try:
            self.kube.delete(f"/api/v1/persistentvolumes/{pv.name}")
        except api_errors.NotFound:
            pass  # deleted already (an earlier event, or by hand): nothing left to reclaim
        except api_errors.KubeError as e:
            log.warning("reclaim_failed", pv=pv.name, error=str(e)[:200])
