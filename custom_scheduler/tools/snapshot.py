"""Cluster state for ``explain`` and ``simulate``: read live, from a snapshot file, or write one.

A :class:`ClusterState` holds the raw API objects (JSON dicts) the scheduler's informers would see:
nodes, the assigned non-terminal pods, namespaces (for affinity ``namespaceSelector``),
PriorityClasses (to resolve ``priorityClassName`` of pods read from files, which admission has not
seen), PDBs, the Services, ReplicationControllers, ReplicaSets and StatefulSets whose selectors
make PodTopologySpread's system default constraints, and the PodGroups of both gang APIs
(:meth:`ClusterState.gang_store` gives GangScheduling its store). :func:`build_cache` turns it into the daemon's
:class:`~custom_scheduler.core.cache.Cache`, exactly as the pod and node informers would fill it, so
offline tools see what the daemon sees.

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
``kubectl get nodes,pods -A -o yaml`` works as a snapshot too.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import logging
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import yaml

from custom_scheduler.api import labels
from custom_scheduler.api import podgroup as gang
from custom_scheduler.api.model import Pod, PodDisruptionBudget, node_from_json, pdb_from_json, pod_from_json
from custom_scheduler.core.cache import Cache
from custom_scheduler.framework.gang_store import GangStore

EXIT_OK = 0
EXIT_RUNTIME = 1
EXIT_USAGE = 2

SNAPSHOT_API_VERSION = "custom-scheduler/v1alpha1"
SNAPSHOT_KIND = "ClusterSnapshot"

#: The minimal configuration: the default profile (what the daemon runs without pluginConfig).
DEFAULT_CONFIG_TEXT = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"

#: The snapshot sections of the objects whose selectors define a pod's workload for PodTopologySpread's
#: system default constraints (the kinds of :data:`custom_scheduler.core.selectors.KINDS`).
_WORKLOAD_SECTIONS = {
    "services": "Service",
    "replicationControllers": "ReplicationController",
    "replicaSets": "ReplicaSet",
    "statefulSets": "StatefulSet",
}
_WORKLOAD_KINDS = frozenset(_WORKLOAD_SECTIONS.values())
#: The storage objects the volume plugins read (section → kind), and where the API serves them.
_STORAGE_SECTIONS = {
    "persistentVolumes": "PersistentVolume",
    "persistentVolumeClaims": "PersistentVolumeClaim",
    "storageClasses": "StorageClass",
    "csiNodes": "CSINode",
    "csiDrivers": "CSIDriver",
    "csiStorageCapacities": "CSIStorageCapacity",
    "volumeAttachments": "VolumeAttachment",
}
_STORAGE_KINDS = frozenset(_STORAGE_SECTIONS.values())
#: The DRA objects DynamicResources reads (section → kind), all served at resource.k8s.io/v1.
_DRA_SECTIONS = {
    "resourceSlices": "ResourceSlice",
    "deviceClasses": "DeviceClass",
    "resourceClaims": "ResourceClaim",
}
_DRA_KINDS = frozenset(_DRA_SECTIONS.values())
#: Both PodGroup APIs share the kind; ``apiVersion`` says which (:func:`parse_pod_group`).
_POD_GROUP_KIND = "PodGroup"
#: Where each PodGroup API is listed, and the apiVersion its (kind-less) list items get.
_POD_GROUP_APIS = ((gang.NATIVE_PATH, gang.NATIVE_GROUP_VERSION), (gang.CRD_PATH, gang.CRD_GROUP_VERSION))
_SECTION_KINDS = {
    "nodes": "Node",
    "pods": "Pod",
    "namespaces": "Namespace",
    "priorityClasses": "PriorityClass",
    "podDisruptionBudgets": "PodDisruptionBudget",
    **_WORKLOAD_SECTIONS,
    **_STORAGE_SECTIONS,
    **_DRA_SECTIONS,
    "podGroups": _POD_GROUP_KIND,
}
#: apiVersion of the kinds not in the core group (the rest are ``v1``).
_API_VERSIONS = {
    "PriorityClass": "scheduling.k8s.io/v1",
    "PodDisruptionBudget": "policy/v1",
    "ReplicaSet": "apps/v1",
    "StatefulSet": "apps/v1",
    "StorageClass": "storage.k8s.io/v1",
    "CSINode": "storage.k8s.io/v1",
    "CSIDriver": "storage.k8s.io/v1",
    "CSIStorageCapacity": "storage.k8s.io/v1",
    "VolumeAttachment": "storage.k8s.io/v1",
    **dict.fromkeys(_DRA_KINDS, "resource.k8s.io/v1"),
}
_TERMINAL = ("Succeeded", "Failed")

JSONDict = dict[str, Any]

# libyaml's parser when present: snapshots of big clusters are tens of MB.
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_DUMPER: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class ToolError(Exception):
    """Bad input (a file, a flag, a name): the CLI prints the message and exits with ``code``."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


