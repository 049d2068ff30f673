"""Compact views of the storage objects the volume plugins read, projected from raw JSON.

PersistentVolumes, PersistentVolumeClaims, StorageClasses, CSINodes, CSIDrivers,
CSIStorageCapacities and VolumeAttachments, each a slotted struct holding only what kube-scheduler's VolumeBinding,
VolumeRestrictions, VolumeZone and NodeVolumeLimits read (as :mod:`custom_scheduler.api.model` does for
pods and nodes, and for the same reason: the client's model classes cost far more to build than the
few fields used). PVs and PVCs also keep their raw JSON: VolumeBinding's PreBind writes them back
with an ``update`` (as upstream does), and an update must carry the whole object.

The pure helpers below are the semantics of ``k8s.io/component-helpers/storage/volume`` that the
plugins share: a claim's class (the beta annotation wins over ``storageClassName``), whether a PV is
bound to a claim, a PV's node affinity against node labels, the smallest matching PV for a claim, a
class's ``allowedTopologies``, and CSIStorageCapacity's volume limit.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from custom_scheduler.api import labels as sel
from custom_scheduler.api import quantity

JSON = Mapping[str, Any]

# Annotations the PV controller, provisioners and the scheduler exchange (component-helpers).
ANN_SELECTED_NODE = "volume.kubernetes.io/selected-node"
ANN_BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
ANN_BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
ANN_STORAGE_PROVISIONER = "volume.kubernetes.io/storage-provisioner"
ANN_BETA_STORAGE_PROVISIONER = "volume.beta.kubernetes.io/storage-provisioner"
ANN_PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
BETA_STORAGE_CLASS_ANNOTATION = "volume.beta.kubernetes.io/storage-class"
MIGRATED_PLUGINS_ANNOTATION = "storage.alpha.kubernetes.io/migrated-plugins"
NOT_SUPPORTED_PROVISIONER = "kubernetes.io/no-provisioner"

WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"
IMMEDIATE = "Immediate"
READ_WRITE_ONCE_POD = "ReadWriteOncePod"
FILESYSTEM = "Filesystem"

CLAIM_BOUND, CLAIM_LOST, CLAIM_PENDING = "Bound", "Lost", "Pending"
VOLUME_AVAILABLE = "Available"

#: Zone and region labels VolumeZone compares, beta first (upstream's order).
TOPOLOGY_LABELS = (
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
)
#: The GA label for each beta one.
GA_LABEL = {
    "failure-domain.beta.kubernetes.io/zone": "topology.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region": "topology.kubernetes.io/region",
}
#: A PV label may list several zones joined by this (cloud-provider's LabelMultiZoneDelimiter).
MULTI_ZONE_DELIMITER = "__"


def _storage_bytes(doc: JSON | None) -> int | None:
    """The ``storage`` quantity of a ResourceList in bytes, or None when absent."""
    if not doc or "storage" not in doc:
        return None
    return quantity.to_int(doc["storage"])


def _meta(doc: JSON) -> JSON:
    return doc.get("metadata") or {}


@dataclass(frozen=True, slots=True)
class ClaimRef:
    namespace: str
    name: str
    uid: str = ""


@dataclass(slots=True)
class PersistentVolume:
    name: str
    uid: str = ""
    resource_version: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    storage_class: str = ""
    """The PV's class: the beta annotation if present, else ``spec.storageClassName``."""
    capacity: int = 0
    access_modes: tuple[str, ...] = ()
    volume_mode: str = FILESYSTEM
    volume_attributes_class: str = ""
    node_affinity: sel.NodeSelector | None = None
    """``spec.nodeAffinity.required``, compiled; None when the PV may be used from any node."""
    claim_ref: ClaimRef | None = None
    phase: str = ""
    deleting: bool = False
    bound_by_controller: bool = False
    csi_driver: str = ""
    csi_handle: str = ""
    raw: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass(slots=True)
class PersistentVolumeClaim:
    namespace: str
    name: str
    uid: str = ""
    resource_version: str = ""
    storage_class: str | None = None
    """The claim's class (beta annotation, then ``spec.storageClassName``); None when it names none."""
    volume_name: str = ""
    phase: str = CLAIM_PENDING
    deleting: bool = False
    access_modes: tuple[str, ...] = ()
    volume_mode: str = FILESYSTEM
    volume_attributes_class: str = ""
    request: int | None = None
    """``spec.resources.requests.storage`` in bytes; None when the claim asks for no size."""
    selector: sel.Selector | None = None
    selected_node: str | None = None
    bind_completed: bool = False
    controller_uid: str = ""
    """UID of the object controlling the claim (a pod, for generic ephemeral volumes)."""
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def class_name(self) -> str:
        return self.storage_class or ""

    @property
    def fully_bound(self) -> bool:
        """Bound by the PV controller, both ways (``volumeName`` set and bind-completed)."""
        return bool(self.volume_name) and self.bind_completed


