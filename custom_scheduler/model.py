"""Compact, typed views of Pods and Nodes, projected straight from the API server's JSON.

Why not the client's model classes: building a ``V1Pod`` costs about a millisecond and several times
the memory of the few fields a scheduler reads (../shared/docs/python-client.md §3). The informers
parse each object once with orjson and keep only these slotted structs; everything downstream (the
cache, the plugins, explain and simulate) reads them.

What is kept is what kube-scheduler's default plugins read: requests (computed once, with init
containers, sidecars and overhead), host ports, tolerations, node selector and affinity, topology
spread constraints, labels, priority, images. Raw sub-documents that plugins parse further
(``affinity``, ``topologySpreadConstraints``) are kept as the small dicts they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from custom_scheduler.kube import quantity

# kube-scheduler's defaults for containers that omit a request, used only for scoring
# (pkg/scheduler/util/pod_resources.go).
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024

CPU, MEMORY, EPHEMERAL_STORAGE, PODS = "cpu", "memory", "ephemeral-storage", "pods"

JSON = Mapping[str, Any]


@dataclass(slots=True)
class Resources:
    """A resource vector in integer units: milli-CPU, bytes, and counts for everything else."""

    milli_cpu: int = 0
    memory: int = 0
    ephemeral_storage: int = 0
    allowed_pods: int = 0
    scalar: dict[str, int] = field(default_factory=dict)

    def get(self, name: str) -> int:
        """The amount of one resource by its Kubernetes name."""
        if name == CPU:
            return self.milli_cpu
        if name == MEMORY:
            return self.memory
        if name == EPHEMERAL_STORAGE:
            return self.ephemeral_storage
        if name == PODS:
            return self.allowed_pods
        return self.scalar.get(name, 0)

    def add(self, other: Resources, sign: int = 1) -> None:
        """In-place ``self += sign * other`` (``allowed_pods`` is untouched: it is a node capacity)."""
        self.milli_cpu += sign * other.milli_cpu
        self.memory += sign * other.memory
        self.ephemeral_storage += sign * other.ephemeral_storage
        for k, v in other.scalar.items():
            nv = self.scalar.get(k, 0) + sign * v
            if nv:
                self.scalar[k] = nv
            else:
                self.scalar.pop(k, None)

    def set_max(self, other: Resources) -> None:
        """In-place element-wise maximum."""
        self.milli_cpu = max(self.milli_cpu, other.milli_cpu)
        self.memory = max(self.memory, other.memory)
        self.ephemeral_storage = max(self.ephemeral_storage, other.ephemeral_storage)
        for k, v in other.scalar.items():
            if v > self.scalar.get(k, 0):
                self.scalar[k] = v

    def copy(self) -> Resources:
        return Resources(self.milli_cpu, self.memory, self.ephemeral_storage, self.allowed_pods, dict(self.scalar))

    def is_zero(self) -> bool:
        return not (self.milli_cpu or self.memory or self.ephemeral_storage or any(self.scalar.values()))

    @classmethod
    def from_json(cls, doc: JSON | None) -> Resources:
        """Parse a ``ResourceList`` (``{"cpu": "500m", "memory": "1Gi", ...}``)."""
        r = cls()
        if not doc:
            return r
        for name, value in doc.items():
            if name == CPU:
                r.milli_cpu = quantity.to_milli(value)
            elif name == MEMORY:
                r.memory = quantity.to_int(value)
            elif name == EPHEMERAL_STORAGE:
                r.ephemeral_storage = quantity.to_int(value)
            elif name == PODS:
                r.allowed_pods = quantity.to_int(value)
            else:
                n = quantity.to_int(value)
                if n:
                    r.scalar[name] = n
        return r


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
class HostPort:
    """A (hostIP, protocol, hostPort) triple a container asks for."""

    ip: str
    protocol: str
    port: int


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
    deleting: bool = False
    nominated_node_name: str = ""
    requests: Resources = field(default_factory=Resources)
    non_zero_milli_cpu: int = DEFAULT_MILLI_CPU_REQUEST
    non_zero_memory: int = DEFAULT_MEMORY_REQUEST
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
    images: dict[str, int] = field(default_factory=dict)  # normalised image name -> size in bytes


# --- parsing -------------------------------------------------------------------------------------


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
    """ImageLocality's normalisation: an image without a tag or digest means ``:latest``."""
    last = name.rsplit("/", 1)[-1]
    if ":" in last or "@" in name:
        return name
    return name + ":latest"


def _container_requests(c: JSON) -> tuple[Resources, int, int]:
    req = Resources.from_json(((c.get("resources") or {}).get("requests")) or None)
    raw = (c.get("resources") or {}).get("requests") or {}
    nz_cpu = req.milli_cpu if CPU in raw else DEFAULT_MILLI_CPU_REQUEST
    nz_mem = req.memory if MEMORY in raw else DEFAULT_MEMORY_REQUEST
    return req, nz_cpu, nz_mem