@dataclass(slots=True)
class ClusterState:
    """Raw API objects of one cluster; ``source`` says where they came from (for reports)."""

    nodes: list[JSONDict] = field(default_factory=list)
    pods: list[JSONDict] = field(default_factory=list)
    namespaces: list[JSONDict] = field(default_factory=list)
    priority_classes: list[JSONDict] = field(default_factory=list)
    pdbs: list[JSONDict] = field(default_factory=list)
    workloads: list[JSONDict] = field(default_factory=list)  # Services, RCs, ReplicaSets, StatefulSets
    storage: list[JSONDict] = field(default_factory=list)  # PVs, PVCs, StorageClasses, CSI objects
    dra: list[JSONDict] = field(default_factory=list)  # ResourceSlices, DeviceClasses, ResourceClaims
    pod_groups: list[JSONDict] = field(default_factory=list)  # PodGroups of both APIs
    source: str = ""
    warnings: list[str] = field(default_factory=list)  # what could not be read (the tools print them)

    def node_names(self) -> set[str]:
        return {_meta(n).get("name", "") for n in self.nodes}

    def assigned_pods(self) -> list[JSONDict]:
        """Pods the daemon's cache would hold: bound (``spec.nodeName``) and not terminal."""
        return [p for p in self.pods if _spec(p).get("nodeName") and _phase(p) not in _TERMINAL]

    def pending_pods(self) -> list[JSONDict]:
        return [p for p in self.pods if not _spec(p).get("nodeName") and _phase(p) not in _TERMINAL]

    def find_pod(self, namespace: str, name: str) -> JSONDict | None:
        for p in self.pods:
            m = _meta(p)
            if m.get("namespace", "default") == namespace and m.get("name") == name:
                return p
        return None

    def namespace_labels(self) -> Callable[[str], Mapping[str, str] | None]:
        """The Handle's namespace-label lookup over this state's namespaces."""
        table = {_meta(ns).get("name", ""): dict(_meta(ns).get("labels") or {}) for ns in self.namespaces}
        return table.get

    def pdb_lister(self) -> Callable[[], list[PodDisruptionBudget]]:
        """The Handle's PDB lister over this state's PodDisruptionBudgets (preemption reads them)."""
        parsed = [pdb_from_json(d) for d in self.pdbs]
        return lambda: list(parsed)

    def volume_store(self) -> Any:
        """A :class:`~custom_scheduler.framework.volumes.VolumeStore` of this state's storage
        objects, as the daemon's informers fill it (the volume plugins read it offline)."""
        from custom_scheduler.core.informers import VOLUME_RESOURCES
        from custom_scheduler.framework.volumes import VolumeStore

        store = VolumeStore()
        by_kind = {kind: project for kind, _, project in VOLUME_RESOURCES}
        for doc in self.storage:
            store.put(
                doc["kind"],
                by_kind[doc["kind"]](_in_default_namespace(doc) if doc["kind"] == "PersistentVolumeClaim" else doc),
            )
        node_labels = {_meta(n).get("name", ""): dict(_meta(n).get("labels") or {}) for n in self.nodes}
        store.node_labels = node_labels.get
        return store

    def dra_store(self) -> Any:
        """A :class:`~custom_scheduler.framework.dra_store.DRAStore` of this state's DRA objects, as the
        daemon's informers fill it (claims' allocations mark their devices as in use)."""
        from custom_scheduler.core.informers import DRA_RESOURCES
        from custom_scheduler.framework.dra_store import DRAStore

        store = DRAStore()
        by_kind = {kind: project for kind, _, project in DRA_RESOURCES}
        for doc in self.dra:
            kind = doc["kind"]
            store.put(kind, by_kind[kind](_in_default_namespace(doc) if kind == "ResourceClaim" else doc))
        return store

    def gang_store(
        self,
        extra: Iterable[Pod] = (),
        *,
        is_placed: Callable[[str], bool] | None = None,
        pending: bool = True,
    ) -> GangStore:
        """A :class:`~custom_scheduler.framework.gang_store.GangStore` of this state's PodGroups and
        their member pods, as the daemon's PodGroup and pod informers fill it (GangScheduling's
        barrier counts members, its quorum counts placed ones).

        ``extra`` are pods the tool adds (the pod ``explain`` explains, the pods ``simulate``
        places); each replaces a state pod with its UID or ``namespace/name``, so a pod is never
        a member twice. ``pending``: whether the state's unassigned pods are members too (explain:
        yes, the daemon's queue holds them; simulate: no, it places only its pods file).
        ``is_placed`` is the cache's "assumed or bound" (bound pods count by their nodeName).
        Malformed PodGroups are skipped, as the informer skips them (:func:`load_cluster`
        refuses them in a file).
        """
        store = GangStore(is_placed=is_placed)
        for doc in self.pod_groups:
            pg = parse_pod_group(doc)
            if not isinstance(pg, gang.GroupError):
                store.put(pg)
        added = list(extra)
        taken = {p.uid for p in added} | {p.key for p in added}
        docs = self.assigned_pods() + (self.pending_pods() if pending else [])
        for doc in docs:
            if not _may_name_pod_group(doc):
                continue  # most pods: not parsed a second time (the cache parses them too)
            pod = state_pod(doc, self.priority_classes)
            if pod.pod_group and pod.uid not in taken and pod.key not in taken:
                store.member_added(pod)
        for pod in added:
            store.member_added(pod)
        return store

    def default_spread_selector(self) -> Callable[[Pod], labels.Selector | None]:
        """The Handle's workload-selector lookup over this state's Services, ReplicationControllers,
        ReplicaSets and StatefulSets: without it PodTopologySpread's system default constraints
        never apply offline, and explain/simulate would score spreading unlike the daemon."""
        from custom_scheduler.core.selectors import StaticSelectors

        return StaticSelectors(_in_default_namespace(w) for w in self.workloads).for_pod


