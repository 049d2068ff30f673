"""Compact, typed views of Pods and Nodes, projected straight from the API server's JSON.

Why not the client's model classes: building a ``V1Pod`` costs about a millisecond and several times
the memory of the few fields a scheduler reads (../shared/docs/python-client.md §3). The informers
parse each object once with orjson and keep only these slotted structs; everything downstream (the
cache, the plugins, explain and simulate) reads them.

What is kept is what kube-scheduler's default plugins read: requests (computed once, with init
containers, sidecars and overhead, by :mod:`custom_scheduler.api.resources`), host ports,
tolerations, node selector and affinity, topology spread constraints, labels, priority, images.
Raw sub-documents that plugins parse further (``affinity``, ``topologySpreadConstraints``) are
kept as the small dicts they are.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from custom_scheduler.api.dra_extended import ContainerRequests, container_requests, is_extended_resource_name
from custom_scheduler.api.node_features import declared_features, infer_for_scheduling
from custom_scheduler.api.resources import (
    DEFAULT_MEMORY_REQUEST,
    DEFAULT_MILLI_CPU_REQUEST,
    JSON,
    Requests,
    Resources,
    pod_requests,
)

#: The label that makes a pod a member of a scheduler-plugins PodGroup (see custom_scheduler.api.podgroup).
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        """Whether this toleration matches ``taint`` (core/v1 ``Toleration.ToleratesTaint``)."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if not self.key and self.operator != "Exists":
            # An empty key matches every key only together with operator Exists.
            return False
        if self.operator == "Exists":
            return True
        return self.operator in ("Equal", "") and self.value == taint.value


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = ""

    def __str__(self) -> str:
        return f"{{{self.key}: {self.value}}}"


def tolerates_all(tolerations: tuple[Toleration, ...], taint: Taint) -> bool:
    return any(t.tolerates(taint) for t in tolerations)


@dataclass(frozen=True, slots=True)
class PodResourceClaim:
    """One entry of ``spec.resourceClaims`` (DRA), with the claim it names resolved.

    ``claim`` is ``resourceClaimName``, or for a ``resourceClaimTemplateName`` the name the
    resourceclaim controller recorded in ``status.resourceClaimStatuses`` ("" until it did:
    ``resolved`` False). It is part of the pod's spec signature on purpose: the controller's
    status update is upstream's UpdatePodGeneratedResourceClaim event, which releases the pod.
    """

    name: str
    claim: str = ""
    template: bool = False
    resolved: bool = True


@dataclass(frozen=True, slots=True)
class HostPort:
    """A (hostIP, protocol, hostPort) triple a container asks for."""

    ip: str
    protocol: str
    port: int


@dataclass(frozen=True, slots=True)
class PodVolume:
    """One of a pod's volumes that a volume plugin looks at (others, like configMap, are dropped).

    ``claim`` is the PVC it uses: ``persistentVolumeClaim.claimName``, or ``<pod>-<volume>`` for a
    generic ephemeral volume (``ephemeral`` set; the claim must then be controlled by the pod).
    ``disk`` identifies an in-tree disk for VolumeRestrictions' conflicts: ``("gce", pdName)``,
    ``("aws", volumeID)``, ``("iscsi", iqn)`` or ``("rbd", pool, image)`` (with ``monitors``).
    """

    name: str
    claim: str = ""
    ephemeral: bool = False
    read_only: bool = False
    disk: tuple[str, ...] = ()
    monitors: frozenset[str] = frozenset()
    csi_driver: str = ""


