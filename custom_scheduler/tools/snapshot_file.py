"""The snapshot file: its sections, reading it (and other YAML of API objects), writing it.

``custom-scheduler snapshot -o FILE`` writes one YAML document::

    apiVersion: custom-scheduler/v1alpha1
    kind: ClusterSnapshot
    nodes: [...]            # Node objects: labels, taints, unschedulable, capacity/allocatable, images
    pods: [...]             # assigned, non-terminal pods on those nodes (scheduling-relevant fields)
    namespaces: [...]       # names and labels
    priorityClasses: [...]  # name, value, globalDefault, preemptionPolicy
    podDisruptionBudgets: [...]  # selector and status.disruptionsAllowed (preemption reads them)
    services: [...]                # name, namespace and spec.selector (PodTopologySpread's
    replicationControllers: [...]  # default constraints spread the pods one workload selects);
    replicaSets: [...]             # the same for these three
    statefulSets: [...]
    resourceSlices: [...]          # DRA: the devices drivers publish, DeviceClasses and
    deviceClasses: [...]           # ResourceClaims (allocated ones mark their devices used)
    resourceClaims: [...]
    podGroups: [...]               # PodGroups of scheduling.k8s.io/v1beta1 and of scheduler-plugins'
                                   # scheduling.x-k8s.io/v1alpha1 (told apart by apiVersion)

Every section is optional: a snapshot written before the workload sections existed still loads, and
its pods are then spread as if no workload selected them.

Readers (:func:`load_cluster`, :func:`load_pods`) also accept a ``v1 List``, a plain YAML list, a
multi-document stream of objects, or any document with ``nodes:``/``pods:`` keys, so the output of
``kubectl get nodes,pods -A -o yaml`` works as a snapshot too. Writing keeps what scheduling reads
of each object (:func:`snapshot_document`), sorted, so two snapshots of one cluster diff cleanly.
"""

from __future__ import annotations

import copy
import os
import sys
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

import yaml

from custom_scheduler.api import podgroup as gang
from custom_scheduler.tools.cluster_state import (
    ClusterState,
    JSONDict,
    in_default_namespace,
    meta_of,
    parse_pod_group,
    spec_of,
)
from custom_scheduler.tools.plumbing import ToolError

SNAPSHOT_API_VERSION = "custom-scheduler/v1alpha1"
SNAPSHOT_KIND = "ClusterSnapshot"

#: The snapshot sections of the objects whose selectors define a pod's workload for PodTopologySpread's
#: system default constraints (the kinds of :data:`custom_scheduler.core.selectors.KINDS`).
WORKLOAD_SECTIONS = {
    "services": "Service",
    "replicationControllers": "ReplicationController",
    "replicaSets": "ReplicaSet",
    "statefulSets": "StatefulSet",
}
WORKLOAD_KINDS = frozenset(WORKLOAD_SECTIONS.values())
#: The storage objects the volume plugins read (section → kind), and where the API serves them.
STORAGE_SECTIONS = {
    "persistentVolumes": "PersistentVolume",
    "persistentVolumeClaims": "PersistentVolumeClaim",
    "storageClasses": "StorageClass",
    "csiNodes": "CSINode",
    "csiDrivers": "CSIDriver",
    "csiStorageCapacities": "CSIStorageCapacity",
    "volumeAttachments": "VolumeAttachment",
}
STORAGE_KINDS = frozenset(STORAGE_SECTIONS.values())
#: The DRA objects DynamicResources reads (section → kind), all served at resource.k8s.io/v1.
DRA_SECTIONS = {
    "resourceSlices": "ResourceSlice",
    "deviceClasses": "DeviceClass",
    "resourceClaims": "ResourceClaim",
}
DRA_KINDS = frozenset(DRA_SECTIONS.values())
#: Both PodGroup APIs share the kind; ``apiVersion`` says which (:func:`parse_pod_group`).
POD_GROUP_KIND = "PodGroup"
#: Every section and the kind of its objects.
SECTION_KINDS = {
    "nodes": "Node",
    "pods": "Pod",
    "namespaces": "Namespace",
    "priorityClasses": "PriorityClass",
    "podDisruptionBudgets": "PodDisruptionBudget",
    **WORKLOAD_SECTIONS,
    **STORAGE_SECTIONS,
    **DRA_SECTIONS,
    "podGroups": POD_GROUP_KIND,
}
#: apiVersion of the kinds not in the core group (the rest are ``v1``).
API_VERSIONS = {
    "PriorityClass": "scheduling.k8s.io/v1",
    "PodDisruptionBudget": "policy/v1",
    "ReplicaSet": "apps/v1",
    "StatefulSet": "apps/v1",
    "StorageClass": "storage.k8s.io/v1",
    "CSINode": "storage.k8s.io/v1",
    "CSIDriver": "storage.k8s.io/v1",
    "CSIStorageCapacity": "storage.k8s.io/v1",
    "VolumeAttachment": "storage.k8s.io/v1",
    **dict.fromkeys(DRA_KINDS, "resource.k8s.io/v1"),
}

