"""NodeResourcesBalancedAllocation: prefer placements that make a node's resource use more even.

A node with 90 % of its cpu requested but 10 % of its memory strands memory nobody can use; this
score favours placements that bring the utilisation fractions of the configured resources (default
cpu and memory) closer together. A resource's fraction is ``min(1, requested / allocatable)`` over
*actual* requests (v1.28+; resources with allocatable 0, and scalar resources the pod does not
request, are left out); a node's balance is ``int((1 − std) × 100)``, where ``std`` is the population
standard deviation of the fractions (``|f1 − f2| / 2`` for two, 0 for fewer).

Since v1.37 the score is the *change* the pod makes, not the balance it leaves (upstream's
``balancedResourceScorer``): ``50 + (50 + with − without) // 2``, with ``with`` / ``without`` the
balance with and without the pod. A pod that evens a lopsided node out scores up to 100, one that
unbalances an even node down to 50, and one that changes nothing 75 (also the score of a node with
fewer than two resources to compare). The balance is at least 50 (the std of fractions in [0, 1] is
at most 0.5), so the integer division never meets a negative operand and ``//`` is Go's ``/``.
A best-effort pod (no requests on any configured resource) is skipped at PreScore, as upstream.

Weights are accepted for config compatibility but must be 1: the formula does not use them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from custom_scheduler.framework import arrays, registry
from custom_scheduler.framework.arrays import NodeArrays
from custom_scheduler.framework.interface import Handle
from custom_scheduler.framework.types import MAX_NODE_SCORE, SKIP, SUCCESS, CycleState, NodeInfo, StateKey, Status
from custom_scheduler.model import Pod
from custom_scheduler.plugins import args_reader, resource_allocation
from custom_scheduler.plugins.resource_allocation import DEFAULT_RESOURCES, ResourceSpec

NAME = "NodeResourcesBalancedAllocation"


@dataclass(frozen=True, slots=True)
class NodeResourcesBalancedAllocationArgs:
    resources: tuple[ResourceSpec, ...] = DEFAULT_RESOURCES
    """Resources whose utilisation is balanced; default cpu and memory. Weights must be 1."""


def parse_args(raw: Mapping[str, Any] | None, path: str) -> NodeResourcesBalancedAllocationArgs:
    """Parse, default and validate ``NodeResourcesBalancedAllocationArgs``.

    Raises:
        ConfigError: listing every invalid field, with paths below ``path``.
    """
    r = args_reader.ArgsReader(path)
    doc = r.mapping(raw, path, fields=("resources",), kind="NodeResourcesBalancedAllocationArgs")
    resources = resource_allocation.read_resource_specs(r, doc, "resources", path) or DEFAULT_RESOURCES
    seen: set[str] = set()
    for i, res in enumerate(resources):
        if res.name in seen:
            r.error(f"{path}.resources[{i}].name", f'Duplicate value: "{res.name}"')
        seen.add(res.name)
        if res.weight != 1:
            r.error(f"{path}.resources[{i}].weight", "must be 1")
    r.raise_errors()
    return NodeResourcesBalancedAllocationArgs(resources)


def balanced_resource_score(requested: Sequence[int], allocatable: Sequence[int]) -> int:
    """A node's balance, ``int((1 − std(fractions)) × 100)``, float arithmetic in upstream's order
    (``balancedResourceScore``)."""
    fractions: list[float] = []
    total = 0.0
    for req, alloc in zip(requested, allocatable, strict=True):
        if alloc == 0:
            continue
        fraction = min(float(req) / float(alloc), 1.0)
        total += fraction
        fractions.append(fraction)
    std = 0.0
    if len(fractions) == 2:
        std = abs((fractions[0] - fractions[1]) / 2)
    elif len(fractions) > 2:
        mean = total / len(fractions)
        acc = 0.0
        for f in fractions:
            acc = acc + (f - mean) * (f - mean)
        std = math.sqrt(acc / len(fractions))
    return int((1 - std) * MAX_NODE_SCORE)


def balanced_resource_scorer(requested: Sequence[int], allocated: Sequence[int], allocatable: Sequence[int]) -> int:
    """The score of the change in balance the pod makes (v1.37's ``balancedResourceScorer``):
    ``requested`` includes the pod, ``allocated`` does not."""
    with_pod = balanced_resource_score(requested, allocatable)
    without_pod = balanced_resource_score(allocated, allocatable)
    return MAX_NODE_SCORE // 2 + (MAX_NODE_SCORE // 2 + with_pod - without_pod) // 2


_HALF = MAX_NODE_SCORE // 2
#: The score of a node with fewer than two resources to compare: balance 100 with and without the pod.
_NO_CHANGE = _HALF + _HALF // 2


def _balanced_cpu_mem(nodes: Sequence[NodeInfo], p_cpu: int, p_mem: int) -> list[int]:
    """:func:`balanced_resource_scorer` over (cpu, memory) for many nodes in one loop.

    Same float operations in the same order, so the results are identical.
    """
    out = []
    for ni in nodes:
        node = ni.node
        if node is None:
            out.append(_NO_CHANGE)
            continue
        alloc = node.allocatable
        a_cpu, a_mem = alloc.milli_cpu, alloc.memory
        req = ni.requested
        if a_cpu and a_mem:
            f1 = min(float(req.milli_cpu + p_cpu) / float(a_cpu), 1.0)
            f2 = min(float(req.memory + p_mem) / float(a_mem), 1.0)
            g1 = min(float(req.milli_cpu) / float(a_cpu), 1.0)
            g2 = min(float(req.memory) / float(a_mem), 1.0)
            with_pod = int((1 - abs((f1 - f2) / 2)) * MAX_NODE_SCORE)
            without_pod = int((1 - abs((g1 - g2) / 2)) * MAX_NODE_SCORE)
            out.append(_HALF + (_HALF + with_pod - without_pod) // 2)
        else:
            out.append(_NO_CHANGE)
    return out


def _vector_balanced(arrays_: NodeArrays, idx: npt.NDArray[np.intp], p_cpu: int, p_mem: int) -> npt.NDArray[np.int64]:
    """:func:`_balanced_cpu_mem` over snapshot columns: the same float operations, element-wise."""
    a_cpu = arrays_.col("alloc_cpu")[idx]
    a_mem = arrays_.col("alloc_mem")[idx]
    both = (a_cpu > 0) & (a_mem > 0)
    d_cpu = np.where(a_cpu > 0, a_cpu, 1)
    d_mem = np.where(a_mem > 0, a_mem, 1)
    r_cpu = arrays_.col("req_cpu")[idx]
    r_mem = arrays_.col("req_mem")[idx]
    f1 = np.minimum((r_cpu + p_cpu) / d_cpu, 1.0)
    f2 = np.minimum((r_mem + p_mem) / d_mem, 1.0)
    g1 = np.minimum(r_cpu / d_cpu, 1.0)
    g2 = np.minimum(r_mem / d_mem, 1.0)
    with_pod = ((1 - np.abs((f1 - f2) / 2)) * MAX_NODE_SCORE).astype(np.int64)
    without_pod = ((1 - np.abs((g1 - g2) / 2)) * MAX_NODE_SCORE).astype(np.int64)
    score = _HALF + (_HALF + with_pod - without_pod) // 2
    out: npt.NDArray[np.int64] = np.where(both, score, _NO_CHANGE).astype(np.int64, copy=False)
    return out


PRE_SCORE_KEY: StateKey[tuple[int, ...]] = StateKey(f"PreScore{NAME}")


class NodeResourcesBalancedAllocation:
    """PreScore/Score: favour even utilisation across the configured resources."""

    name: ClassVar[str] = NAME

    def __init__(self, args: NodeResourcesBalancedAllocationArgs | None, handle: Handle) -> None:
        self._handle = handle
        self.args = args or NodeResourcesBalancedAllocationArgs()
        self._scorer = resource_allocation.ResourceAllocationScorer(
            self.args.resources, balanced_resource_score, use_requested=True
        )
        self._cpu_mem = tuple(r.name for r in self.args.resources) == ("cpu", "memory")

    def pre_score(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        pod_requests = self._scorer.pod_requests(pod)
        if not any(pod_requests):
            return SKIP  # best effort: it changes no node's balance (upstream skips it since v1.37)
        state.write(PRE_SCORE_KEY, pod_requests)
        return SUCCESS

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> int:
        pod_requests = state.get(PRE_SCORE_KEY)
        if pod_requests is None:  # PreScore disabled in the profile: compute here, as upstream does.
            pod_requests = self._scorer.pod_requests(pod)
            if not any(pod_requests):
                return 0
        return balanced_resource_scorer(*self._scorer.vectors(node_info, pod_requests))

    def score_batch(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> list[int] | npt.NDArray[np.int64]:
        """:meth:`score` for every node at once (the runtime prefers this when present)."""
        pod_requests = state.get(PRE_SCORE_KEY)
        if pod_requests is None:
            pod_requests = self._scorer.pod_requests(pod)
            if not any(pod_requests):
                return [0] * len(nodes)
        if self._cpu_mem:
            rows = arrays.rows_of(self._handle, nodes, state)
            if rows is not None:
                return _vector_balanced(rows[0], rows[1], pod_requests[0], pod_requests[1])
            return _balanced_cpu_mem(nodes, pod_requests[0], pod_requests[1])
        return [balanced_resource_scorer(*self._scorer.vectors(ni, pod_requests)) for ni in nodes]


SPEC = registry.PluginSpec(NAME, factory=NodeResourcesBalancedAllocation, parse_args=parse_args)
