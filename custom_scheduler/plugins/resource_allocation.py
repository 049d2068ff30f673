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

**One definition per formula.** Each scoring formula (LeastAllocated, MostAllocated,
RequestedToCapacityRatio, BalancedAllocation) is written once, as a :data:`Formula` over an
:class:`Ops` namespace: with :data:`SCALAR` its operands are one node's Python ints (the per-node
``score``, which reads the NodeInfo), with :data:`VECTOR` they are int64 columns of many nodes (the
batch path over the snapshot's columns, see :meth:`ResourceAllocationScorer.score_rows`). Both
evaluate the same integer and IEEE float operations in the same order, so the results are the same
bit for bit; the property tests compare the two input paths (NodeInfo fields against columns) for
random clusters, and upstream's table cases pin the formulas themselves.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from custom_scheduler.api.model import Pod
from custom_scheduler.api.resources import CPU, EPHEMERAL_STORAGE, MEMORY
from custom_scheduler.framework.arrays import NodeArrays
from custom_scheduler.framework.types import NodeInfo
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


Num = Any
"""An operand of a :data:`Formula`: a Python int/float/bool (one node) or a numpy array (many)."""


class Ops:
    """The operations a :data:`Formula` may use besides ``+ - * // / < <= > == &``, which Python
    numbers and numpy arrays share. :data:`SCALAR` is plain Python on one node's numbers;
    :data:`VECTOR` is numpy element-wise. Each pair is the same operation: ``where`` picks (both
    arms are evaluated, so guard divisions with a safe denominator), ``minimum``/``absolute``/
    ``sqrt`` are exact in both, ``fdiv`` is ``float(a) / float(b)`` (Go's
    ``float64(a)/float64(b)``), ``trunc`` is Go's ``int64(x)`` (toward zero)."""

    __slots__ = ("absolute", "fdiv", "minimum", "sqrt", "trunc", "where")

    def __init__(
        self,
        *,
        where: Callable[[Num, Num, Num], Num],
        minimum: Callable[[Num, Num], Num],
        absolute: Callable[[Num], Num],
        sqrt: Callable[[Num], Num],
        fdiv: Callable[[Num, Num], Num],
        trunc: Callable[[Num], Num],
    ) -> None:
        self.where = where
        self.minimum = minimum
        self.absolute = absolute
        self.sqrt = sqrt
        self.fdiv = fdiv
        self.trunc = trunc


def _scalar_where(cond: Num, a: Num, b: Num) -> Num:
    return a if cond else b


def _scalar_fdiv(a: Num, b: Num) -> Num:
    return float(a) / float(b)


def _vector_fdiv(a: Num, b: Num) -> Num:
    return np.true_divide(a, b)  # int64 operands are converted to float64 first, as float(a)/float(b)


def _vector_trunc(x: Num) -> Num:
    return np.asarray(x).astype(np.int64)


SCALAR = Ops(where=_scalar_where, minimum=min, absolute=abs, sqrt=math.sqrt, fdiv=_scalar_fdiv, trunc=int)
VECTOR = Ops(where=np.where, minimum=np.minimum, absolute=np.abs, sqrt=np.sqrt, fdiv=_vector_fdiv, trunc=_vector_trunc)

#: ``(ops, requested, allocated, allocatable) -> score``: one node's or many nodes' score from the
#: per-resource vectors (with the pod, without it, allocatable). Entries whose allocatable is 0 are
#: left out and must not change the result, whatever their other two values.
Formula = Callable[[Ops, Sequence[Num], Sequence[Num], Sequence[Num]], Num]

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
    """Fills the (requested, allocated, allocatable) vectors, from one NodeInfo or from the
    snapshot's columns, and applies a :data:`Formula` to them."""

    __slots__ = ("_formula", "_kinds", "resources", "use_requested", "vectorised")

    def __init__(
        self, resources: Sequence[ResourceSpec], formula: Formula, *, use_requested: bool, vectorised: bool = True
    ) -> None:
        self.resources = tuple(resources)
        self.use_requested = use_requested
        self.vectorised = vectorised
        """Whether ``formula`` works with :data:`VECTOR` (RequestedToCapacityRatio's shape does not)."""
        self._formula = formula
        self._kinds = tuple(_kind(r.name) for r in self.resources)

    def pod_requests(self, pod: Pod) -> tuple[int, ...]:
        """The pod's request per configured resource (non-zero cpu/memory unless ``use_requested``)."""
        out: list[int] = []
        req, nz_cpu, nz_mem = pod.requests, pod.non_zero_milli_cpu, pod.non_zero_memory
        if not self.use_requested and pod.container_requests is not None:
            # NodeResourcesFit (the one non-zero scorer) ignores pod-level resources, as 1.37.2's.
            req, nz_cpu, nz_mem = pod.container_requests
        for r, kind in zip(self.resources, self._kinds, strict=True):
            if kind == _CPU:
                out.append(req.milli_cpu if self.use_requested else nz_cpu)
            elif kind == _MEMORY:
                out.append(req.memory if self.use_requested else nz_mem)
            elif kind == _EPHEMERAL:
                out.append(req.ephemeral_storage)
            elif kind == _SCALAR:
                out.append(req.scalar.get(r.name, 0))
            else:
                out.append(0)
        return tuple(out)

    def score(self, node_info: NodeInfo, pod_requests: Sequence[int]) -> int:
        """The formula on one node, from its NodeInfo (the per-node ``score``)."""
        score: int = self._formula(SCALAR, *self.vectors(node_info, pod_requests))
        return score

    def score_rows(
        self, cols: NodeArrays, rows: npt.NDArray[np.intp], pod_requests: Sequence[int]
    ) -> npt.NDArray[np.int64]:
        """The formula on the nodes at ``rows`` of ``cols``, element-wise (the batch path); only for
        a :attr:`vectorised` formula."""
        scores: npt.NDArray[np.int64] = np.asarray(
            self._formula(VECTOR, *self.columns(cols, rows, pod_requests)), dtype=np.int64
        )
        if scores.shape != rows.shape:  # every resource left out: the formula gave one constant
            scores = np.full(rows.shape, scores, dtype=np.int64)
        return scores

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

    def columns(
        self, cols: NodeArrays, rows: npt.NDArray[np.intp], pod_requests: Sequence[int]
    ) -> tuple[list[Num], list[Num], list[Num]]:
        """:meth:`vectors` for the nodes at ``rows`` of the snapshot's columns, one int64 array per
        resource (allocatable a plain 0 for a resource left out on every node). Rows whose allocatable
        is 0 keep their requests: formulas ignore such entries."""
        requested: list[Num] = []
        allocated: list[Num] = []
        allocatable: list[Num] = []
        for r, kind, pod_req in zip(self.resources, self._kinds, pod_requests, strict=True):
            alloc: Num = 0
            used: Num = 0
            if kind == _CPU:
                alloc = cols.col("alloc_cpu")[rows]
                used = cols.col("req_cpu" if self.use_requested else "nz_cpu")[rows]
            elif kind == _MEMORY:
                alloc = cols.col("alloc_mem")[rows]
                used = cols.col("req_mem" if self.use_requested else "nz_mem")[rows]
            elif kind == _EPHEMERAL:
                alloc = cols.col("alloc_eph")[rows]
                used = cols.col("req_eph")[rows]
            elif kind == _SCALAR and pod_req != 0 and r.name in cols.scalar_alloc:
                alloc = cols.scalar_alloc[r.name][rows]
                used = cols.scalar_req[r.name][rows]
            allocatable.append(alloc)
            allocated.append(used)
            requested.append(used + pod_req)
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