def _meta(doc: Mapping[str, Any]) -> dict[str, Any]:
    m = doc.get("metadata")
    return m if isinstance(m, dict) else {}


def _spec(doc: Mapping[str, Any]) -> dict[str, Any]:
    s = doc.get("spec")
    return s if isinstance(s, dict) else {}


def _may_name_pod_group(doc: Mapping[str, Any]) -> bool:
    """A cheap pre-check on a pod's JSON: whether either membership field is there at all
    (:func:`~custom_scheduler.api.model.pod_from_json` decides which group it names)."""
    return bool(_spec(doc).get("schedulingGroup")) or gang.POD_GROUP_LABEL in (_meta(doc).get("labels") or {})


def _in_default_namespace(doc: JSONDict) -> JSONDict:
    """``doc`` with ``metadata.namespace`` defaulted to ``default``, as :func:`to_pod` defaults the
    pods of files, so a Service written without a namespace still selects them."""
    if _meta(doc).get("namespace"):
        return doc
    return {**doc, "metadata": {**_meta(doc), "namespace": "default"}}


def _phase(doc: Mapping[str, Any]) -> str:
    st = doc.get("status")
    return str(st.get("phase") or "") if isinstance(st, dict) else ""


def pod_key(doc: Mapping[str, Any]) -> str:
    m = _meta(doc)
    return f"{m.get('namespace') or 'default'}/{m.get('name', '')}"


# -- building the daemon's view ---------------------------------------------------------------------


