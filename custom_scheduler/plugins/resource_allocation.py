"""The resource-vector scoring shared by NodeResourcesFit and NodeResourcesBalancedAllocation.

Both plugins score a node from two vectors over a configured list of resources: what the node can
allocate, and what would be requested on it with the pod placed there. Only the way each vector is
filled differs, mirroring kube-scheduler's ``resourceAllocationScorer``:

- NodeResourcesFit scores with the *non-zero* requests for cpu and memory (a container that omits a
  request counts as 100m / 200Mi, so empty pods do not all pile onto one node);
  BalancedAllocation (``use_requested``) uses the actual requests.
- ephemeral-storage and scalar resources (extended resources, hugepages) always use actual requests.
- A scalar resource the pod does not request is left out entirely (allocatable 0), so configuring
  ``nvidia.com/gpu`` does not penalise GPU nodes for pods that need no GPU; resources the node does
  not have (allocatable 0) are left out too.

The pod's side is computed once per pod (PreScore) as a tuple aligned with the resource list; the
per-node work is a handful of integer reads. This module also holds the resource-name predicates
(extended, scalar) that NodeResourcesFit's filter needs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from custom_scheduler.framework.types import NodeInfo
from custom_scheduler.model import CPU, EPHEMERAL_STORAGE, MEMORY, Pod
from custom_scheduler.plugins import args_reader

DEFAULT_RESOURCE_WEIGHT = 1

HUGEPAGES_PREFIX = "hugepages-"
ATTACHABLE_VOLUMES_PREFIX = "attachable-volumes-"
NATIVE_RESOURCE_DOMAIN = "kubernetes.io/"
REQUESTS_PREFIX = "requests."


@dataclass(frozen=True, slots=True)
class ResourceSpec:
    """One resource to score on and its weight (``{name: cpu, weight: 1}`` in config)."""

    name: str
    weight: int = DEFAULT_RESOURCE_WEIGHT


DEFAULT_RESOURCES: tuple[ResourceSpec, ...] = (ResourceSpec(CPU, 1), ResourceSpec(MEMORY, 1))


def is_native_resource_name(name: str) -> bool:
    """Unprefixed names and names in the ``kubernetes.io/`` domain are native."""
    return "/" not in name or NATIVE_RESOURCE_DOMAIN in name


def is_extended_resource_name(name: str) -> bool:
    """Extended resources (``example.com/foo``): prefixed, not native, not a quota ``requests.`` name."""
    return not is_native_resource_name(name) and not name.startswith(REQUESTS_PREFIX)


def is_scalar_resource_name(name: str) -> bool:
    """Resources kube-scheduler tracks as scalars: extended, hugepages, attachable volumes, prefixed native."""
    return (
        is_extended_resource_name(name)
        or name.startswith((HUGEPAGES_PREFIX, ATTACHABLE_VOLUMES_PREFIX))
        or ("/" in name and NATIVE_RESOURCE_DOMAIN in name)
    )


#: ``(requested, allocatable) -> score`` over the aligned vectors; entries with allocatable 0 are unset.
VectorScorer = Callable[[Sequence[int], Sequence[int]], int]

_CPU, _MEMORY, _EPHEMERAL, _SCALAR, _ABSENT = range(5)


def _kind(name: str) -> int:
    if name == CPU:
        return _CPU
    if name == MEMORY:
        return _MEMORY
    if name == EPHEMERAL_STORAGE:
        return _EPHEMERAL
    # Anything else that is not a scalar resource (``pods``, unknown unprefixed names) is never in a
    # node's scalar map upstream, so it never contributes to a score.
    return _SCALAR if is_scalar_resource_name(name) else _ABSENT


class ResourceAllocationScorer:
    """Fills the (requested, allocatable) vectors for one node and applies a :data:`VectorScorer`."""

    __slots__ = ("_kinds", "_scorer", "resources", "use_requested")

    def __init__(self, resources: Sequence[ResourceSpec], scorer: VectorScorer, *, use_requested: bool) -> None:
        self.resources = tuple(resources)
        self.use_requested = use_requested
        self._scorer = scorer
        self._kinds = tuple(_kind(r.name) for r in self.resources)

    def pod_requests(self, pod: Pod) -> tuple[int, ...]:
        """The pod's request per configured resource (non-zero cpu/memory unless ``use_requested``)."""
        out: list[int] = []
        req = pod.requests
        for r, kind in zip(self.resources, self._kinds, strict=True):
            if kind == _CPU:
                out.append(req.milli_cpu if self.use_requested else pod.non_zero_milli_cpu)
            elif kind == _MEMORY:
                out.append(req.memory if self.use_requested else pod.non_zero_memory)
            elif kind == _EPHEMERAL:
                out.append(req.ephemeral_storage)
            elif kind == _SCALAR:
                out.append(req.scalar.get(r.name, 0))
            else:
                out.append(0)
        return tuple(out)

    def score(self, node_info: NodeInfo, pod_requests: Sequence[int]) -> int:
        requested, _, allocatable = self.vectors(node_info, pod_requests)
        return self._scorer(requested, allocatable)

    def vectors(self, node_info: NodeInfo, pod_requests: Sequence[int]) -> tuple[list[int], list[int], list[int]]:
        """(requested with the pod, allocated without it, allocatable), upstream's
        ``calculateNodeAllocatableRequest``: BalancedAllocation (v1.37) scores the change between the
        first two, so it needs both; entries left out are 0 in all three."""
        n = len(self.resources)
        requested = [0] * n
        allocated = [0] * n
        allocatable = [0] * n
        alloc_res = node_info.allocatable
        node_req = node_info.requested
        for i in range(n):
            kind = self._kinds[i]
            pod_req = pod_requests[i]
            if kind == _CPU:
                alloc = alloc_res.milli_cpu
                used = node_req.milli_cpu if self.use_requested else node_info.non_zero_milli_cpu
            elif kind == _MEMORY:
                alloc = alloc_res.memory
                used = node_req.memory if self.use_requested else node_info.non_zero_memory
            elif kind == _EPHEMERAL:
                alloc = alloc_res.ephemeral_storage
                used = node_req.ephemeral_storage
            elif kind == _SCALAR:
                if pod_req == 0:
                    continue
                name = self.resources[i].name
                alloc = alloc_res.scalar.get(name, 0)
                used = node_req.scalar.get(name, 0)
            else:
                continue
            if alloc == 0:
                continue
            allocatable[i] = alloc
            allocated[i] = used
            requested[i] = used + pod_req
        return requested, allocated, allocatable


def read_resource_specs(
    reader: args_reader.ArgsReader, doc: Mapping[str, Any], key: str, path: str
) -> tuple[ResourceSpec, ...]:
    """Read a ``resources: [{name, weight}]`` list; a missing or 0 weight defaults to 1 (as kube-scheduler).

    Weight ranges differ per plugin, so the caller validates them.
    """
    out: list[ResourceSpec] = []
    for i, item in enumerate(reader.items(doc, key, path)):
        item_path = f"{path}.{key}[{i}]"
        if not isinstance(item, Mapping):
            reader.mapping(item, item_path, fields=())
            continue
        spec = reader.mapping(item, item_path, fields=("name", "weight"))
        name = reader.string(spec, "name", item_path)
        if not name:
            reader.error(f"{item_path}.name", "resource name is required")
        weight = reader.integer(spec, "weight", item_path, 0)
        out.append(ResourceSpec(name, weight or DEFAULT_RESOURCE_WEIGHT))
    return tuple(out)