# libyaml's parser when present: snapshots of big clusters are tens of MB.
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_DUMPER: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


# -- reading files ----------------------------------------------------------------------------------


def _read_yaml_stream(path: str, what: str) -> list[Any]:
    if path == "-":
        text = sys.stdin.read()
    else:
        if not os.path.exists(path):
            raise ToolError(f"{what} {path}: no such file")
        if os.path.isdir(path):
            raise ToolError(f"{what} {path}: is a directory, expected a YAML file")
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise ToolError(f"{what} {path}: cannot read: {e}") from None
    try:
        return [d for d in yaml.load_all(text, Loader=_LOADER) if d is not None]
    except yaml.YAMLError as e:
        raise ToolError(f"{what} {path}: invalid YAML: {e}") from None


def load_objects(path: str, what: str = "file", default_kind: str = "") -> list[JSONDict]:
    """Every API object in a YAML/JSON file, Lists and snapshot sections flattened; each gets a
    ``kind`` (``default_kind`` for objects that name none)."""
    out: list[JSONDict] = []

    def add(obj: Any, where: str, kind: str) -> None:
        if isinstance(obj, list):
            for i, item in enumerate(obj):
                add(item, f"{where}[{i}]", kind)
            return
        if not isinstance(obj, dict):
            raise ToolError(f"{what} {path}: {where}: expected an object, found {type(obj).__name__}")
        k = obj.get("kind")
        if isinstance(k, str) and k.endswith("List") and isinstance(obj.get("items"), list):
            add(obj["items"], f"{where}.items", kind)
            return
        sections = [s for s in SECTION_KINDS if s in obj]
        if sections and k in (None, SNAPSHOT_KIND):
            for s in sections:
                if obj[s] is None:
                    continue  # an empty section (``pods:`` with no items)
                if not isinstance(obj[s], list):
                    raise ToolError(f"{what} {path}: {s}: expected a list, found {type(obj[s]).__name__}")
                add(obj[s], f"{where}.{s}" if where else s, SECTION_KINDS[s])
            return
        kind_of = k if isinstance(k, str) and k else kind
        if not kind_of:
            raise ToolError(f"{what} {path}: {where or 'document'}: object without a kind")
        if not isinstance(obj.get("metadata"), dict) or not meta_of(obj).get("name"):
            raise ToolError(f"{what} {path}: {where or 'document'}: {kind_of} without metadata.name")
        o = dict(obj)
        o["kind"] = kind_of
        out.append(o)

    for i, doc in enumerate(_read_yaml_stream(path, what)):
        add(doc, f"document {i}" if i else "", default_kind)
    return out