@dataclass(frozen=True, slots=True)
class StorageClass:
    name: str
    provisioner: str = ""
    binding_mode: str | None = None
    """``volumeBindingMode``; the API server defaults it to Immediate, so None only in odd input."""
    allowed_topologies: tuple[tuple[tuple[str, frozenset[str]], ...], ...] = ()
    """Terms ORed; each term's (key, values) requirements ANDed."""
    resource_version: str = ""


@dataclass(frozen=True, slots=True)
class CSINode:
    name: str
    drivers: Mapping[str, int | None] = field(default_factory=dict)
    """Driver name → ``allocatable.count`` (None when the driver reports no limit)."""
    migrated_plugins: frozenset[str] = frozenset()
    resource_version: str = ""


@dataclass(frozen=True, slots=True)
class CSIDriver:
    name: str
    storage_capacity: bool = False
    prevent_pod_scheduling_if_missing: bool = False
    resource_version: str = ""


@dataclass(frozen=True, slots=True)
class CSIStorageCapacity:
    namespace: str
    name: str
    storage_class: str
    capacity: int | None = None
    maximum_volume_size: int | None = None
    node_topology: sel.Selector = sel.NOTHING
    """Which nodes reach this capacity; a missing topology means none do."""
    resource_version: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def volume_limit(self) -> int | None:
        """The largest volume this pool can hold: ``maximumVolumeSize`` when set, else ``capacity``."""
        return self.maximum_volume_size if self.maximum_volume_size is not None else self.capacity


@dataclass(frozen=True, slots=True)
class VolumeAttachment:
    """A ``storage.k8s.io/v1`` VolumeAttachment: the attach/detach controller's record that
    ``attacher`` (a CSI driver) has, or is about to have, the PV ``pv_name`` attached to
    ``node_name``. NodeVolumeLimits counts these because a volume stays attached, using one of the
    driver's slots, after the pod that used it is gone and until the detach finishes and the
    object is deleted. ``status.attached`` is not kept: upstream counts the object whether or not
    the attach has completed. ``pv_name`` is "" for an attachment of an inline volume spec, which
    upstream does not count."""

    name: str
    attacher: str = ""
    node_name: str = ""
    pv_name: str = ""
    resource_version: str = ""


# --- parsing -------------------------------------------------------------------------------------


def pv_from_json(doc: JSON) -> PersistentVolume:
    meta = _meta(doc)
    spec = doc.get("spec") or {}
    ann = meta.get("annotations") or {}
    ref = spec.get("claimRef")
    na = (spec.get("nodeAffinity") or {}).get("required")
    csi = spec.get("csi") or {}
    return PersistentVolume(
        name=meta.get("name", ""),
        uid=meta.get("uid", ""),
        resource_version=meta.get("resourceVersion", ""),
        labels=dict(meta.get("labels") or {}),
        storage_class=ann[BETA_STORAGE_CLASS_ANNOTATION]
        if BETA_STORAGE_CLASS_ANNOTATION in ann
        else spec.get("storageClassName") or "",
        capacity=_storage_bytes(spec.get("capacity")) or 0,
        access_modes=tuple(spec.get("accessModes") or ()),
        volume_mode=spec.get("volumeMode") or FILESYSTEM,
        volume_attributes_class=spec.get("volumeAttributesClassName") or "",
        node_affinity=sel.compile_node_selector(na) if na is not None else None,
        claim_ref=ClaimRef(ref.get("namespace", ""), ref.get("name", ""), ref.get("uid", "")) if ref else None,
        phase=(doc.get("status") or {}).get("phase", ""),
        deleting=bool(meta.get("deletionTimestamp")),
        bound_by_controller=ANN_BOUND_BY_CONTROLLER in ann,
        csi_driver=csi.get("driver", ""),
        csi_handle=csi.get("volumeHandle", ""),
        raw=dict(doc),
    )


