"""The cluster as ``explain`` and ``simulate`` read it, and the daemon's view built from it.

A :class:`ClusterState` holds the raw API objects (JSON dicts) the scheduler's informers would see:
nodes, the assigned non-terminal pods, namespaces (for affinity ``namespaceSelector``),
PriorityClasses (to resolve ``priorityClassName`` of pods read from files, which admission has not
seen), PDBs, the Services, ReplicationControllers, ReplicaSets and StatefulSets whose selectors
make PodTopologySpread's system default constraints, and the PodGroups of both gang APIs
(:meth:`ClusterState.gang_store` gives GangScheduling its store). :func:`build_cache` turns it into the daemon's
:class:`~custom_scheduler.core.cache.Cache`, exactly as the pod and node informers would fill it, so
offline tools see what the daemon sees.

Where a state comes from is another module's business: a snapshot file
(:mod:`~custom_scheduler.tools.snapshot_file`) or a live cluster
(:mod:`~custom_scheduler.tools.live_cluster`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from custom_scheduler.api import labels
from custom_scheduler.api import podgroup as gang
from custom_scheduler.api.model import Pod, PodDisruptionBudget, node_from_json, pdb_from_json, pod_from_json
from custom_scheduler.core.cache import Cache
from custom_scheduler.framework.gang_store import GangStore
from custom_scheduler.tools.plumbing import ToolError

JSONDict = dict[str, Any]

_TERMINAL = ("Succeeded", "Failed")


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
        return {meta_of(n).get("name", "") for n in self.nodes}

    def assigned_pods(self) -> list[JSONDict]:
        """Pods the daemon's cache would hold: bound (``spec.nodeName``) and not terminal."""
        return [p for p in self.pods if spec_of(p).get("nodeName") and phase_of(p) not in _TERMINAL]

    def pending_pods(self) -> list[JSONDict]:
        return [p for p in self.pods if not spec_of(p).get("nodeName") and phase_of(p) not in _TERMINAL]

    def find_pod(self, namespace: str, name: str) -> JSONDict | None:
        for p in self.pods:
            m = meta_of(p)
            if m.get("namespace", "default") == namespace and m.get("name") == name:
                return p
        return None

    def namespace_labels(self) -> Callable[[str], Mapping[str, str] | None]:
        """The Handle's namespace-label lookup over this state's namespaces."""
        table = {meta_of(ns).get("name", ""): dict(meta_of(ns).get("labels") or {}) for ns in self.namespaces}
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
                by_kind[doc["kind"]](in_default_namespace(doc) if doc["kind"] == "PersistentVolumeClaim" else doc),
            )
        node_labels = {meta_of(n).get("name", ""): dict(meta_of(n).get("labels") or {}) for n in self.nodes}
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
            store.put(kind, by_kind[kind](in_default_namespace(doc) if kind == "ResourceClaim" else doc))
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

        return StaticSelectors(in_default_namespace(w) for w in self.workloads).for_pod


@dataclass(frozen=True, slots=True)
class GroupReport:
    """A PodGroup as both tools report it: ``explain`` for the pod's group, ``simulate`` for each
    group of the simulated pods. Each adds its own verdict to these shared facts.

    ``min_count`` is None when no such PodGroup exists; ``members`` and ``placed`` are counted as
    each tool says."""

    key: str
    api: str  # the PodGroup's apiVersion
    min_count: int | None
    members: int
    placed: int

    def _report(self, verdict: Mapping[str, Any], detail: Mapping[str, Any]) -> dict[str, Any]:
        """The JSON of the shared facts with a tool's ``verdict`` (after the group's identity) and
        ``detail`` (after the counts), in the order the reports have always had."""
        return {
            "key": self.key,
            "api": self.api,
            "minCount": self.min_count,
            **verdict,
            "members": self.members,
            "placed": self.placed,
            **detail,
        }


def meta_of(doc: Mapping[str, Any]) -> dict[str, Any]:
    """``metadata`` of a raw object, ``{}`` when missing or not a mapping (files are user input)."""
    m = doc.get("metadata")
    return m if isinstance(m, dict) else {}


def spec_of(doc: Mapping[str, Any]) -> dict[str, Any]:
    """``spec`` of a raw object, ``{}`` when missing or not a mapping."""
    s = doc.get("spec")
    return s if isinstance(s, dict) else {}


def _may_name_pod_group(doc: Mapping[str, Any]) -> bool:
    """A cheap pre-check on a pod's JSON: whether either membership field is there at all
    (:func:`~custom_scheduler.api.model.pod_from_json` decides which group it names)."""
    return bool(spec_of(doc).get("schedulingGroup")) or gang.POD_GROUP_LABEL in (meta_of(doc).get("labels") or {})


def in_default_namespace(doc: JSONDict) -> JSONDict:
    """``doc`` with ``metadata.namespace`` defaulted to ``default``, as :func:`to_pod` defaults the
    pods of files, so a Service written without a namespace still selects them."""
    if meta_of(doc).get("namespace"):
        return doc
    return {**doc, "metadata": {**meta_of(doc), "namespace": "default"}}


def phase_of(doc: Mapping[str, Any]) -> str:
    """``status.phase`` of a raw pod, ``""`` when it has none (a pod written in a file)."""
    st = doc.get("status")
    return str(st.get("phase") or "") if isinstance(st, dict) else ""


def pod_key(doc: Mapping[str, Any]) -> str:
    """``namespace/name`` of a raw pod, the namespace defaulted as :func:`to_pod` defaults it."""
    m = meta_of(doc)
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
    return gang.parse_native(doc) if "schedulingPolicy" in spec_of(doc) else gang.parse_crd(doc)


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
    spec = spec_of(doc)
    if spec.get("priority") is not None:
        return doc
    classes = list(priority_classes)
    name = spec.get("priorityClassName")
    value: int | None = None
    policy: str | None = None
    for pc in classes:
        if (name and meta_of(pc).get("name") == name) or (not name and pc.get("globalDefault")):
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
