"""NodeResourcesBalancedAllocation: prefer nodes whose resources would be used evenly.

A node with 90 % of its cpu requested but 10 % of its memory strands memory nobody can use; this
score favours placements that keep the utilisation fractions of the configured resources (default
cpu and memory) close together. With the pod placed, each resource's fraction is
``min(1, requested / allocatable)`` over *actual* requests (v1.28+; resources with allocatable 0 are
skipped); the score is ``int((1 − std) × 100)``, where ``std`` is the population standard deviation of
the fractions (``|f1 − f2| / 2`` for two, 0 for fewer). Two resources thus score
``100 − 50·|f_cpu − f_mem|``, half as sensitive as v1.20's formula.

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
from custom_scheduler.framework.types import MAX_NODE_SCORE, SUCCESS, CycleState, NodeInfo, StateKey, Status
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


def balanced_resource_scorer(requested: Sequence[int], allocatable: Sequence[int]) -> int:
    """``int((1 − std(fractions)) × 100)``, float arithmetic in upstream's order."""
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


def _balanced_cpu_mem(nodes: Sequence[NodeInfo], p_cpu: int, p_mem: int) -> list[int]:
    """:func:`balanced_resource_scorer` over (cpu, memory) for many nodes in one loop.

    Same float operations in the same order, so the results are identical.
    """
    out = []
    for ni in nodes:
        node = ni.node
        if node is None:
            out.append(MAX_NODE_SCORE)
            continue
        alloc = node.allocatable
        a_cpu, a_mem = alloc.milli_cpu, alloc.memory
        req = ni.requested
        if a_cpu and a_mem:
            f1 = min(float(req.milli_cpu + p_cpu) / float(a_cpu), 1.0)
            f2 = min(float(req.memory + p_mem) / float(a_mem), 1.0)
            out.append(int((1 - abs((f1 - f2) / 2)) * MAX_NODE_SCORE))
        else:
            out.append(int((1 - 0.0) * MAX_NODE_SCORE))
    return out


def _vector_balanced(
    arrays_: NodeArrays, idx: npt.NDArray[np.intp], p_cpu: int, p_mem: int
) -> npt.NDArray[np.int64]:
    """:func:`_balanced_cpu_mem` over snapshot columns: the same float operations, element-wise."""
    a_cpu = arrays_.col("alloc_cpu")[idx]
    a_mem = arrays_.col("alloc_mem")[idx]
    both = (a_cpu > 0) & (a_mem > 0)
    f1 = np.minimum((arrays_.col("req_cpu")[idx] + p_cpu) / np.where(a_cpu > 0, a_cpu, 1), 1.0)
    f2 = np.minimum((arrays_.col("req_mem")[idx] + p_mem) / np.where(a_mem > 0, a_mem, 1), 1.0)
    score = ((1 - np.abs((f1 - f2) / 2)) * MAX_NODE_SCORE).astype(np.int64)
    out: npt.NDArray[np.int64] = np.where(both, score, MAX_NODE_SCORE).astype(np.int64, copy=False)
    return out


PRE_SCORE_KEY: StateKey[tuple[int, ...]] = StateKey(f"PreScore{NAME}")


class NodeResourcesBalancedAllocation:
    """PreScore/Score: favour even utilisation across the configured resources."""

    name: ClassVar[str] = NAME

    def __init__(self, args: NodeResourcesBalancedAllocationArgs | None, handle: Handle) -> None:
        self._handle = handle
        self.args = args or NodeResourcesBalancedAllocationArgs()
        self._scorer = resource_allocation.ResourceAllocationScorer(
            self.args.resources, balanced_resource_scorer, use_requested=True
        )
        self._cpu_mem = tuple(r.name for r in self.args.resources) == ("cpu", "memory")

    def pre_score(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        state.write(PRE_SCORE_KEY, self._scorer.pod_requests(pod))
        return SUCCESS

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> int:
        pod_requests = state.get(PRE_SCORE_KEY)
        if pod_requests is None:  # PreScore disabled in the profile: compute here, as upstream does.
            pod_requests = self._scorer.pod_requests(pod)
        return self._scorer.score(node_info, pod_requests)

    def score_batch(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> list[int] | npt.NDArray[np.int64]:
        """:meth:`score` for every node at once (the runtime prefers this when present)."""
        pod_requests = state.get(PRE_SCORE_KEY)
        if pod_requests is None:
            pod_requests = self._scorer.pod_requests(pod)
        if self._cpu_mem:
            rows = arrays.rows_of(self._handle, nodes, state)
            if rows is not None:
                return _vector_balanced(rows[0], rows[1], pod_requests[0], pod_requests[1])
            return _balanced_cpu_mem(nodes, pod_requests[0], pod_requests[1])
        return [self._scorer.score(node_info, pod_requests) for node_info in nodes]


SPEC = registry.PluginSpec(NAME, factory=NodeResourcesBalancedAllocation, parse_args=parse_args)
