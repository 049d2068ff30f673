"""Resource vectors and the arithmetic of a pod's effective requests.

Kept apart from the Pod and Node projections (:mod:`custom_scheduler.api.model`) because it is a
role of its own: the one place that says how much a pod asks for (containers, sidecars, init
containers, pod-level resources, overhead), with upstream's ``PodRequests`` rules, and the vector
type every fit and score computation adds and compares.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

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


def _container_requests(c: JSON) -> tuple[Resources, int, int]:
    req = Resources.from_json(((c.get("resources") or {}).get("requests")) or None)
    raw = (c.get("resources") or {}).get("requests") or {}
    nz_cpu = req.milli_cpu if CPU in raw else DEFAULT_MILLI_CPU_REQUEST
    nz_mem = req.memory if MEMORY in raw else DEFAULT_MEMORY_REQUEST
    return req, nz_cpu, nz_mem


#: A pod's requests with the "non-zero" CPU and memory scoring uses: (requests, milli-CPU, memory).
Requests = tuple[Resources, int, int]


def compute_requests(spec: JSON) -> Requests:
    """Effective pod requests, as kube-scheduler's ``PodRequests`` computes them (v1.34+).

    ``max(Σ regular containers + Σ sidecars, max over init containers of (init + sidecars started
    before it))``, then pod-level requests (``spec.resources``) in place of that for the resources
    they name, then ``+ overhead``; sidecars are init containers with ``restartPolicy: Always``. The
    second and third values are the "non-zero" CPU and memory used for scoring, where a container
    that omits a request counts as 100m / 200Mi.
    """
    total, nz_cpu, nz_mem = _containers(spec)
    pod_level = _pod_level_requests(spec)
    if pod_level:
        # Pod-level resources (beta and on by default since 1.34): the pod's own requests replace
        # the containers' sum for cpu, memory and hugepages, and for the non-zero values too, so an
        # unset container request no longer counts as 100m / 200Mi.
        lvl = Resources.from_json(pod_level)
        if "cpu" in pod_level:
            total.milli_cpu = nz_cpu = lvl.milli_cpu
        if "memory" in pod_level:
            total.memory = nz_mem = lvl.memory
        for k, v in lvl.scalar.items():
            total.scalar[k] = v
    return _with_overhead(spec, total, nz_cpu, nz_mem)


def container_score_requests(spec: JSON) -> Requests | None:
    """What NodeResourcesFit's *score* counts for a pod with pod-level resources: the containers'
    sum and overhead, as if ``spec.resources`` were unset; None for a pod without them (then it is
    :func:`compute_requests`). kube-scheduler 1.37.2 builds Fit's scorer without its pod-level flag
    (``noderesources/fit.go``: ``SkipPodLevelResources`` is true there), while its Filter and
    BalancedAllocation use pod-level resources; matching it keeps scores equal to upstream's."""
    if not _pod_level_requests(spec):
        return None
    return _with_overhead(spec, *_containers(spec))


def _pod_level_requests(spec: JSON) -> dict[str, Any]:
    requests = ((spec.get("resources") or {}).get("requests")) or {}
    return {k: v for k, v in requests.items() if _pod_level_resource(k)}


def _containers(spec: JSON) -> Requests:
    """The containers' part of :func:`compute_requests` (sidecars and init containers included)."""
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
