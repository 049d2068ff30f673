"""A VolumeStore and Handle for the volume plugins' unit tests, filled from builders."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from custom_scheduler.api import storage
from custom_scheduler.api.model import Node
from custom_scheduler.framework import volumes as fv
from custom_scheduler.framework.handle import SnapshotHandle
from custom_scheduler.framework.types import NodeInfo, Snapshot
from tests.builders import PVBuilder, PVCBuilder


def store_of(
    pvs: Iterable[PVBuilder] = (),
    pvcs: Iterable[PVCBuilder] = (),
    classes: Iterable[Mapping[str, Any]] = (),
    csinodes: Iterable[Mapping[str, Any]] = (),
    drivers: Iterable[Mapping[str, Any]] = (),
    capacities: Iterable[Mapping[str, Any]] = (),
    nodes: Iterable[Node] = (),
    attachments: Iterable[Mapping[str, Any]] = (),
) -> fv.VolumeStore:
    s = fv.VolumeStore(clock=lambda: 0.0)
    s.load(fv.PV, (b.build() for b in pvs))
    s.load(fv.PVC, (b.build() for b in pvcs))
    s.load(fv.STORAGE_CLASS, (storage.storage_class_from_json(c) for c in classes))
    s.load(fv.CSI_NODE, (storage.csinode_from_json(c) for c in csinodes))
    s.load(fv.CSI_DRIVER, (storage.csidriver_from_json(d) for d in drivers))
    s.load(fv.CSI_CAPACITY, (storage.csi_storage_capacity_from_json(c) for c in capacities))
    s.load(fv.VOLUME_ATTACHMENT, (storage.volume_attachment_from_json(a) for a in attachments))
    by_name = {n.name: n.labels for n in nodes}
    s.node_labels = by_name.get
    return s


def handle_of(store: fv.VolumeStore, infos: Iterable[NodeInfo] = (), client: Any = None) -> SnapshotHandle:
    infos = list(infos)
    snap = Snapshot(node_infos={ni.name: ni for ni in infos}, node_list=infos)
    return SnapshotHandle(snap, profile_name="custom-scheduler", client=client, volumes=store)


def csidriver_obj(name: str, *, capacity: bool = False, required: bool = False) -> dict[str, Any]:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSIDriver",
        "metadata": {"name": name},
        "spec": {"storageCapacity": capacity, "preventPodSchedulingIfMissing": required},
    }


def capacity_obj(
    name: str, storage_class: str, capacity: str, zone: str, max_size: str | None = None
) -> dict[str, Any]:
    o: dict[str, Any] = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSIStorageCapacity",
        "metadata": {"name": name, "namespace": "kube-system"},
        "storageClassName": storage_class,
        "capacity": capacity,
        "nodeTopology": {"matchLabels": {"topology.kubernetes.io/zone": zone}},
    }
    if max_size is not None:
        o["maximumVolumeSize"] = max_size
    return o


def volume_attachment_obj(name: str, pv: str | None, node: str, attacher: str) -> dict[str, Any]:
    """A VolumeAttachment of PV ``pv`` (None: an inline volume spec instead) to ``node``."""
    source: dict[str, Any] = {"persistentVolumeName": pv} if pv is not None else {"inlineVolumeSpec": {}}
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "VolumeAttachment",
        "metadata": {"name": name},
        "spec": {"attacher": attacher, "nodeName": node, "source": source},
        "status": {"attached": True},
    }


class FakeClient:
    """Answers PUTs of PVs and PVCs like the API server (resourceVersion bumped), recording them."""

    def __init__(self, fail: Exception | None = None) -> None:
        self.puts: list[tuple[str, dict[str, Any]]] = []
        self.fail = fail
        self._rv = 100

    def put(self, path: str, body: dict[str, Any], **kw: Any) -> dict[str, Any]:
        if self.fail is not None:
            raise self.fail
        self._rv += 1
        out = {**body, "metadata": {**body["metadata"], "resourceVersion": str(self._rv)}}
        self.puts.append((path, out))
        return out