def pvc_from_json(doc: JSON) -> PersistentVolumeClaim:
    meta = _meta(doc)
    spec = doc.get("spec") or {}
    ann = meta.get("annotations") or {}
    sel = spec.get("selector")
    if BETA_STORAGE_CLASS_ANNOTATION in ann:
        cls: str | None = ann[BETA_STORAGE_CLASS_ANNOTATION]
    else:
        cls = spec.get("storageClassName")
    controller = next((o.get("uid", "") for o in meta.get("ownerReferences") or () if o.get("controller")), "")
    return PersistentVolumeClaim(
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        uid=meta.get("uid", ""),
        resource_version=meta.get("resourceVersion", ""),
        storage_class=cls,
        volume_name=spec.get("volumeName") or "",
        phase=(doc.get("status") or {}).get("phase") or CLAIM_PENDING,
        deleting=bool(meta.get("deletionTimestamp")),
        access_modes=tuple(spec.get("accessModes") or ()),
        volume_mode=spec.get("volumeMode") or FILESYSTEM,
        volume_attributes_class=spec.get("volumeAttributesClassName") or "",
        request=_storage_bytes((spec.get("resources") or {}).get("requests")),
        selector=sel.compile_selector(sel) if sel is not None else None,
        selected_node=ann.get(ANN_SELECTED_NODE),
        bind_completed=ANN_BIND_COMPLETED in ann,
        controller_uid=controller,
        raw=dict(doc),
    )


def storage_class_from_json(doc: JSON) -> StorageClass:
    meta = _meta(doc)
    terms = tuple(
        tuple(
            (str(e.get("key", "")), frozenset(str(v) for v in e.get("values") or ()))
            for e in t.get("matchLabelExpressions") or ()
        )
        for t in doc.get("allowedTopologies") or ()
    )
    return StorageClass(
        name=meta.get("name", ""),
        provisioner=doc.get("provisioner") or "",
        binding_mode=doc.get("volumeBindingMode"),
        allowed_topologies=terms,
        resource_version=meta.get("resourceVersion", ""),
    )


def csinode_from_json(doc: JSON) -> CSINode:
    meta = _meta(doc)
    drivers: dict[str, int | None] = {}
    for d in (doc.get("spec") or {}).get("drivers") or ():
        count = (d.get("allocatable") or {}).get("count")
        drivers[str(d.get("name", ""))] = int(count) if count is not None else None
    migrated = (meta.get("annotations") or {}).get(MIGRATED_PLUGINS_ANNOTATION, "")
    return CSINode(
        name=meta.get("name", ""),
        drivers=drivers,
        migrated_plugins=frozenset(p for p in migrated.split(",") if p),
        resource_version=meta.get("resourceVersion", ""),
    )


def csidriver_from_json(doc: JSON) -> CSIDriver:
    meta = _meta(doc)
    spec = doc.get("spec") or {}
    return CSIDriver(
        name=meta.get("name", ""),
        storage_capacity=bool(spec.get("storageCapacity")),
        prevent_pod_scheduling_if_missing=bool(spec.get("preventPodSchedulingIfMissing")),
        resource_version=meta.get("resourceVersion", ""),
    )


def csi_storage_capacity_from_json(doc: JSON) -> CSIStorageCapacity:
    meta = _meta(doc)
    topo = doc.get("nodeTopology")
    cap = doc.get("capacity")
    mvs = doc.get("maximumVolumeSize")
    return CSIStorageCapacity(
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        storage_class=doc.get("storageClassName") or "",
        capacity=quantity.to_int(cap) if cap is not None else None,
        maximum_volume_size=quantity.to_int(mvs) if mvs is not None else None,
        node_topology=sel.compile_selector(topo) if topo is not None else sel.NOTHING,
        resource_version=meta.get("resourceVersion", ""),
    )


def volume_attachment_from_json(doc: JSON) -> VolumeAttachment:
    meta = _meta(doc)
    spec = doc.get("spec") or {}
    return VolumeAttachment(
        name=meta.get("name", ""),
        attacher=spec.get("attacher") or "",
        node_name=spec.get("nodeName") or "",
        pv_name=(spec.get("source") or {}).get("persistentVolumeName") or "",
        resource_version=meta.get("resourceVersion", ""),
    )


# --- helpers (component-helpers/storage/volume semantics) ----------------------------------------


def pv_matches_node(pv: PersistentVolume, node_labels: Mapping[str, str]) -> bool:
    """``CheckNodeAffinity``: the PV's required node affinity against the node's labels only
    (upstream builds a node with nothing but labels, so ``matchFields`` never match)."""
    return pv.node_affinity is None or pv.node_affinity.matches("", node_labels)


def is_volume_bound_to_claim(pv: PersistentVolume, claim: PersistentVolumeClaim) -> bool:
    ref = pv.claim_ref
    if ref is None or ref.name != claim.name or ref.namespace != claim.namespace:
        return False
    return not ref.uid or ref.uid == claim.uid