def load_cluster(path: str) -> ClusterState:
    """A snapshot file (see the module docstring) as a :class:`ClusterState`."""
    state = ClusterState(source=f"snapshot {path}")
    for obj in load_objects(path, "cluster snapshot"):
        kind = obj["kind"]
        if kind == "Node":
            state.nodes.append(obj)
        elif kind == "Pod":
            state.pods.append(obj)
        elif kind == "Namespace":
            state.namespaces.append(obj)
        elif kind == "PriorityClass":
            state.priority_classes.append(obj)
        elif kind == "PodDisruptionBudget":
            state.pdbs.append(obj)
        elif kind in WORKLOAD_KINDS:
            state.workloads.append(obj)
        elif kind in STORAGE_KINDS:
            state.storage.append(obj)
        elif kind in DRA_KINDS:
            state.dra.append(obj)
        elif kind == POD_GROUP_KIND:
            pg = parse_pod_group(in_default_namespace(obj))
            if isinstance(pg, gang.GroupError):
                raise ToolError(f"cluster snapshot {path}: {pg}")
            state.pod_groups.append(in_default_namespace(obj))
    if not state.nodes:
        raise ToolError(f"cluster snapshot {path}: no Node objects found")
    names = [meta_of(n)["name"] for n in state.nodes]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ToolError(f"cluster snapshot {path}: duplicate node(s) {', '.join(sorted(dup))}")
    return state


def load_pods(path: str) -> list[JSONDict]:
    """The Pod objects of a file, in file order (the order simulate queues equal priorities)."""
    pods = []
    for i, obj in enumerate(load_objects(path, "pods file", default_kind="Pod")):
        if obj["kind"] != "Pod":
            raise ToolError(
                f"pods file {path}: object {i} ({obj['kind']} {meta_of(obj).get('name')}) is not a Pod; "
                "only Pods can be simulated (render controllers' pod templates as Pods first)"
            )
        pods.append(obj)
    return pods


# -- writing snapshots ------------------------------------------------------------------------------

_META_KEEP = ("name", "namespace", "uid", "labels", "creationTimestamp", "deletionTimestamp", "ownerReferences")
_CONTAINER_KEEP = ("name", "image", "resources", "ports", "restartPolicy")


def _strip_meta(meta: Mapping[str, Any], keep: Iterable[str] = _META_KEEP) -> JSONDict:
    out = {k: copy.deepcopy(meta[k]) for k in keep if meta.get(k) not in (None, "", {}, [])}
    ann = {k: v for k, v in (meta.get("annotations") or {}).items() if "scheduler" in k}
    if ann:
        out["annotations"] = ann
    return out


def strip_node(doc: Mapping[str, Any]) -> JSONDict:
    """A Node with what scheduling reads: labels, taints, unschedulable, capacity, images."""
    spec = {k: copy.deepcopy(v) for k, v in spec_of(doc).items() if k in ("taints", "unschedulable") and v}
    status = doc.get("status") or {}
    st = {k: copy.deepcopy(status[k]) for k in ("capacity", "allocatable", "images") if status.get(k)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": _strip_meta(meta_of(doc), ("name", "uid", "labels")),
        "spec": spec,
        "status": st,
    }


def strip_pod(doc: Mapping[str, Any]) -> JSONDict:
    """A Pod with its scheduling-relevant spec (containers reduced to image, resources and ports)
    and the status fields preemption reads; managedFields, env, probes and the rest are dropped."""
    spec = copy.deepcopy(spec_of(doc))
    for key in ("containers", "initContainers"):
        if key in spec:
            spec[key] = [{k: c[k] for k in _CONTAINER_KEEP if k in c} for c in spec[key] or ()]
    spec.pop("ephemeralContainers", None)
    status = doc.get("status") or {}
    st: JSONDict = {k: status[k] for k in ("phase", "nominatedNodeName", "startTime") if status.get(k)}
    conds = [c for c in status.get("conditions") or () if c.get("type") == "DisruptionTarget"]
    if conds:
        st["conditions"] = conds
    return {"apiVersion": "v1", "kind": "Pod", "metadata": _strip_meta(meta_of(doc)), "spec": spec, "status": st}


def strip_namespace(doc: Mapping[str, Any]) -> JSONDict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": _strip_meta(meta_of(doc), ("name", "labels"))}


def strip_priority_class(doc: Mapping[str, Any]) -> JSONDict:
    out: JSONDict = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": meta_of(doc).get("name", "")},
    }
    out.update({k: doc[k] for k in ("value", "globalDefault", "preemptionPolicy") if k in doc})
    return out