def build_cache(state: ClusterState, *, exclude: Iterable[str] = ()) -> Cache:
    """A Cache filled as the informers fill the daemon's: every node, then every assigned
    non-terminal pod. ``exclude`` holds pod UIDs or ``namespace/name`` keys to leave out."""
    skip = set(exclude)
    cache = Cache()
    for doc in state.nodes:
        cache.add_node(node_from_json(doc))
    for raw in state.assigned_pods():
        pod = state_pod(raw, state.priority_classes)
        if pod.uid in skip or pod.key in skip:
            continue
        cache.add_pod(pod)
    return cache


def state_pod(raw: JSONDict, priority_classes: Iterable[Mapping[str, Any]]) -> Pod:
    """A pod of the cluster state as the informers would give it (priority resolved, UID
    defaulted), the same object for the cache and the gang store, so a UID matches in both."""
    try:
        doc = resolve_priority(raw, priority_classes)
    except ToolError:
        doc = raw  # an unknown class: admission would have refused it; priority 0 as written
    return to_pod(doc)


def parse_pod_group(doc: Mapping[str, Any]) -> gang.PodGroup | gang.GroupError:
    """A PodGroup of either API, by its ``apiVersion`` (the kind is the same). One written
    without an apiVersion is a native group when it has ``spec.schedulingPolicy`` (the CRD has no
    such field), else a scheduler-plugins one."""
    api_version = str(doc.get("apiVersion") or "")
    if api_version.startswith("scheduling.x-k8s.io/"):
        return gang.parse_crd(doc)
    if api_version.startswith("scheduling.k8s.io/"):
        return gang.parse_native(doc)
    if api_version:
        return gang.GroupError(pod_key(doc), f"unknown PodGroup apiVersion {api_version!r}")
    return gang.parse_native(doc) if "schedulingPolicy" in _spec(doc) else gang.parse_crd(doc)


def to_pod(doc: Mapping[str, Any], *, default_uid: str = "") -> Pod:
    """``pod_from_json`` with the defaults a file may omit: namespace ``default`` and a UID."""
    pod = pod_from_json(doc)
    if not pod.namespace:
        pod.namespace = "default"
    if not pod.uid:
        pod.uid = default_uid or f"file:{pod.namespace}/{pod.name}"
    return pod


def resolve_priority(doc: JSONDict, priority_classes: Iterable[Mapping[str, Any]]) -> JSONDict:
    """Fill ``spec.priority`` as the Priority admission plugin would, for pods that did not pass
    admission (files): from ``priorityClassName``, else the global default class, else 0."""
    spec = _spec(doc)
    if spec.get("priority") is not None:
        return doc
    classes = list(priority_classes)
    name = spec.get("priorityClassName")
    value: int | None = None
    policy: str | None = None
    for pc in classes:
        if (name and _meta(pc).get("name") == name) or (not name and pc.get("globalDefault")):
            value = int(pc.get("value") or 0)
            policy = pc.get("preemptionPolicy")
            break
    if name and value is None and name not in ("system-cluster-critical", "system-node-critical"):
        raise ToolError(f"pod {pod_key(doc)}: priorityClassName {name!r} is not in the cluster's PriorityClasses")
    if value is None:
        value = {"system-cluster-critical": 2000000000, "system-node-critical": 2000001000}.get(name or "", 0)
    out = copy.deepcopy(doc)
    out.setdefault("spec", {})["priority"] = value
    if policy and not spec.get("preemptionPolicy"):
        out["spec"]["preemptionPolicy"] = policy
    return out


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
        sections = [s for s in _SECTION_KINDS if s in obj]
        if sections and k in (None, SNAPSHOT_KIND):
            for s in sections:
                if obj[s] is None:
                    continue  # an empty section (``pods:`` with no items)
                if not isinstance(obj[s], list):
                    raise ToolError(f"{what} {path}: {s}: expected a list, found {type(obj[s]).__name__}")
                add(obj[s], f"{where}.{s}" if where else s, _SECTION_KINDS[s])
            return
        kind_of = k if isinstance(k, str) and k else kind
        if not kind_of:
            raise ToolError(f"{what} {path}: {where or 'document'}: object without a kind")
        if not isinstance(obj.get("metadata"), dict) or not _meta(obj).get("name"):
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
        elif kind in _WORKLOAD_KINDS:
            state.workloads.append(obj)
        elif kind in _STORAGE_KINDS:
            state.storage.append(obj)
        elif kind in _DRA_KINDS:
            state.dra.append(obj)
        elif kind == _POD_GROUP_KIND:
            pg = parse_pod_group(_in_default_namespace(obj))
            if isinstance(pg, gang.GroupError):
                raise ToolError(f"cluster snapshot {path}: {pg}")
            state.pod_groups.append(_in_default_namespace(obj))
    if not state.nodes:
        raise ToolError(f"cluster snapshot {path}: no Node objects found")
    names = [_meta(n)["name"] for n in state.nodes]
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
                f"pods file {path}: object {i} ({obj['kind']} {_meta(obj).get('name')}) is not a Pod; "
                "only Pods can be simulated (render controllers' pod templates as Pods first)"
            )
        pods.append(obj)
    return pods