def access_modes_satisfied(claim: PersistentVolumeClaim, pv: PersistentVolume) -> bool:
    return set(claim.access_modes) <= set(pv.access_modes)


def find_matching_volume(
    claim: PersistentVolumeClaim,
    volumes: Iterable[PersistentVolume],
    node_labels: Mapping[str, str],
    excluded: set[str],
) -> PersistentVolume | None:
    """The PV ``claim`` should bind to on a node with ``node_labels`` (``FindMatchingVolume`` with
    a node and delayed binding): a PV already pre-bound to the claim if its node affinity allows
    this node, else the smallest Available PV of the claim's class that is big enough, has the
    same volume mode and attributes class, matches the claim's selector, reaches the node and
    offers every access mode the claim asks for. ``excluded`` holds PVs already chosen for the
    pod's other claims."""
    requested = claim.request or 0
    wanted_class = claim.class_name
    best: PersistentVolume | None = None
    for pv in volumes:
        if pv.name in excluded:
            continue
        bound_here = is_volume_bound_to_claim(pv, claim)
        if pv.claim_ref is not None and not bound_here:
            continue
        if pv.capacity < requested or pv.volume_mode != claim.volume_mode:
            continue
        if pv.volume_attributes_class != claim.volume_attributes_class or pv.deleting:
            continue
        reaches = pv_matches_node(pv, node_labels)
        if bound_here:
            return pv if reaches else None
        if pv.phase != VOLUME_AVAILABLE:
            continue
        if claim.selector is not None and not claim.selector.matches(pv.labels):
            continue
        if pv.storage_class != wanted_class or not reaches or not access_modes_satisfied(claim, pv):
            continue
        if best is None or pv.capacity < best.capacity:
            best = pv
    return best


def topology_allows(sc: StorageClass, node_labels: Mapping[str, str]) -> bool:
    """``MatchTopologySelectorTerms``: no terms allow every node; otherwise some term must have
    every key's node label among its values."""
    if not sc.allowed_topologies:
        return True
    return any(all(node_labels.get(k) in vs for k, vs in term) for term in sc.allowed_topologies)


def pv_zone_topologies(pv: PersistentVolume) -> list[tuple[str, frozenset[str]]]:
    """VolumeZone's (label key, zones) pairs of a PV; a label whose value does not parse (an empty
    zone between delimiters) is ignored, as upstream logs and skips it."""
    out = []
    for key in TOPOLOGY_LABELS:
        value = pv.labels.get(key)
        if value is None:
            continue
        zones = [z.strip() for z in value.split(MULTI_ZONE_DELIMITER)]
        if any(not z for z in zones):
            continue
        out.append((key, frozenset(zones)))
    return out


def bind_volume_to_claim(pv: PersistentVolume, claim: PersistentVolumeClaim) -> tuple[PersistentVolume, bool]:
    """``GetBindVolumeToClaim``: a copy of ``pv`` whose claimRef names ``claim`` (and annotated
    bound-by-controller when it was not already bound to it), and whether anything changed."""
    dirty = False
    raw = copy.deepcopy(pv.raw)
    meta = raw.setdefault("metadata", {})
    spec = raw.setdefault("spec", {})
    should_mark = not is_volume_bound_to_claim(pv, claim)
    ref = pv.claim_ref
    if ref is None or (ref.name, ref.namespace, ref.uid) != (claim.name, claim.namespace, claim.uid):
        spec["claimRef"] = {
            "kind": "PersistentVolumeClaim",
            "namespace": claim.namespace,
            "name": claim.name,
            "uid": claim.uid,
            "apiVersion": "v1",
            "resourceVersion": claim.resource_version,
        }
        dirty = True
    if should_mark and not pv.bound_by_controller:
        meta.setdefault("annotations", {})[ANN_BOUND_BY_CONTROLLER] = "yes"
        dirty = True
    return pv_from_json(raw), dirty


def claim_with_selected_node(claim: PersistentVolumeClaim, node_name: str) -> PersistentVolumeClaim:
    """A copy of ``claim`` annotated ``volume.kubernetes.io/selected-node: node_name``."""
    raw = copy.deepcopy(claim.raw)
    raw.setdefault("metadata", {}).setdefault("annotations", {})[ANN_SELECTED_NODE] = node_name
    return pvc_from_json(raw)


def not_found(resource: str, name: str) -> str:
    """The API's NotFound message, which upstream's plugins pass on as their reason."""
    return f'{resource} "{name}" not found'
