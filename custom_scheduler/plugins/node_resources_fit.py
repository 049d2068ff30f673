"""NodeResourcesFit: the node must have room for the pod's requests; score by a scoring strategy.

**Filter** (v1.28 semantics). The pod's effective request (containers, init containers, sidecars and
overhead, already folded into ``Pod.requests`` by the model) is compared with what is left on the node,
``allocatable − Σ requests of the pods on it`` (assumed pods included, actual requests, no 100m/200Mi
defaults). Every shortfall is reported, not just the first, so ``kubectl describe`` shows all of
``Too many pods``, ``Insufficient cpu``, ``Insufficient memory``, ``Insufficient ephemeral-storage``
and ``Insufficient <resource>``. Only resources the pod actually requests (> 0) are compared, so a
node already over-committed on cpu still takes a pod that requests none. Extended resources listed in
``ignoredResources``, or whose domain is in ``ignoredResourceGroups``, are not checked (a device
plugin or webhook handles them). Nor is an extended resource a DeviceClass backs (DRAExtendedResource,
GA in 1.37: its ``extendedResourceName`` or ``deviceclass.resource.kubernetes.io/<class>``) on a node
whose allocatable lacks it: DynamicResources allocates devices for it there (upstream's
``shouldDelegateResourceToDRA``). The status is Unschedulable: evicting pods frees resources, so
preemption may help; but when the pod requests more of some resource than the node can allocate at
all, no eviction makes room, and the status is UnschedulableAndUnresolvable (preemption skips the
node), as in upstream's ``fitsRequest`` (``InsufficientResource.Unresolvable``, v1.34+).

**Score** (``scoringStrategy``): ``LeastAllocated`` (default; spread), ``MostAllocated`` (bin-pack) or
``RequestedToCapacityRatio`` (a user-defined piecewise-linear function of utilisation), each over a
weighted resource list (default cpu:1, memory:1). See :mod:`.resource_allocation` for how the vectors
are built. No normalisation step: the scores are already 0–100.

PreFilter reduces the pod to the few integers the Filter compares (and the reason strings it may
emit), PreScore to the request vector the Score needs, so the per-node work stays a few comparisons.
On the daemon's path the same checks run on the snapshot's columns (``filter_mask``, ``score_batch``);
the per-node Filter reads only the NodeInfo, and each score formula is written once for both
(see :mod:`.resource_allocation`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from custom_scheduler.api.dra_extended import is_extended_resource_name as is_dra_extended_resource_name
from custom_scheduler.api.model import Pod
from custom_scheduler.api.resources import Resources
from custom_scheduler.framework import arrays, registry
from custom_scheduler.framework import cluster_events as ce
from custom_scheduler.framework.arrays import NodeArrays
from custom_scheduler.framework.interface import Handle
from custom_scheduler.framework.types import MAX_NODE_SCORE, SUCCESS, CycleState, NodeInfo, Snapshot, StateKey, Status
from custom_scheduler.plugins import args_reader, helpers, resource_allocation, resource_hints, signers
from custom_scheduler.plugins.helpers import MAX_CUSTOM_PRIORITY_SCORE, MAX_UTILIZATION, UtilizationShapePoint
from custom_scheduler.plugins.resource_allocation import DEFAULT_RESOURCES, Num, Ops, ResourceSpec

NAME = "NodeResourcesFit"

LEAST_ALLOCATED = "LeastAllocated"
MOST_ALLOCATED = "MostAllocated"
REQUESTED_TO_CAPACITY_RATIO = "RequestedToCapacityRatio"
SCORING_STRATEGY_TYPES = (LEAST_ALLOCATED, MOST_ALLOCATED, REQUESTED_TO_CAPACITY_RATIO)

ERR_REASON_TOO_MANY_PODS = "Too many pods"
ERR_REASON_INSUFFICIENT_FORMAT = "Insufficient {resource}"
ERR_REASON_INSUFFICIENT_CPU = "Insufficient cpu"
ERR_REASON_INSUFFICIENT_MEMORY = "Insufficient memory"
ERR_REASON_INSUFFICIENT_EPHEMERAL_STORAGE = "Insufficient ephemeral-storage"


def insufficient_reason(resource: str) -> str:
    return ERR_REASON_INSUFFICIENT_FORMAT.format(resource=resource)


# --- args ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RequestedToCapacityRatioParam:
    shape: tuple[UtilizationShapePoint, ...]
    """The points of the piecewise-linear scoring function; at least one."""


@dataclass(frozen=True, slots=True)
class ScoringStrategy:
    type: str = LEAST_ALLOCATED
    """One of ``LeastAllocated``, ``MostAllocated``, ``RequestedToCapacityRatio``."""
    resources: tuple[ResourceSpec, ...] = DEFAULT_RESOURCES
    """Resources to score on with weights 1..100; default cpu:1, memory:1."""
    requested_to_capacity_ratio: RequestedToCapacityRatioParam | None = None
    """Required with, and only allowed with, type ``RequestedToCapacityRatio``."""


@dataclass(frozen=True, slots=True)
class NodeResourcesFitArgs:
    ignored_resources: tuple[str, ...] = ()
    """Extended resources the Filter does not check (``ignoredResources``)."""
    ignored_resource_groups: tuple[str, ...] = ()
    """Domains (``example.com``) whose extended resources the Filter does not check."""
    scoring_strategy: ScoringStrategy = field(default_factory=ScoringStrategy)
    """How nodes are scored (``scoringStrategy``)."""


def parse_args(raw: Mapping[str, Any] | None, path: str) -> NodeResourcesFitArgs:
    """Parse, default and validate ``NodeResourcesFitArgs`` (kube-scheduler's v1 field names).

    Raises:
        ConfigError: listing every invalid field, with paths below ``path``.
    """
    r = args_reader.ArgsReader(path)
    doc = r.mapping(
        raw,
        path,
        fields=("ignoredResources", "ignoredResourceGroups", "scoringStrategy"),
        kind="NodeResourcesFitArgs",
    )
    ignored = r.strings(doc, "ignoredResources", path)
    for i, name in enumerate(ignored):
        for msg in args_reader.qualified_name_errors(name):
            r.error(f"{path}.ignoredResources[{i}]", msg)
    groups = r.strings(doc, "ignoredResourceGroups", path)
    for i, group in enumerate(groups):
        if "/" in group:
            r.error(f"{path}.ignoredResourceGroups[{i}]", "resource group name can't contain '/'")
        for msg in args_reader.qualified_name_errors(group):
            r.error(f"{path}.ignoredResourceGroups[{i}]", msg)
    strategy = ScoringStrategy()
    if doc.get("scoringStrategy") is not None:
        strategy = _parse_strategy(r, doc["scoringStrategy"], f"{path}.scoringStrategy")
    r.raise_errors()
    return NodeResourcesFitArgs(ignored, groups, strategy)


def _parse_strategy(r: args_reader.ArgsReader, raw: Any, path: str) -> ScoringStrategy:
    doc = r.mapping(raw, path, fields=("type", "resources", "requestedToCapacityRatio"))
    stype = r.string(doc, "type", path)
    if stype not in SCORING_STRATEGY_TYPES:
        supported = ", ".join(f'"{t}"' for t in SCORING_STRATEGY_TYPES)
        r.error(f"{path}.type", f'Unsupported value: "{stype}": supported values: {supported}')
    resources = resource_allocation.read_resource_specs(r, doc, "resources", path) or DEFAULT_RESOURCES
    for i, res in enumerate(resources):
        if not 0 < res.weight <= 100:
            r.error(f"{path}.resources[{i}].weight", f"resource weight of {res.name} not in valid range (0, 100]")
    rtcr: RequestedToCapacityRatioParam | None = None
    rtcr_path = f"{path}.requestedToCapacityRatio"
    if stype == REQUESTED_TO_CAPACITY_RATIO:
        if doc.get("requestedToCapacityRatio") is None:
            r.error(rtcr_path, "must be specified when type is RequestedToCapacityRatio")
        else:
            rtcr = _parse_rtcr(r, doc["requestedToCapacityRatio"], rtcr_path)
    elif doc.get("requestedToCapacityRatio") is not None:
        r.error(rtcr_path, "must be nil when type is not RequestedToCapacityRatio")
    return ScoringStrategy(stype, resources, rtcr)


def _parse_rtcr(r: args_reader.ArgsReader, raw: Any, path: str) -> RequestedToCapacityRatioParam:
    doc = r.mapping(raw, path, fields=("shape",))
    return RequestedToCapacityRatioParam(helpers.parse_shape(r, doc, path))


# --- filter --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PreFilterState:
    """The pod's request reduced to what the Filter compares."""

    milli_cpu: int
    memory: int
    ephemeral_storage: int
    scalars: tuple[tuple[str, int, str], ...]
    """(resource, quantity, reason) for each requested scalar resource that is not ignored."""
    requests_nothing: bool
    """The pod requests no resource at all: only the pod count is checked."""
    delegated: frozenset[str] = frozenset()
    """Extended resources a DeviceClass backs (DRAExtendedResource): on a node whose allocatable
    lacks one, DynamicResources allocates devices for it, so it is not checked here (fit.go
    ``shouldDelegateResourceToDRA``)."""


def compute_pre_filter_state(
    pod: Pod,
    *,
    ignored_resources: frozenset[str] = frozenset(),
    ignored_groups: frozenset[str] = frozenset(),
    dra_backed: Callable[[str], bool] | None = None,
) -> PreFilterState:
    """``dra_backed``: whether a DeviceClass maps the extended resource (None: no DRA)."""
    req = pod.requests
    scalars = []
    for name, qty in req.scalar.items():
        if qty == 0:
            continue
        if resource_allocation.is_extended_resource_name(name) and (
            name in ignored_resources or name.split("/", 1)[0] in ignored_groups
        ):
            continue
        scalars.append((name, qty, insufficient_reason(name)))
    nothing = not (req.milli_cpu or req.memory or req.ephemeral_storage or any(req.scalar.values()))
    delegated = frozenset(n for n, _, _ in scalars if dra_backed is not None and dra_backed(n))
    return PreFilterState(req.milli_cpu, req.memory, req.ephemeral_storage, tuple(scalars), nothing, delegated)


def insufficient_resources(s: PreFilterState, node_info: NodeInfo) -> list[str]:
    """Every reason the node cannot hold the request ``s``; empty when it fits."""
    return _insufficient(s, node_info.allocatable, node_info.requested, len(node_info.pods))


def _insufficient(s: PreFilterState, alloc: Resources, used: Resources, pods: int) -> list[str]:
    """:func:`insufficient_resources` on a node of allocatable ``alloc`` whose ``pods`` pods
    request ``used`` in all."""
    reasons: list[str] = []
    if pods + 1 > alloc.allowed_pods:
        reasons.append(ERR_REASON_TOO_MANY_PODS)
    if s.requests_nothing:
        return reasons
    if s.milli_cpu > 0 and s.milli_cpu > alloc.milli_cpu - used.milli_cpu:
        reasons.append(ERR_REASON_INSUFFICIENT_CPU)
    if s.memory > 0 and s.memory > alloc.memory - used.memory:
        reasons.append(ERR_REASON_INSUFFICIENT_MEMORY)
    if s.ephemeral_storage > 0 and s.ephemeral_storage > alloc.ephemeral_storage - used.ephemeral_storage:
        reasons.append(ERR_REASON_INSUFFICIENT_EPHEMERAL_STORAGE)
    for name, qty, reason in s.scalars:
        have = alloc.scalar.get(name, 0)
        if have <= 0 and name in s.delegated:
            continue  # DynamicResources allocates it from the node's devices
        if qty > have - used.scalar.get(name, 0):
            reasons.append(reason)
    return reasons


def _verdict(s: PreFilterState, node_info: NodeInfo, reasons: list[str]) -> Status:
    """The Filter's status for the shortfalls ``reasons``: a request beyond the node's whole
    allocatable cannot be helped by evicting pods (UnschedulableAndUnresolvable)."""
    if exceeds_allocatable(s, node_info):
        return Status.unresolvable(*reasons)
    return Status.unschedulable(*reasons)


def exceeds_allocatable(s: PreFilterState, node_info: NodeInfo) -> bool:
    """Whether the request ``s`` is more than the node's whole allocatable for some resource: then
    evicting every pod would not make it fit. Such a resource is always among the insufficient ones
    (requests on the node are never negative)."""
    alloc = node_info.allocatable
    return (
        s.milli_cpu > alloc.milli_cpu
        or s.memory > alloc.memory
        or s.ephemeral_storage > alloc.ephemeral_storage
        or any(
            qty > alloc.scalar.get(name, 0)
            for name, qty, _ in s.scalars
            if alloc.scalar.get(name, 0) > 0 or name not in s.delegated
        )
    )


def fits(pod: Pod, node_info: NodeInfo) -> list[str]:
    """Pure helper: the Filter's reasons for ``pod`` on ``node_info`` (no ignored resources)."""
    return insufficient_resources(compute_pre_filter_state(pod), node_info)


# --- score ---------------------------------------------------------------------------------------


def least_allocated_scorer(resources: Sequence[ResourceSpec]) -> resource_allocation.Formula:
    """``Σ w·(alloc − req)·100/alloc / Σ w``; a resource requested beyond capacity scores 0."""
    return _weighted_mean(
        resources, lambda ops, req, alloc, div: ops.where(req > alloc, 0, (alloc - req) * MAX_NODE_SCORE // div)
    )


def most_allocated_scorer(resources: Sequence[ResourceSpec]) -> resource_allocation.Formula:
    """``Σ w·min(req, alloc)·100/alloc / Σ w``."""
    return _weighted_mean(resources, lambda ops, req, alloc, div: ops.minimum(req, alloc) * MAX_NODE_SCORE // div)


def _weighted_mean(
    resources: Sequence[ResourceSpec], resource_score: Callable[[Ops, Num, Num, Num], Num]
) -> resource_allocation.Formula:
    """LeastAllocated's and MostAllocated's shared form: ``Σ w·s / Σ w`` over the resources the
    node has (allocatable > 0), where ``resource_score(ops, req, alloc, div)`` is one resource's
    0..100 (``div`` is ``alloc`` made safe to divide by where it is 0; requests are never
    negative, so a score there is 0 and only the weight's absence matters)."""
    weights = tuple(r.weight for r in resources)

    def score(ops: Ops, requested: Sequence[Num], allocated: Sequence[Num], allocatable: Sequence[Num]) -> Num:
        total: Num = 0
        weight_sum: Num = 0
        for req, alloc, w in zip(requested, allocatable, weights, strict=True):
            has = alloc > 0
            total = total + resource_score(ops, req, alloc, ops.where(has, alloc, 1)) * w
            weight_sum = weight_sum + ops.where(has, w, 0)
        return ops.where(weight_sum > 0, total // ops.where(weight_sum > 0, weight_sum, 1), 0)

    return score


def requested_to_capacity_ratio_scorer(
    resources: Sequence[ResourceSpec], shape: Sequence[UtilizationShapePoint]
) -> resource_allocation.Formula:
    """Piecewise-linear in utilisation; only resources scoring > 0 count in the weighted mean (upstream quirk).

    Scalar only (:data:`~.resource_allocation.SCALAR`): the shape is evaluated by
    :func:`helpers.broken_linear`, per node."""
    weights = tuple(r.weight for r in resources)
    scale = MAX_NODE_SCORE // MAX_CUSTOM_PRIORITY_SCORE
    points = tuple((p.utilization, p.score * scale) for p in shape)

    def score(ops: Ops, requested: Sequence[Num], allocated: Sequence[Num], allocatable: Sequence[Num]) -> Num:
        total = weight_sum = 0
        for req, alloc, w in zip(requested, allocatable, weights, strict=True):
            if alloc == 0:
                continue
            utilization = MAX_UTILIZATION if req > alloc else req * MAX_UTILIZATION // alloc
            s = helpers.broken_linear(points, utilization)
            if s > 0:
                total += s * w
                weight_sum += w
        return helpers.go_round_ratio(total, weight_sum) if weight_sum else 0

    return score


def build_scorer(strategy: ScoringStrategy) -> resource_allocation.ResourceAllocationScorer:
    vectorised = True
    if strategy.type == LEAST_ALLOCATED:
        fn = least_allocated_scorer(strategy.resources)
    elif strategy.type == MOST_ALLOCATED:
        fn = most_allocated_scorer(strategy.resources)
    elif strategy.type == REQUESTED_TO_CAPACITY_RATIO and strategy.requested_to_capacity_ratio is not None:
        fn = requested_to_capacity_ratio_scorer(strategy.resources, strategy.requested_to_capacity_ratio.shape)
        vectorised = False
    else:
        raise ValueError(f"scoring strategy {strategy.type!r} is not supported")
    return resource_allocation.ResourceAllocationScorer(
        strategy.resources, fn, use_requested=False, vectorised=vectorised
    )


def fits_mask(s: PreFilterState, cols: NodeArrays) -> arrays.Mask:
    """Per row of ``cols``: whether :func:`insufficient_resources` finds nothing on that node.

    The same comparisons as the scalar check, on the columns (the property tests hold the two
    equal); a scalar resource no node has or uses leaves 0 − 0 on every node."""
    ok: arrays.Mask = cols.col("pod_count") + 1 <= cols.col("allowed_pods")
    if s.requests_nothing:
        return ok
    for want, alloc, used in (
        (s.milli_cpu, "alloc_cpu", "req_cpu"),
        (s.memory, "alloc_mem", "req_mem"),
        (s.ephemeral_storage, "alloc_eph", "req_eph"),
    ):
        if want > 0:
            ok &= want <= cols.col(alloc) - cols.col(used)
    for name, qty, _ in s.scalars:
        have = cols.scalar_alloc.get(name)
        if have is not None:
            fits_here = qty <= have - cols.scalar_req[name]
            ok &= (fits_here | (have <= 0)) if name in s.delegated else fits_here
        elif qty > 0 and name not in s.delegated:
            ok &= False
    return ok


def rejections_of_rows(s: PreFilterState, cols: NodeArrays, rows: npt.NDArray[np.intp]) -> list[Status] | None:
    """:meth:`NodeResourcesFit.filter`'s status on each row of ``rows`` (rows :func:`fits_mask`
    rejects), from the columns: each reason of :func:`insufficient_resources` is one boolean column
    over the rows, in its order, and :func:`exceeds_allocatable` one more; each distinct
    combination is one (interned) status. None when some row has no reason (its mask would pass)."""
    checks: list[tuple[str, npt.NDArray[np.bool_]]] = [
        (ERR_REASON_TOO_MANY_PODS, cols.col("pod_count")[rows] + 1 > cols.col("allowed_pods")[rows])
    ]
    beyond = np.zeros(len(rows), dtype=np.bool_)
    for want, alloc_col, used_col, reason in (
        (s.milli_cpu, "alloc_cpu", "req_cpu", ERR_REASON_INSUFFICIENT_CPU),
        (s.memory, "alloc_mem", "req_mem", ERR_REASON_INSUFFICIENT_MEMORY),
        (s.ephemeral_storage, "alloc_eph", "req_eph", ERR_REASON_INSUFFICIENT_EPHEMERAL_STORAGE),
    ):
        total = cols.col(alloc_col)[rows]
        beyond |= want > total
        if want > 0 and not s.requests_nothing:
            checks.append((reason, want > total - cols.col(used_col)[rows]))
    for name, qty, reason in s.scalars:
        column = cols.scalar_alloc.get(name)
        none = np.zeros(len(rows), dtype=np.int64)  # a resource no node has: 0 - 0 on every row
        have, used = (none, none) if column is None else (column[rows], cols.scalar_req[name][rows])
        short = qty > have - used
        counted = have > 0 if name in s.delegated else np.ones(len(rows), dtype=np.bool_)
        beyond |= counted & (qty > have)
        if not s.requests_nothing:
            checks.append((reason, short & counted))
    codes = np.zeros(len(rows), dtype=np.int64)
    for k, (_, bad) in enumerate(checks):
        codes |= bad.astype(np.int64) << (k + 1)
    if not np.all(codes):
        return None
    codes |= beyond.astype(np.int64)
    table: dict[int, Status] = {}
    for code in np.unique(codes).tolist():
        reasons = [reason for k, (reason, _) in enumerate(checks) if code >> (k + 1) & 1]
        st = Status.unresolvable(*reasons) if code & 1 else Status.unschedulable(*reasons)
        table[code] = st.with_plugin(NAME)
    return [table[c] for c in codes.tolist()]


# --- plugin --------------------------------------------------------------------------------------

PRE_FILTER_KEY: StateKey[PreFilterState] = StateKey(f"PreFilter{NAME}")
PRE_SCORE_KEY: StateKey[tuple[int, ...]] = StateKey(f"PreScore{NAME}")


class NodeResourcesFit:
    """PreFilter/Filter on resource fit; PreScore/Score by the configured strategy.

    Fast paths (declared in :mod:`custom_scheduler.framework.interface`): :meth:`filter_mask`
    judges every snapshot row from the columns, :meth:`score_batch` scores rows element-wise;
    :meth:`filter` and :meth:`score` stay per node and are what the fast paths must equal.
    """

    #: Its ``sign_pod`` refuses some pods: the Signer asks it first.
    may_refuse_signing = True

    name: ClassVar[str] = NAME

    def __init__(self, args: NodeResourcesFitArgs | None, handle: Handle) -> None:
        self._handle = handle
        self.args = args or NodeResourcesFitArgs()
        self._ignored = frozenset(self.args.ignored_resources)
        self._ignored_groups = frozenset(self.args.ignored_resource_groups)
        self._scorer = build_scorer(self.args.scoring_strategy)

    def events_to_register(self) -> list[ce.ClusterEventWithHint]:
        """Room freed or added (see :mod:`.resource_hints`)."""
        return resource_hints.registrations()

    def sign_pod(self, pod: Pod) -> signers.Fragments | None:
        """The requests; not signable while a DeviceClass backs one of its extended resources
        (upstream: DRA-backed extended resources turn signatures off)."""
        backed = self._dra_backed(pod)
        if backed is not None and any(backed(n) for n, v in pod.requests.scalar.items() if v):
            return None
        return signers.resources(pod)

    def pre_filter(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        s = compute_pre_filter_state(
            pod, ignored_resources=self._ignored, ignored_groups=self._ignored_groups, dra_backed=self._dra_backed(pod)
        )
        state.write(PRE_FILTER_KEY, s)
        return SUCCESS

    def _dra_backed(self, pod: Pod) -> Callable[[str], bool] | None:
        """Which of the pod's extended resources a DeviceClass backs (None: it asks for none)."""
        if not pod.extended_containers:
            return None
        dra = getattr(self._handle, "dra", None)
        if dra is None:
            return None
        return lambda name: is_dra_extended_resource_name(name) and dra.extended_resource_class(name) is not None

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        """The node's own fields against PreFilter's request: every shortfall is a reason."""
        s = state.read(PRE_FILTER_KEY)
        reasons = _insufficient(s, node_info.allocatable, node_info.requested, len(node_info.pods))
        return _verdict(s, node_info, reasons) if reasons else SUCCESS

    def filter_requested(
        self, state: CycleState, pod: Pod, node_info: NodeInfo, requested: Resources, pods: int
    ) -> Status:
        """:meth:`filter` with the node's pods requesting ``requested`` and numbering ``pods``
        (:class:`~custom_scheduler.framework.interface.RequestsFilterPlugin`): all it reads of them."""
        s = state.read(PRE_FILTER_KEY)
        reasons = _insufficient(s, node_info.allocatable, requested, pods)
        return _verdict(s, node_info, reasons) if reasons else SUCCESS

    def filter_mask(self, state: CycleState, pod: Pod, snap: Snapshot) -> arrays.Mask | bool | None:
        """:meth:`filter`'s verdict for every snapshot row at once (:func:`fits_mask`)."""
        cols: NodeArrays | None = snap.arrays
        if cols is None:
            return None
        return fits_mask(state.read(PRE_FILTER_KEY), cols)

    def filter_statuses(
        self, state: CycleState, pod: Pod, snap: Snapshot, rows: npt.NDArray[np.intp]
    ) -> list[Status] | None:
        """:meth:`filter`'s status on each of the rows its mask rejects (:func:`rejections_of_rows`)."""
        cols: NodeArrays | None = snap.arrays
        return None if cols is None else rejections_of_rows(state.read(PRE_FILTER_KEY), cols, rows)

    def pre_score(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        state.write(PRE_SCORE_KEY, self._scorer.pod_requests(pod))
        return SUCCESS

    def _pod_requests(self, state: CycleState, pod: Pod) -> tuple[int, ...]:
        pod_requests = state.get(PRE_SCORE_KEY)
        if pod_requests is None:  # PreScore disabled in the profile: compute here, as upstream does.
            pod_requests = self._scorer.pod_requests(pod)
        return pod_requests

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> int:
        return self._scorer.score(node_info, self._pod_requests(state, pod))

    def score_batch(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> list[int] | npt.NDArray[np.int64]:
        """:meth:`score` for every node: element-wise on the columns for snapshot rows."""
        pod_requests = self._pod_requests(state, pod)
        if isinstance(nodes, arrays.NodeRows) and self._scorer.vectorised:
            return self._scorer.score_rows(nodes.cols, nodes.rows, pod_requests)
        return [self._scorer.score(ni, pod_requests) for ni in nodes]


SPEC = registry.PluginSpec(NAME, factory=NodeResourcesFit, parse_args=parse_args)