# -- reading a live cluster -------------------------------------------------------------------------


def connect(kubeconfig: str | None, config_kubeconfig: str = "") -> Any:
    """A KubeClient for explain/snapshot (reads only; no client-side rate limit)."""
    from custom_scheduler.kube.client import KubeClient

    path = kubeconfig if kubeconfig is not None else config_kubeconfig
    try:
        return KubeClient.from_kubeconfig(path or "", qps=0, burst=1)
    except Exception as e:  # the kubernetes package raises assorted types for bad kubeconfigs
        where = path or "$KUBECONFIG / ~/.kube/config / in-cluster"
        raise ToolError(f"cannot load cluster credentials from {where}: {e}") from None


def list_all(client: Any, path: str, query: Mapping[str, Any] | None = None) -> list[JSONDict]:
    """Every item of a LIST, following ``continue`` tokens."""
    items: list[JSONDict] = []
    cont = ""
    while True:
        q = {"limit": 500, **(query or {})}
        if cont:
            q["continue"] = cont
        doc = client.get(path, q)
        items.extend(doc.get("items") or [])
        cont = (doc.get("metadata") or {}).get("continue") or ""
        if not cont:
            return items


def fetch_live(client: Any) -> ClusterState:
    """LIST nodes, non-terminal pods, namespaces, PriorityClasses, PDBs and workloads (Services,
    ReplicationControllers, ReplicaSets, StatefulSets) from the API server.

    Raises :class:`~custom_scheduler.kube.api_errors.KubeError` on failures of the first three;
    PriorityClasses and PDBs are optional (a forbidden or missing API leaves the list empty), and so
    are the workloads, whose failures are also kept in ``warnings``.
    """
    from custom_scheduler.core.informers import POD_FIELD_SELECTOR
    from custom_scheduler.kube import api_errors as kerrors

    state = ClusterState(source=f"live {getattr(client, 'host', '')}".strip())
    state.nodes = [_with_kind(n, "Node") for n in list_all(client, "/api/v1/nodes")]
    state.pods = [_with_kind(p, "Pod") for p in list_all(client, "/api/v1/pods", {"fieldSelector": POD_FIELD_SELECTOR})]
    state.namespaces = [_with_kind(n, "Namespace") for n in list_all(client, "/api/v1/namespaces")]
    try:
        pcs = list_all(client, "/apis/scheduling.k8s.io/v1/priorityclasses")
    except kerrors.ApiError:
        pcs = []
    state.priority_classes = [_with_kind(pc, "PriorityClass") for pc in pcs]
    try:
        pdbs = list_all(client, "/apis/policy/v1/poddisruptionbudgets")
    except kerrors.ApiError:
        pdbs = []
    state.pdbs = [_with_kind(b, "PodDisruptionBudget") for b in pdbs]
    _fetch_workloads(client, state)
    _fetch_storage(client, state)
    _fetch_dra(client, state)
    _fetch_pod_groups(client, state)
    return state