def strip_pdb(doc: Mapping[str, Any]) -> JSONDict:
    status = doc.get("status") or {}
    st = {k: status[k] for k in ("disruptionsAllowed", "disruptedPods") if status.get(k) is not None}
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _strip_meta(meta_of(doc), ("name", "namespace", "uid")),
        "spec": copy.deepcopy(spec_of(doc)),
        "status": st,
    }


def strip_workload(doc: Mapping[str, Any]) -> JSONDict:
    """A Service, ReplicationController, ReplicaSet or StatefulSet reduced to its selector: all that
    PodTopologySpread's default constraints read of it (a ReplicaSet's pod template is most of it)."""
    kind = str(doc.get("kind") or "")
    meta = meta_of(doc)
    out: JSONDict = {
        "apiVersion": API_VERSIONS.get(kind, "v1"),
        "kind": kind,
        "metadata": {k: meta[k] for k in ("name", "namespace") if meta.get(k)},
    }
    selector = spec_of(doc).get("selector")
    if selector is not None:
        out["spec"] = {"selector": copy.deepcopy(selector)}
    return out


def _by_section(objs: Iterable[JSONDict], sections: Mapping[str, str]) -> JSONDict:
    """``objs`` split into ``sections`` (section → kind), each sorted by namespace and name."""
    ordered = sorted(objs, key=lambda o: (meta_of(o).get("namespace", ""), meta_of(o).get("name", "")))
    return {section: [o for o in ordered if o["kind"] == kind] for section, kind in sections.items()}


def snapshot_document(state: ClusterState) -> JSONDict:
    """The snapshot file's content: nodes, the assigned non-terminal pods on them, namespaces,
    PriorityClasses, PodDisruptionBudgets and the workloads' selectors; sorted by name so two
    snapshots of one cluster diff cleanly."""
    names = state.node_names()
    nodes = sorted((strip_node(n) for n in state.nodes), key=lambda n: n["metadata"]["name"])
    pods = sorted(
        (strip_pod(p) for p in state.assigned_pods() if spec_of(p).get("nodeName") in names),
        key=lambda p: (p["spec"]["nodeName"], p["metadata"].get("namespace", ""), p["metadata"]["name"]),
    )
    namespaces = sorted((strip_namespace(n) for n in state.namespaces), key=lambda n: n["metadata"]["name"])
    pcs = sorted((strip_priority_class(pc) for pc in state.priority_classes), key=lambda pc: pc["metadata"]["name"])
    pdbs = sorted(
        (strip_pdb(b) for b in state.pdbs), key=lambda b: (b["metadata"].get("namespace", ""), b["metadata"]["name"])
    )
    return {
        "apiVersion": SNAPSHOT_API_VERSION,
        "kind": SNAPSHOT_KIND,
        "metadata": {
            "creationTimestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "source": state.source,
        },
        "nodes": nodes,
        "pods": pods,
        "namespaces": namespaces,
        "priorityClasses": pcs,
        "podDisruptionBudgets": pdbs,
        **_by_section(map(strip_workload, state.workloads), WORKLOAD_SECTIONS),
        **_by_section(map(strip_storage, state.storage), STORAGE_SECTIONS),
        **_by_section(map(strip_storage, state.dra), DRA_SECTIONS),
        "podGroups": sorted(
            (strip_storage(o) for o in state.pod_groups),
            key=lambda o: (str(o.get("apiVersion", "")), meta_of(o).get("namespace", ""), meta_of(o).get("name", "")),
        ),
    }


def strip_storage(doc: Mapping[str, Any]) -> JSONDict:
    """A storage object without managedFields (everything else may matter to a volume plugin)."""
    out = copy.deepcopy(dict(doc))
    out.get("metadata", {}).pop("managedFields", None)
    return out


def dump_yaml(doc: Any) -> str:
    out: str = yaml.dump(doc, Dumper=_DUMPER, sort_keys=False, default_flow_style=False, allow_unicode=True, width=120)
    return out
