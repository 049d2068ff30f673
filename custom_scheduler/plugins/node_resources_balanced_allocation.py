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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from custom_scheduler.api.model import Pod
from custom_scheduler.framework import arrays, registry
from custom_scheduler.framework.interface import Handle
from custom_scheduler.framework.types import MAX_NODE_SCORE, SKIP, SUCCESS, CycleState, NodeInfo, StateKey, Status
from custom_scheduler.plugins import args_reader, resource_allocation, signers
from custom_scheduler.plugins.resource_allocation import DEFAULT_RESOURCES, SCALAR, Num, Ops, ResourceSpec

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


def _balance(ops: Ops, requested: Sequence[Num], has: Sequence[Num], safe: Sequence[Num], count: Num) -> Num:
    """:func:`balance` given, per resource, whether it is present (allocatable > 0) and a
    non-zero allocatable to divide by, and how many are present (shared by the with-pod and
    without-pod balances of one node)."""
    n = len(requested)
    fractions = [ops.minimum(ops.fdiv(req, d), 1.0) for req, d in zip(requested, safe, strict=True)]
    std: Num = 0.0
    if n == 2:  # two fractions exactly when both are present
        std = ops.where(has[0] & has[1], ops.absolute((fractions[0] - fractions[1]) / 2), 0.0)
    elif n > 2:
        fractions = [ops.where(h, f, 0.0) for f, h in zip(fractions, has, strict=True)]
        total: Num = 0.0
        first: Num = 0.0
        second: Num = 0.0
        seen: Num = 0
        for fraction, h in zip(fractions, has, strict=True):
            total = total + fraction
            first = ops.where(h & (seen == 0), fraction, first)
            second = ops.where(h & (seen == 1), fraction, second)
            seen = seen + h
        safe_count = ops.where(count > 0, count, 1)
        mean = total / safe_count
        acc: Num = 0.0
        for fraction, h in zip(fractions, has, strict=True):
            acc = acc + ops.where(h, (fraction - mean) * (fraction - mean), 0.0)
        std = ops.where(
            count == 2,
            ops.absolute((first - second) / 2),
            ops.where(count > 2, ops.sqrt(acc / safe_count), 0.0),
        )
    return ops.trunc((1 - std) * MAX_NODE_SCORE)


def _presence(ops: Ops, allocatable: Sequence[Num]) -> tuple[list[Num], list[Num], Num]:
    has = [alloc > 0 for alloc in allocatable]
    safe = [ops.where(h, alloc, 1) for h, alloc in zip(has, allocatable, strict=True)]
    count: Num = 0
    if len(has) > 2:
        for h in has:
            count = count + h
    return has, safe, count


def balance(ops: Ops, requested: Sequence[Num], allocatable: Sequence[Num]) -> Num:
    """A node's balance, ``int((1 − std(fractions)) × 100)``, float arithmetic in upstream's order
    (``balancedResourceScore``), for one node (:data:`SCALAR`) or many (:data:`VECTOR`).

    Resources with allocatable 0 are left out; a fraction is ``min(req / alloc, 1)``. With exactly
    two fractions the std is ``|f1 − f2| / 2``, with more the population std, with fewer 0. Left-out
    resources add exact zeros to the sums, so the operations on the fractions present are upstream's.
    """
    return _balance(ops, requested, *_presence(ops, allocatable))


def balanced_resource_score(requested: Sequence[int], allocatable: Sequence[int]) -> int:
    """:func:`balance` of one node (also Accelerators' balance term)."""
    score: int = balance(SCALAR, requested, allocatable)
    return score


_HALF = MAX_NODE_SCORE // 2


def balanced_resource_scorer(
    ops: Ops, requested: Sequence[Num], allocated: Sequence[Num], allocatable: Sequence[Num]
) -> Num:
    """The score of the change in balance the pod makes (v1.37's ``balancedResourceScorer``):
    ``requested`` includes the pod, ``allocated`` does not. A node with fewer than two resources to
    compare has balance 100 with and without the pod, so it scores 75."""
    presence = _presence(ops, allocatable)
    with_pod = _balance(ops, requested, *presence)
    without_pod = _balance(ops, allocated, *presence)
    return _HALF + (_HALF + with_pod - without_pod) // 2


PRE_SCORE_KEY: StateKey[tuple[int, ...]] = StateKey(f"PreScore{NAME}")


class NodeResourcesBalancedAllocation:
    """PreScore/Score: favour even utilisation across the configured resources.

    :meth:`score_batch` (the declared batch fast path) evaluates the same formula element-wise on
    the snapshot's columns; :meth:`score` reads one NodeInfo and is what it must equal.
    """

    #: Its ``sign_pod`` refuses some pods: the Signer asks it first.
    may_refuse_signing = True

    name: ClassVar[str] = NAME

    def __init__(self, args: NodeResourcesBalancedAllocationArgs | None, handle: Handle) -> None:
        self._handle = handle
        self.args = args or NodeResourcesBalancedAllocationArgs()
        self._scorer = resource_allocation.ResourceAllocationScorer(
            self.args.resources, balanced_resource_scorer, use_requested=True
        )

    def sign_pod(self, pod: Pod) -> signers.Fragments | None:
        """The requests; not signable with an extended resource a DeviceClass backs (as Fit)."""
        dra = getattr(self._handle, "dra", None)
        if (
            pod.extended_containers
            and dra is not None
            and any(dra.extended_resource_class(n) for n in pod.requests.scalar)
        ):
            return None
        return signers.resources(pod)

    def pre_score(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        pod_requests = self._scorer.pod_requests(pod)
        if not any(pod_requests):
            return SKIP  # best effort: it changes no node's balance (upstream skips it since v1.37)
        state.write(PRE_SCORE_KEY, pod_requests)
        return SUCCESS

    def _pod_requests(self, state: CycleState, pod: Pod) -> tuple[int, ...] | None:
        """PreScore's requests; without PreScore (disabled in the profile) computed here, as
        upstream does, and None for a best-effort pod (it scores 0 then)."""
        pod_requests = state.get(PRE_SCORE_KEY)
        if pod_requests is None:
            pod_requests = self._scorer.pod_requests(pod)
            if not any(pod_requests):
                return None
        return pod_requests

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> int:
        pod_requests = self._pod_requests(state, pod)
        return 0 if pod_requests is None else self._scorer.score(node_info, pod_requests)

    def score_batch(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> list[int] | npt.NDArray[np.int64]:
        """:meth:`score` for every node: element-wise on the columns for snapshot rows."""
        pod_requests = self._pod_requests(state, pod)
        if pod_requests is None:
            return [0] * len(nodes)
        if isinstance(nodes, arrays.NodeRows):
            return self._scorer.score_rows(nodes.cols, nodes.rows, pod_requests)
        return [self._scorer.score(ni, pod_requests) for ni in nodes]


SPEC = registry.PluginSpec(NAME, factory=NodeResourcesBalancedAllocation, parse_args=parse_args)