def _fetch_pod_groups(client: Any, state: ClusterState) -> None:
    """Add the PodGroups of both APIs. An API the server does not serve (404: a server before
    1.37 or without the GenericWorkload gate, or no scheduler-plugins CRD) is skipped silently, as
    the daemon's informers wait for it; another failure (RBAC) is a warning, since GangScheduling
    then sees no group and holds its members back. Malformed groups are warned about and skipped,
    as the informers skip them."""
    from custom_scheduler.kube import api_errors as kerrors

    for path, api_version in _POD_GROUP_APIS:
        try:
            items = list_all(client, path)
        except kerrors.NotFound:
            continue
        except kerrors.KubeError as e:
            state.warnings.append(f"cannot list {api_version} podgroups ({e}); GangScheduling sees none of them")
            continue
        for o in items:
            o.setdefault("kind", _POD_GROUP_KIND)
            o.setdefault("apiVersion", api_version)
            pg = parse_pod_group(o)
            if isinstance(pg, gang.GroupError):
                state.warnings.append(f"skipped a malformed {api_version} {pg}")
                continue
            state.pod_groups.append(o)


def _fetch_dra(client: Any, state: ClusterState) -> None:
    """Add ResourceSlices, DeviceClasses and ResourceClaims; a kind that cannot be listed (no
    RBAC, or a server without resource.k8s.io/v1) is skipped with a warning."""
    from custom_scheduler.core.informers import DRA_RESOURCES
    from custom_scheduler.kube import api_errors as kerrors

    for kind, path, _ in DRA_RESOURCES:
        try:
            items = list_all(client, path)
        except kerrors.KubeError as e:
            state.warnings.append(f"cannot list {path.rsplit('/', 1)[1]} ({e}); DynamicResources sees none")
            continue
        state.dra.extend(_with_kind(o, kind) for o in items)


def _fetch_storage(client: Any, state: ClusterState) -> None:
    """Add PVs, PVCs, StorageClasses and CSI objects; a kind that cannot be listed is skipped with
    a warning (the volume plugins then see none of it, as a daemon without that RBAC would)."""
    from custom_scheduler.core.informers import VOLUME_RESOURCES
    from custom_scheduler.kube import api_errors as kerrors

    for kind, path, _ in VOLUME_RESOURCES:
        try:
            items = list_all(client, path)
        except kerrors.KubeError as e:
            state.warnings.append(f"cannot list {path.rsplit('/', 1)[1]} ({e}); the volume plugins see none")
            continue
        state.storage.extend(_with_kind(o, kind) for o in items)


def _fetch_workloads(client: Any, state: ClusterState) -> None:
    """Add the objects of every workload kind to ``state``. A kind that cannot be listed (RBAC
    forbids it, the API fails) is skipped with a warning rather than failing the tool: the report
    is still right except for PodTopologySpread's default spreading, which the warning names."""
    from custom_scheduler.core.selectors import KINDS, SOURCES
    from custom_scheduler.kube import api_errors as kerrors

    for kind, source in KINDS.items():
        try:
            items = list_all(client, SOURCES[source][0])
        except kerrors.KubeError as e:
            state.warnings.append(
                f"cannot list {source} ({e}); PodTopologySpread's default spreading ignores them, "
                "so its scores may differ from the daemon's"
            )
            continue
        state.workloads.extend(_with_kind(w, kind) for w in items)


def _with_kind(doc: JSONDict, kind: str) -> JSONDict:
    doc.setdefault("kind", kind)
    doc.setdefault("apiVersion", _API_VERSIONS.get(kind, "v1"))
    return doc


def print_warnings(tool: str, state: ClusterState) -> None:
    """What :func:`fetch_live` had to leave out, on stderr (stdout carries only the report)."""
    for w in state.warnings:
        print(f"custom-scheduler {tool}: warning: {w}", file=sys.stderr)


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
    spec = {k: copy.deepcopy(v) for k, v in _spec(doc).items() if k in ("taints", "unschedulable") and v}
    status = doc.get("status") or {}
    st = {k: copy.deepcopy(status[k]) for k in ("capacity", "allocatable", "images") if status.get(k)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": _strip_meta(_meta(doc), ("name", "uid", "labels")),
        "spec": spec,
        "status": st,
    }


