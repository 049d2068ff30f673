"""Resource vectors and the arithmetic of a pod's effective requests.

Kept apart from the Pod and Node projections (:mod:`custom_scheduler.api.model`) because it is a
role of its own: the one place that says how much a pod asks for (containers, sidecars, init
containers, pod-level resources, overhead), with upstream's ``PodRequests`` rules, and the vector
type every fit and score computation adds and compares.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from custom_scheduler.api import quantity

JSON = Mapping[str, Any]

# kube-scheduler's defaults for containers that omit a request, used only for scoring
# (pkg/scheduler/util/pod_resources.go).
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024

CPU, MEMORY, EPHEMERAL_STORAGE, PODS = "cpu", "memory", "ephemeral-storage", "pods"


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
        """Parse a ``ResourceList`` (``{"cpu": "500m", "memory": "1Gi", ...}``).

        A negative amount raises ``ValueError``: the API server's validation never admits one, and
        a pod with negative requests would *free* room on a node, over-committing it."""
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
        if min(r.milli_cpu, r.memory, r.ephemeral_storage, r.allowed_pods, *r.scalar.values()) < 0:
            raise ValueError(f"negative quantity in {dict(doc)!r:.200}")
        return r


def _container_requests(raw: JSON | None) -> tuple[Resources, int, int]:
    """One container's requests from its ``ResourceList`` (spec, allocated or actuated) and its
    non-zero CPU and memory: an absent entry scores as the default, as upstream's
    ``NonMissingContainerRequests`` fills it in whichever list it reads."""
    raw = raw or {}
    req = Resources.from_json(raw)
    nz_cpu = req.milli_cpu if CPU in raw else DEFAULT_MILLI_CPU_REQUEST
    nz_mem = req.memory if MEMORY in raw else DEFAULT_MEMORY_REQUEST
    return req, nz_cpu, nz_mem


#: A pod's requests with the "non-zero" CPU and memory scoring uses: (requests, milli-CPU, memory).
Requests = tuple[Resources, int, int]


def compute_requests(spec: JSON, status: JSON | None = None) -> Requests:
    """Effective pod requests, as kube-scheduler's ``PodRequests`` computes them (v1.34+), with
    status resources (in-place resize: InPlacePodVerticalScaling is GA and locked on since 1.35,
    InPlacePodLevelResourcesVerticalScaling beta and on since 1.36, so 1.37.2's NodeInfo counts both).

    ``max(Σ regular containers + Σ sidecars, max over init containers of (init + sidecars started
    before it))``, then pod-level requests (``spec.resources``) in place of that for the resources
    they name, then ``+ overhead``; sidecars are init containers with ``restartPolicy: Always``. The
    second and third values are the "non-zero" CPU and memory used for scoring, where a container
    that omits a request counts as 100m / 200Mi.

    With ``status``, each part is the maximum of the desired (spec), allocated and actuated sizes,
    so a pod resized up counts at its larger size while the kubelet works on it (no over-commit)
    and a pod resized down counts at the smaller one only once the kubelet reports it actuated.
    """
    return pod_requests(spec, status)[0]


def container_score_requests(spec: JSON, status: JSON | None = None) -> Requests | None:
    """What NodeResourcesFit's *score* counts for a pod: the containers' sum from the spec and
    overhead, as if ``spec.resources`` were unset and the status reported nothing; None when that
    equals :func:`compute_requests`. kube-scheduler 1.37.2 builds Fit's scorer without its
    pod-level and in-place-resize flags (``noderesources/fit.go``: ``SkipPodLevelResources`` true,
    ``UseStatusResources`` false there), while its Filter, BalancedAllocation and NodeInfo use
    both; matching it keeps scores equal to upstream's."""
    return pod_requests(spec, status)[1]


def pod_requests(spec: JSON, status: JSON | None = None) -> tuple[Requests, Requests | None]:
    """:func:`compute_requests` and :func:`container_score_requests` in one pass, as the pod
    projection needs both: the spec's container sum is computed once and serves both, and the
    score's value is kept only where it differs (a running pod that was never resized counts the
    same either way, so it carries no second vector)."""
    status = status or {}
    spec_sum = _containers(spec)
    with_status = _status_counts(status)
    pod_level = _pod_level_requests(spec)
    score = None
    if pod_level or with_status:
        score = _with_overhead(spec, spec_sum[0].copy(), spec_sum[1], spec_sum[2])
    total, nz_cpu, nz_mem = _status_aware_containers(spec, status, spec_sum) if with_status else spec_sum
    if pod_level:
        # Pod-level resources (beta and on by default since 1.34): the pod's own requests replace
        # the containers' sum for cpu, memory and hugepages, and for the non-zero values too, so an
        # unset container request no longer counts as 100m / 200Mi.
        lvl, names = _effective_pod_level(pod_level, status)
        if CPU in names:
            total.milli_cpu = nz_cpu = lvl.milli_cpu
        if MEMORY in names:
            total.memory = nz_mem = lvl.memory
        for k, v in lvl.scalar.items():
            total.scalar[k] = v
    counted = _with_overhead(spec, total, nz_cpu, nz_mem)
    return counted, None if score == counted else score


def _status_counts(status: JSON) -> bool:
    """Whether ``status`` can change what :func:`compute_requests` counts: it reports allocated or
    actuated resources, or a resize the kubelet found infeasible (then the spec is not counted).
    False for a pending pod, so the usual path skips the status-aware sums."""
    if not status:
        return False
    if status.get("allocatedResources") is not None or status.get("resources") is not None:
        return True
    for cs in (*(status.get("containerStatuses") or ()), *(status.get("initContainerStatuses") or ())):
        if cs.get("allocatedResources") is not None or cs.get("resources") is not None:
            return True
    return _resize_infeasible(status)


def _resize_infeasible(status: JSON) -> bool:
    """Upstream's ``IsPodResizeInfeasible``: the first PodResizePending condition says Infeasible."""
    for c in status.get("conditions") or ():
        if c.get("type") == "PodResizePending":
            return bool(c.get("reason") == "Infeasible")
    return False


#: Picks the ``ResourceList`` one container counts with: (container, its status or None, whether
#: the pending resize is infeasible) -> requests, None for none.
_Pick = Callable[[JSON, JSON | None, bool], JSON | None]


def _spec_pick(c: JSON, _cs: JSON | None, _infeasible: bool) -> JSON | None:
    return (c.get("resources") or {}).get("requests")


def _allocated_pick(c: JSON, cs: JSON | None, infeasible: bool) -> JSON | None:
    """Upstream's ``containerAllocatedRequests``: what the kubelet admitted, else the spec (none
    when the resize is infeasible: the spec then asks for what the node cannot give)."""
    if cs is not None and cs.get("allocatedResources") is not None:
        allocated: JSON = cs["allocatedResources"]
        return allocated
    return None if infeasible else _spec_pick(c, cs, infeasible)


def _actuated_pick(c: JSON, cs: JSON | None, infeasible: bool) -> JSON | None:
    """Upstream's ``containerActuatedRequests``: what the runtime applied, else the allocation,
    else the spec (none when the resize is infeasible)."""
    if cs is not None:
        actual = (cs.get("resources") or {}).get("requests")
        if actual is not None:
            return cast("JSON", actual)
        if cs.get("allocatedResources") is not None:
            return cast("JSON", cs["allocatedResources"])
    return None if infeasible else _spec_pick(c, cs, infeasible)


def _status_aware_containers(spec: JSON, status: JSON, spec_sum: Requests) -> Requests:
    """Upstream's ``AggregateContainerRequests`` with ``UseStatusResources``: the element-wise max
    of the spec, allocated and actuated sums (allocated and actuated only when the resize is
    infeasible). The pod-level status maps, when the kubelet reports both, already hold the sums."""
    infeasible = _resize_infeasible(status)
    by_name: dict[str, JSON] = {}
    # findContainerStatus: containerStatuses first, then initContainerStatuses; first match wins.
    for cs in (*(status.get("containerStatuses") or ()), *(status.get("initContainerStatuses") or ())):
        by_name.setdefault(str(cs.get("name", "")), cs)
    actual = (status.get("resources") or {}).get("requests")
    allocated_list = status.get("allocatedResources")
    if allocated_list is not None and actual is not None:
        allocated, actuated = _flat(allocated_list), _flat(actual)
    else:
        allocated = _containers(spec, _allocated_pick, by_name, infeasible=infeasible)
        actuated = _containers(spec, _actuated_pick, by_name, infeasible=infeasible)
    parts = (actuated, allocated) if infeasible else (spec_sum, actuated, allocated)
    total = Resources()
    nz_cpu = nz_mem = 0
    for r, c_cpu, c_mem in parts:
        total.set_max(r)
        nz_cpu, nz_mem = max(nz_cpu, c_cpu), max(nz_mem, c_mem)
    return total, nz_cpu, nz_mem


def _flat(doc: JSON) -> Requests:
    """A pod-level status ``ResourceList`` as a part of the max: no non-zero defaults apply to it."""
    r = Resources.from_json(doc)
    return r, r.milli_cpu, r.memory


def _effective_pod_level(pod_level: JSON, status: JSON) -> tuple[Resources, set[str]]:
    """The pod-level requests counted (upstream's ``effectivePodLevelResources``), and the names
    they set: with ``status.resources`` reported, the max of the spec (left out when the resize
    is infeasible), the actuated and the allocated pod-level requests."""
    if status.get("resources") is None:
        return Resources.from_json(pod_level), set(pod_level)
    lists = [
        (status.get("resources") or {}).get("requests") or {},
        status.get("allocatedResources") or {},
    ]
    if not _resize_infeasible(status):
        lists.append(pod_level)
    lvl = Resources()
    names: set[str] = set()
    for doc in lists:
        supported = {k: v for k, v in doc.items() if _pod_level_resource(k)}
        lvl.set_max(Resources.from_json(supported))
        names.update(supported)
    return lvl, names


def _pod_level_requests(spec: JSON) -> dict[str, Any]:
    requests = ((spec.get("resources") or {}).get("requests")) or {}
    return {k: v for k, v in requests.items() if _pod_level_resource(k)}


def _containers(
    spec: JSON,
    pick: _Pick = _spec_pick,
    statuses: Mapping[str, JSON] | None = None,
    *,
    infeasible: bool = False,
) -> Requests:
    """The containers' part of :func:`compute_requests` (sidecars and init containers included),
    each container counted with the ``ResourceList`` that ``pick`` chooses."""
    statuses = statuses or {}

    def one(c: JSON) -> tuple[Resources, int, int]:
        return _container_requests(pick(c, statuses.get(str(c.get("name", ""))), infeasible))

    total = Resources()
    nz_cpu = nz_mem = 0
    for c in spec.get("containers") or ():
        r, c_cpu, c_mem = one(c)
        total.add(r)
        nz_cpu += c_cpu
        nz_mem += c_mem
    sidecars = Resources()
    sc_cpu = sc_mem = 0
    init_max = Resources()
    init_cpu = init_mem = 0
    for c in spec.get("initContainers") or ():
        r, c_cpu, c_mem = one(c)
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
    return total, max(nz_cpu + sc_cpu, init_cpu), max(nz_mem + sc_mem, init_mem)


def _with_overhead(spec: JSON, total: Resources, nz_cpu: int, nz_mem: int) -> Requests:
    overhead = Resources.from_json(spec.get("overhead"))
    if not overhead.is_zero():
        total.add(overhead)
        nz_cpu += overhead.milli_cpu
        nz_mem += overhead.memory
    return total, nz_cpu, nz_mem


def _pod_level_resource(name: str) -> bool:
    """The resources ``spec.resources`` may set (upstream's ``IsSupportedPodLevelResource``)."""
    return name in ("cpu", "memory") or name.startswith("hugepages-")