def compute_requests(spec: JSON) -> tuple[Resources, int, int]:
    """Effective pod requests, as kube-scheduler's ``PodRequests`` computes them (v1.28+).

    ``max(Σ regular containers + Σ sidecars, max over init containers of (init + sidecars started
    before it)) + overhead``; sidecars are init containers with ``restartPolicy: Always``. The
    second and third values are the "non-zero" CPU and memory used for scoring, where a container
    that omits a request counts as 100m / 200Mi.
    """
    total = Resources()
    nz_cpu = nz_mem = 0
    for c in spec.get("containers") or ():
        r, c_cpu, c_mem = _container_requests(c)
        total.add(r)
        nz_cpu += c_cpu
        nz_mem += c_mem
    sidecars = Resources()
    sc_cpu = sc_mem = 0
    init_max = Resources()
    init_cpu = init_mem = 0
    for c in spec.get("initContainers") or ():
        r, c_cpu, c_mem = _container_requests(c)
        if c.get("restartPolicy") == "Always":
            sidecars.add(r)
            sc_cpu += c_cpu
            sc_mem += c_mem
            eff, eff_cpu, eff_mem = sidecars.copy(), sc_cpu, sc_mem
        else:
            eff = r.copy()
            eff.add(sidecars)
            eff_cpu, eff_mem = c_cpu + sc_cpu, c_mem + sc_mem
        init_max.set_max(eff)
        init_cpu, init_mem = max(init_cpu, eff_cpu), max(init_mem, eff_mem)
    total.add(sidecars)
    total.set_max(init_max)
    nz_cpu, nz_mem = max(nz_cpu + sc_cpu, init_cpu), max(nz_mem + sc_mem, init_mem)
    overhead = Resources.from_json(spec.get("overhead"))
    if not overhead.is_zero():
        total.add(overhead)
        nz_cpu += overhead.milli_cpu
        nz_mem += overhead.memory
    return total, nz_cpu, nz_mem


def _host_ports(spec: JSON) -> tuple[HostPort, ...]:
    out = []
    for c in spec.get("containers") or ():
        for p in c.get("ports") or ():
            hp = int(p.get("hostPort") or 0)
            if hp > 0:
                out.append(HostPort(p.get("hostIP") or "0.0.0.0", p.get("protocol") or "TCP", hp))
    return tuple(out)


def pod_from_json(doc: JSON) -> Pod:
    """Project a Pod's JSON into :class:`Pod`. Never raises on odd but valid specs."""
    meta = doc.get("metadata") or {}
    spec = doc.get("spec") or {}
    status = doc.get("status") or {}
    requests, nz_cpu, nz_mem = compute_requests(spec)
    cond = None
    disruption = False
    for c in status.get("conditions") or ():
        if c.get("type") == "PodScheduled":
            cond = (str(c.get("status", "")), str(c.get("reason", "")), str(c.get("message", "")))
        elif c.get("type") == "DisruptionTarget" and c.get("status") == "True":
            disruption = True
    owners = meta.get("ownerReferences") or ()
    images = [c.get("image", "") for c in spec.get("initContainers") or ()] + [
        c.get("image", "") for c in spec.get("containers") or ()
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
        deleting=bool(meta.get("deletionTimestamp")),
        nominated_node_name=status.get("nominatedNodeName") or "",
        requests=requests,
        non_zero_milli_cpu=nz_cpu,
        non_zero_memory=nz_mem,
        host_ports=_host_ports(spec),
        tolerations=tuple(
            Toleration(t.get("key") or "", t.get("operator") or "Equal", t.get("value") or "", t.get("effect") or "")
            for t in spec.get("tolerations") or ()
        ),
        node_selector=dict(spec.get("nodeSelector") or {}),
        affinity=spec.get("affinity") or None,
        topology_spread_constraints=tuple(spec.get("topologySpreadConstraints") or ()),
        images=tuple(normalize_image(i) for i in images if i),
        scheduling_gates=tuple(g.get("name", "") for g in spec.get("schedulingGates") or ()),
        scheduled_condition=cond,
        owner_kind=str(owners[0].get("kind", "")) if owners else "",
        disruption_target=disruption,
    )


def node_from_json(doc: JSON) -> Node:
    """Project a Node's JSON into :class:`Node`."""
    meta = doc.get("metadata") or {}
    spec = doc.get("spec") or {}
    status = doc.get("status") or {}
    images: dict[str, int] = {}
    for img in status.get("images") or ():
        size = int(img.get("sizeBytes") or 0)
        for n in img.get("names") or ():
            images[normalize_image(n)] = size
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
    from custom_scheduler import labels

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