def strip_pod(doc: Mapping[str, Any]) -> JSONDict:
    """A Pod with its scheduling-relevant spec (containers reduced to image, resources and ports)
    and the status fields preemption reads; managedFields, env, probes and the rest are dropped."""
    spec = copy.deepcopy(_spec(doc))
    for key in ("containers", "initContainers"):
        if key in spec:
            spec[key] = [{k: c[k] for k in _CONTAINER_KEEP if k in c} for c in spec[key] or ()]
    spec.pop("ephemeralContainers", None)
    status = doc.get("status") or {}
    st: JSONDict = {k: status[k] for k in ("phase", "nominatedNodeName", "startTime") if status.get(k)}
    conds = [c for c in status.get("conditions") or () if c.get("type") == "DisruptionTarget"]
    if conds:
        st["conditions"] = conds
    return {"apiVersion": "v1", "kind": "Pod", "metadata": _strip_meta(_meta(doc)), "spec": spec, "status": st}


def strip_namespace(doc: Mapping[str, Any]) -> JSONDict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": _strip_meta(_meta(doc), ("name", "labels"))}


def strip_priority_class(doc: Mapping[str, Any]) -> JSONDict:
    out: JSONDict = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": _meta(doc).get("name", "")},
    }
    out.update({k: doc[k] for k in ("value", "globalDefault", "preemptionPolicy") if k in doc})
    return out


def strip_pdb(doc: Mapping[str, Any]) -> JSONDict:
    status = doc.get("status") or {}
    st = {k: status[k] for k in ("disruptionsAllowed", "disruptedPods") if status.get(k) is not None}
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _strip_meta(_meta(doc), ("name", "namespace", "uid")),
        "spec": copy.deepcopy(_spec(doc)),
        "status": st,
    }


def strip_workload(doc: Mapping[str, Any]) -> JSONDict:
    """A Service, ReplicationController, ReplicaSet or StatefulSet reduced to its selector: all that
    PodTopologySpread's default constraints read of it (a ReplicaSet's pod template is most of it)."""
    kind = str(doc.get("kind") or "")
    meta = _meta(doc)
    out: JSONDict = {
        "apiVersion": _API_VERSIONS.get(kind, "v1"),
        "kind": kind,
        "metadata": {k: meta[k] for k in ("name", "namespace") if meta.get(k)},
    }
    selector = _spec(doc).get("selector")
    if selector is not None:
        out["spec"] = {"selector": copy.deepcopy(selector)}
    return out


def _workload_sections(state: ClusterState) -> JSONDict:
    """The workload sections of a snapshot, each sorted by namespace and name."""
    stripped = sorted(
        (strip_workload(w) for w in state.workloads),
        key=lambda w: (w["metadata"].get("namespace", ""), w["metadata"].get("name", "")),
    )
    return {section: [w for w in stripped if w["kind"] == kind] for section, kind in _WORKLOAD_SECTIONS.items()}


def snapshot_document(state: ClusterState) -> JSONDict:
    """The snapshot file's content: nodes, the assigned non-terminal pods on them, namespaces,
    PriorityClasses, PodDisruptionBudgets and the workloads' selectors; sorted by name so two
    snapshots of one cluster diff cleanly."""
    names = state.node_names()
    nodes = sorted((strip_node(n) for n in state.nodes), key=lambda n: n["metadata"]["name"])
    pods = sorted(
        (strip_pod(p) for p in state.assigned_pods() if _spec(p).get("nodeName") in names),
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
        **_workload_sections(state),
        **_storage_sections(state),
        **_dra_sections(state),
        "podGroups": sorted(
            (strip_storage(o) for o in state.pod_groups),
            key=lambda o: (str(o.get("apiVersion", "")), _meta(o).get("namespace", ""), _meta(o).get("name", "")),
        ),
    }


def strip_storage(doc: Mapping[str, Any]) -> JSONDict:
    """A storage object without managedFields (everything else may matter to a volume plugin)."""
    out = copy.deepcopy(dict(doc))
    out.get("metadata", {}).pop("managedFields", None)
    return out