@dataclass(slots=True)
class Pod:
    """What the scheduler needs to know about a pod. Built by :func:`pod_from_json`."""

    uid: str
    namespace: str
    name: str
    resource_version: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    scheduler_name: str = "default-scheduler"
    node_name: str = ""
    phase: str = "Pending"
    priority: int = 0
    priority_class_name: str = ""
    preemption_policy: str = "PreemptLowerPriority"
    creation_time: float = 0.0
    start_time: float | None = None
    #: ``spec.activeDeadlineSeconds`` when valid (1 to 2^31-1, what the API server accepts on
    #: create), else None: the kubelet ends the pod that long after ``status.startTime``, so gang
    #: reservations read it as a declared runtime (framework.reservations.declared_end).
    active_deadline_seconds: int | None = None
    deleting: bool = False
    nominated_node_name: str = ""
    requests: Resources = field(default_factory=Resources)
    non_zero_milli_cpu: int = DEFAULT_MILLI_CPU_REQUEST
    non_zero_memory: int = DEFAULT_MEMORY_REQUEST
    #: NodeResourcesFit's score counts the containers' spec only (see ``container_score_requests``);
    #: None when that is what ``requests`` and the non-zero values already hold.
    container_requests: Requests | None = None
    host_ports: tuple[HostPort, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    node_selector: dict[str, str] = field(default_factory=dict)
    affinity: dict[str, Any] | None = None
    topology_spread_constraints: tuple[dict[str, Any], ...] = ()
    images: tuple[str, ...] = ()
    scheduling_gates: tuple[str, ...] = ()
    scheduled_condition: tuple[str, str, str] | None = None  # (status, reason, message)
    owner_kind: str = ""
    disruption_target: bool = False
    volumes: tuple[PodVolume, ...] = ()
    resource_claims: tuple[PodResourceClaim, ...] = ()
    # The PodGroup the pod belongs to (gang scheduling): its name in the pod's namespace, and
    # whether the native spec.schedulingGroup named it (else the scheduler-plugins label did).
    pod_group: str = ""
    pod_group_native: bool = False
    # The declared node features the pod needs (api.node_features; empty for almost every pod).
    required_node_features: frozenset[str] = frozenset()
    # Per container, its extended resource requests (api.dra_extended: the claim DRA makes for
    # them); empty unless some container requests an extended resource.
    extended_containers: tuple[ContainerRequests, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def terminal(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def has_pod_affinity(self) -> bool:
        a = self.affinity
        return bool(a and (a.get("podAffinity") or a.get("podAntiAffinity")))

    @property
    def has_required_anti_affinity(self) -> bool:
        a = self.affinity
        if not a:
            return False
        anti = a.get("podAntiAffinity") or {}
        return bool(anti.get("requiredDuringSchedulingIgnoredDuringExecution"))


@dataclass(slots=True)
class Node:
    """What the scheduler needs to know about a node. Built by :func:`node_from_json`."""

    name: str
    uid: str = ""
    resource_version: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    allocatable: Resources = field(default_factory=Resources)
    images: dict[str, int] = field(default_factory=dict)  # image name as reported -> size in bytes
    declared_features: frozenset[str] = frozenset()  # status.declaredFeatures (api.node_features)


# --- parsing -------------------------------------------------------------------------------------


class MalformedObject(ValueError):
    """An object the API server should never have sent (wrong types, invalid quantities).

    The projections raise only this, whatever was wrong, so an informer can skip and report
    the object in one place; and they check the types of what they keep, so nothing downstream
    (cache, queue, plugins, the int64 node arrays) meets a value of the wrong type later, on a
    thread where an exception would be a crash or a retry loop."""


_PARSE_ERRORS = (AttributeError, TypeError, ValueError, KeyError, IndexError, ArithmeticError, RecursionError)


def _ident(doc: object) -> str:
    meta = doc.get("metadata") if isinstance(doc, Mapping) else None
    if not isinstance(meta, Mapping):
        return "?"
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


_T = TypeVar("_T")


def _projected(kind: str, doc: JSON, project: Callable[[JSON], _T], check: Callable[[_T], _T]) -> _T:
    """``check(project(doc))``, any error of either as one :class:`MalformedObject` naming the object."""
    try:
        return check(project(doc))
    except MalformedObject as e:
        raise MalformedObject(f"{kind} {_ident(doc)}: {e}") from None
    except _PARSE_ERRORS as e:
        raise MalformedObject(f"{kind} {_ident(doc)}: {type(e).__name__}: {e}") from e


def _need(ok: bool, what: str) -> None:
    if not ok:
        raise MalformedObject(what)


def _is_str_map(m: object) -> bool:
    return isinstance(m, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in m.items())


def _check_pod(p: Pod) -> Pod:
    for f in (
        "uid", "namespace", "name", "resource_version", "scheduler_name", "node_name", "phase",
        "priority_class_name", "preemption_policy", "nominated_node_name", "owner_kind", "pod_group",
    ):  # fmt: skip
        _need(isinstance(getattr(p, f), str), f"{f} is not a string")
    for f in ("labels", "annotations", "node_selector"):
        _need(_is_str_map(getattr(p, f)), f"{f} is not a map of strings")
    _need(
        p.affinity is None or (isinstance(p.affinity, dict) and all(isinstance(v, dict) for v in p.affinity.values())),
        "affinity is not an object of objects",
    )
    _need(all(isinstance(c, dict) for c in p.topology_spread_constraints), "topologySpreadConstraints item")
    _need(
        all(isinstance(x, str) for t in p.tolerations for x in (t.key, t.operator, t.value, t.effect)),
        "toleration fields are not strings",
    )
    _need(all(isinstance(h.ip, str) and isinstance(h.protocol, str) for h in p.host_ports), "hostIP/protocol")
    _need(all(isinstance(i, str) for i in (*p.images, *p.scheduling_gates)), "image or scheduling gate name")
    _need(-(2**31) <= p.priority < 2**31, "priority out of int32 range")
    return p


def _check_node(n: Node) -> Node:
    for f in ("name", "uid", "resource_version"):
        _need(isinstance(getattr(n, f), str), f"{f} is not a string")
    _need(bool(n.name), "node without a name")
    _need(_is_str_map(n.labels), "labels is not a map of strings")
    _need(all(isinstance(x, str) for t in n.taints for x in (t.key, t.value, t.effect)), "taint fields")
    _need(all(isinstance(k, str) for k in n.images), "image names are not strings")
    return n


def resource_version_number(rv: str) -> int:
    """A resourceVersion as a number, to tell which of two copies of one object is newer (0 when
    it is not one). The API calls resourceVersions opaque; the assume caches compare them as
    etcd revisions all the same, as upstream's do (``ParseInt`` of the string)."""
    try:
        return int(rv)
    except ValueError:
        return 0


def parse_time(ts: str | None) -> float | None:
    """RFC 3339 (``2024-01-02T03:04:05Z``, optional fraction or offset) to epoch seconds; a time
    without a zone is taken as UTC. Anything else is None. (``fromisoformat`` is C code: this runs
    for every pod event.)"""
    if not ts or len(ts) < 19 or ts[10] not in "Tt":
        return None
    try:
        dt = datetime.fromisoformat(ts)
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def normalize_image(name: str) -> str:
    """ImageLocality's normalisation of a pod's image: no tag or digest means ``:latest``. Upstream
    applies it to the pod's names only; a node's names are matched as the node reports them."""
    last = name.rsplit("/", 1)[-1]
    if ":" in last or "@" in name:
        return name
    return name + ":latest"


def _pod_volumes(pod_name: str, spec: JSON) -> tuple[PodVolume, ...]:
    """The volumes the volume plugins care about (claims, in-tree disks, inline CSI), in order."""
    out = []
    for v in spec.get("volumes") or ():
        name = str(v.get("name", ""))
        if (src := v.get("persistentVolumeClaim")) is not None:
            out.append(PodVolume(name, str(src.get("claimName", "")), read_only=bool(src.get("readOnly"))))
        elif v.get("ephemeral") is not None:
            out.append(PodVolume(name, f"{pod_name}-{name}", ephemeral=True))
        elif (src := v.get("gcePersistentDisk")) is not None:
            out.append(PodVolume(name, disk=("gce", str(src.get("pdName", ""))), read_only=bool(src.get("readOnly"))))
        elif (src := v.get("awsElasticBlockStore")) is not None:
            out.append(PodVolume(name, disk=("aws", str(src.get("volumeID", ""))), read_only=bool(src.get("readOnly"))))
        elif (src := v.get("iscsi")) is not None:
            out.append(PodVolume(name, disk=("iscsi", str(src.get("iqn", ""))), read_only=bool(src.get("readOnly"))))
        elif (src := v.get("rbd")) is not None:
            out.append(
                PodVolume(
                    name,
                    disk=("rbd", str(src.get("pool") or "rbd"), str(src.get("image", ""))),
                    monitors=frozenset(src.get("monitors") or ()),
                    read_only=bool(src.get("readOnly")),
                )
            )
        elif (src := v.get("csi")) is not None:
            out.append(PodVolume(name, csi_driver=str(src.get("driver", ""))))
    return tuple(out)


def _host_ports(spec: JSON) -> tuple[HostPort, ...]:
    out = []
    for c in spec.get("containers") or ():
        for p in c.get("ports") or ():
            hp = int(p.get("hostPort") or 0)
            if hp > 0:
                out.append(HostPort(p.get("hostIP") or "0.0.0.0", p.get("protocol") or "TCP", hp))
    return tuple(out)


MAX_ACTIVE_DEADLINE = 2**31 - 1
"""The largest ``activeDeadlineSeconds`` the API server accepts (validation: 1 to MaxInt32)."""


def _active_deadline(value: Any) -> int | None:
    """A valid deadline, or None: the API server refuses anything else, so a bad value (a bool, a
    float, a string, out of range) can come only from a hand-made object; it declares nothing
    rather than failing the pod, and never counts as a promise to end."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_ACTIVE_DEADLINE:
        return None
    return value


def pod_from_json(doc: JSON) -> Pod:
    """Project a Pod's JSON into :class:`Pod`. Never raises on odd but valid specs; raises only
    :class:`MalformedObject` on anything the API server could not have sent."""
    return _projected("pod", doc, _pod_from_json, _check_pod)


def _pod_from_json(doc: JSON) -> Pod:
    meta = doc.get("metadata") or {}
    spec = doc.get("spec") or {}
    status = doc.get("status") or {}
    (requests, nz_cpu, nz_mem), score_requests = pod_requests(spec, status)
    cond = None
    disruption = False
    for c in status.get("conditions") or ():
        if c.get("type") == "PodScheduled":
            cond = (str(c.get("status", "")), str(c.get("reason", "")), str(c.get("message", "")))
        elif c.get("type") == "DisruptionTarget" and c.get("status") == "True":
            disruption = True
    owners = meta.get("ownerReferences") or ()
    group, native = _pod_group(meta, spec)
    # ImageLocality's images: init containers and containers (v1.30+), then image volumes (v1.33+),
    # one entry each, as upstream counts them for its threshold.
    images = [
        *(c.get("image", "") for c in spec.get("initContainers") or ()),
        *(c.get("image", "") for c in spec.get("containers") or ()),
        *(str((v.get("image") or {}).get("reference", "")) for v in spec.get("volumes") or () if v.get("image")),
    ]
    return Pod(
        uid=meta.get("uid", ""),
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        resource_version=meta.get("resourceVersion", ""),
        labels=dict(meta.get("labels") or {}),
        annotations={k: v for k, v in (meta.get("annotations") or {}).items() if "scheduler" in k},
        scheduler_name=spec.get("schedulerName") or "default-scheduler",
        node_name=spec.get("nodeName") or "",
        phase=status.get("phase") or "Pending",
        priority=int(spec.get("priority") or 0),
        priority_class_name=spec.get("priorityClassName") or "",
        preemption_policy=spec.get("preemptionPolicy") or "PreemptLowerPriority",
        creation_time=parse_time(meta.get("creationTimestamp")) or 0.0,
        start_time=parse_time(status.get("startTime")),
        active_deadline_seconds=_active_deadline(spec.get("activeDeadlineSeconds")),
        deleting=bool(meta.get("deletionTimestamp")),
        nominated_node_name=status.get("nominatedNodeName") or "",
        requests=requests,
        non_zero_milli_cpu=nz_cpu,
        non_zero_memory=nz_mem,
        container_requests=score_requests,
        host_ports=_host_ports(spec),
        tolerations=tuple(
            Toleration(t.get("key") or "", t.get("operator") or "Equal", t.get("value") or "", t.get("effect") or "")
            for t in spec.get("tolerations") or ()
        ),
        node_selector=dict(spec.get("nodeSelector") or {}),
        affinity=spec.get("affinity") or None,
        topology_spread_constraints=tuple(spec.get("topologySpreadConstraints") or ()),
        images=tuple(normalize_image(i) for i in images),
        scheduling_gates=tuple(g.get("name", "") for g in spec.get("schedulingGates") or ()),
        scheduled_condition=cond,
        owner_kind=str(owners[0].get("kind", "")) if owners else "",
        disruption_target=disruption,
        volumes=_pod_volumes(meta.get("name", ""), spec) if spec.get("volumes") else (),
        resource_claims=_pod_resource_claims(spec, status) if spec.get("resourceClaims") else (),
        pod_group=group,
        pod_group_native=native,
        required_node_features=infer_for_scheduling(spec),
        extended_containers=(container_requests(spec) if any(map(is_extended_resource_name, requests.scalar)) else ()),
    )


def _pod_group(meta: JSON, spec: JSON) -> tuple[str, bool]:
    """(group name, native) of a pod: ``spec.schedulingGroup.podGroupName`` (scheduling/v1beta1)
    first, else the ``scheduling.x-k8s.io/pod-group`` label; ("", False) for none. Two dict reads
    on the hot path for a pod of no group."""
    sg = spec.get("schedulingGroup")
    if sg:
        name = sg.get("podGroupName")
        if name:
            return name, True  # a non-string fails _check_pod
    labels = meta.get("labels")
    name = labels.get(POD_GROUP_LABEL) if labels else None
    return (name, False) if name else ("", False)


def _pod_resource_claims(spec: JSON, status: JSON) -> tuple[PodResourceClaim, ...]:
    generated = {str(s.get("name", "")): s.get("resourceClaimName") for s in status.get("resourceClaimStatuses") or ()}
    out = []
    for rc in spec.get("resourceClaims") or ():
        name = str(rc.get("name", ""))
        if rc.get("resourceClaimName"):
            out.append(PodResourceClaim(name, str(rc["resourceClaimName"])))
        elif rc.get("resourceClaimTemplateName"):
            got = name in generated
            out.append(PodResourceClaim(name, str(generated.get(name) or ""), template=True, resolved=got))
        else:
            out.append(PodResourceClaim(name, resolved=False))
    return tuple(out)


def node_from_json(doc: JSON) -> Node:
    """Project a Node's JSON into :class:`Node`; raises only :class:`MalformedObject`."""
    return _projected("node", doc, _node_from_json, _check_node)


def _node_from_json(doc: JSON) -> Node:
    meta = doc.get("metadata") or {}
    spec = doc.get("spec") or {}
    status = doc.get("status") or {}
    images: dict[str, int] = {}
    for img in status.get("images") or ():
        size = int(img.get("sizeBytes") or 0)
        for n in img.get("names") or ():
            images[n] = size  # as the node reports them: upstream normalises only the pod's names
    return Node(
        name=meta.get("name", ""),
        uid=meta.get("uid", ""),
        resource_version=meta.get("resourceVersion", ""),
        labels=dict(meta.get("labels") or {}),
        taints=tuple(
            Taint(t.get("key") or "", t.get("value") or "", t.get("effect") or "") for t in spec.get("taints") or ()
        ),
        unschedulable=bool(spec.get("unschedulable")),
        allocatable=Resources.from_json(status.get("allocatable") or status.get("capacity")),
        images=images,
        declared_features=declared_features(status),
    )


@dataclass(slots=True)
class PodDisruptionBudget:
    """What preemption needs of a PDB: which pods it covers and how many may still go."""

    namespace: str
    name: str
    selector: Any  # labels.Selector (kept untyped here to avoid an import cycle)
    disruptions_allowed: int = 0
    disrupted_pods: frozenset[str] = frozenset()
    resource_version: str = ""


def pdb_from_json(doc: JSON) -> PodDisruptionBudget:
    from custom_scheduler.api import labels

    meta = doc.get("metadata") or {}
    spec = doc.get("spec") or {}
    status = doc.get("status") or {}
    sel = spec.get("selector")
    # A PDB with a null or empty selector matches nothing for preemption (as kube-scheduler).
    selector = labels.compile_selector(sel) if sel else labels.NOTHING
    if selector.is_empty:
        selector = labels.NOTHING
    return PodDisruptionBudget(
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        selector=selector,
        disruptions_allowed=int(status.get("disruptionsAllowed") or 0),
        disrupted_pods=frozenset((status.get("disruptedPods") or {}).keys()),
        resource_version=meta.get("resourceVersion", ""),
    )


@dataclass(slots=True)
class Namespace:
    """A namespace's labels, for the namespaceSelector of pod (anti-)affinity terms."""

    name: str
    labels: dict[str, str]
    resource_version: str


def namespace_from_json(doc: Mapping[str, Any]) -> Namespace:
    meta = doc.get("metadata") or {}
    return Namespace(meta.get("name", ""), dict(meta.get("labels") or {}), meta.get("resourceVersion", ""))