def _storage_sections(state: ClusterState) -> JSONDict:
    def key(o: Mapping[str, Any]) -> tuple[str, str]:
        return (_meta(o).get("namespace", ""), _meta(o).get("name", ""))

    objs = sorted((strip_storage(o) for o in state.storage), key=key)
    return {section: [o for o in objs if o["kind"] == kind] for section, kind in _STORAGE_SECTIONS.items()}


def _dra_sections(state: ClusterState) -> JSONDict:
    def key(o: Mapping[str, Any]) -> tuple[str, str]:
        return (_meta(o).get("namespace", ""), _meta(o).get("name", ""))

    objs = sorted((strip_storage(o) for o in state.dra), key=key)
    return {section: [o for o in objs if o["kind"] == kind] for section, kind in _DRA_SECTIONS.items()}


def dump_yaml(doc: Any) -> str:
    out: str = yaml.dump(doc, Dumper=_DUMPER, sort_keys=False, default_flow_style=False, allow_unicode=True, width=120)
    return out


def write_text(path: str, text: str) -> None:
    if path == "-":
        sys.stdout.write(text)
        return
    try:
        parent = os.path.dirname(os.path.abspath(path))
        os.makedirs(parent, exist_ok=True)
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as e:
        raise ToolError(f"cannot write {path}: {e}") from None


# -- process set-up ----------------------------------------------------------------------------------


@contextlib.contextmanager
def quiet_logs() -> Iterator[None]:
    """While a tool runs, plugins' log lines (e.g. preemption's plans) go to stderr at WARNING
    (``LOG_LEVEL`` overrides), so stdout carries only the report; the previous set-up is restored."""
    import structlog

    was_configured = structlog.is_configured()
    saved = structlog.get_config()
    level = logging.getLevelNamesMapping().get((os.environ.get("LOG_LEVEL") or "warning").upper(), logging.WARNING)
    structlog.configure(
        processors=[structlog.processors.add_log_level, structlog.dev.ConsoleRenderer(colors=False)],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=False,
    )
    try:
        yield
    finally:
        if was_configured:
            structlog.configure(**saved)
        else:
            structlog.reset_defaults()


# -- configuration ----------------------------------------------------------------------------------


def load_scheduler_config(path: str | None, registry: Any) -> Any:
    """The SchedulerConfig of ``path``, or the default profile's when None; ToolError listing every
    field error otherwise."""
    from custom_scheduler import config
    from custom_scheduler.errors import ConfigError

    try:
        if path is None:
            return config.load_config(DEFAULT_CONFIG_TEXT, registry)
        if not os.path.exists(path):
            raise ToolError(f"config {path}: no such file")
        return config.load_config_file(path, registry)
    except ConfigError as e:
        lines = "\n".join(f"  {err}" for err in e.errors)
        raise ToolError(f"invalid configuration {path}:\n{lines}") from None


# -- the command ------------------------------------------------------------------------------------


def cmd_snapshot(args: argparse.Namespace) -> int:
    from custom_scheduler.kube import api_errors as kerrors

    try:
        with quiet_logs():
            client = connect(args.kubeconfig)
            state = fetch_live(client)
            print_warnings("snapshot", state)
            doc = snapshot_document(state)
            write_text(args.output, dump_yaml(doc))
    except ToolError as e:
        print(f"custom-scheduler snapshot: {e}", file=sys.stderr)
        return e.code
    except kerrors.KubeError as e:
        print(f"custom-scheduler snapshot: reading the cluster failed: {e}", file=sys.stderr)
        return EXIT_RUNTIME
    if args.output != "-":
        print(
            f"wrote {args.output}: {len(doc['nodes'])} nodes, {len(doc['pods'])} pods, "
            f"{len(doc['namespaces'])} namespaces, {len(doc['priorityClasses'])} priority classes, "
            f"{sum(len(doc[s]) for s in _WORKLOAD_SECTIONS)} workloads, {len(doc['podGroups'])} pod groups",
            file=sys.stderr,
        )
    return EXIT_OK
