"""DynamicResources: allocate the devices of a pod's ResourceClaims (DRA, resource.k8s.io/v1).

kube-scheduler's ``DynamicResources`` (``pkg/scheduler/framework/plugins/dynamicresources``), which
is in the default profile since DRA went GA in 1.34. A pod names claims in ``spec.resourceClaims``,
directly (``resourceClaimName``) or through a template, whose claim the resourceclaim controller
creates and records in ``status.resourceClaimStatuses``.

- **PreEnqueue**: every claim of the pod must exist (a template's claim must have been created
  for this pod) and not be being deleted; until then the pod waits, gated, with upstream's reason
  (``pod "ns/name": ResourceClaim not created yet``). The claim's creation and the pod's status
  update release it.
- **PreFilter**: Skip for a pod without claims. A claim allocated and reserved for too many
  consumers is ``resourceclaim in use``; an allocated claim only fits the nodes its allocation's
  node selector admits; a claim another pod's binding is allocating right now makes the pod wait
  (``resource claim ns/name is in the process of being allocated``); a request's missing class is
  UnschedulableAndUnresolvable, a selector that does not compile is an error naming the claim.
- **Filter** per node: allocated claims must be available on the node (``resourceclaim not
  available on the node``); the others are allocated from the devices of the slices that reach
  the node (its ``nodeName``, ``allNodes``, or a ``nodeSelector`` matching it), minus every device
  allocated, assumed or pending (see :mod:`custom_scheduler.framework.dra_store`): ``cannot allocate all
  claims`` when they do not fit, an ERROR for a selector failing at runtime. The allocator's
  search is bounded by ``filterTimeout`` (below): past it the node gets upstream's ERROR
  ``node <name>: timed out trying to allocate devices``, which ends the attempt (kube-scheduler
  cancels the other nodes' filters on an ERROR; here the nodes after it in the same cycle answer at
  once with upstream's ``asked by caller to stop allocating devices: ...``) and the pod is retried
  after its backoff, as upstream.
- **Score**: upstream's (1.37): for ``firstAvailable`` requests, ``8 - index`` of the subrequest
  the node's allocation used, so nodes that satisfy the preferred alternative win; normalised to
  0..100. Upstream does not pack devices, so neither do we.
- **Reserve** records the node's allocations as pending in the store (so the next cycle never
  gives those devices to another pod); **Unreserve** drops them and, when PreBind already wrote
  the reservation, removes the pod from ``reservedFor`` again.
- **PreBind** (binding cycle, off the scheduling thread) adds upstream's finalizer
  ``resource.kubernetes.io/delete-protection`` with an update, then updates ``status`` with the
  allocation (device results and node selector) and ``reservedFor`` += the pod, each update
  carrying the claim's resourceVersion; on a conflict it re-reads the claim and tries again, and
  fails when the claim got deleted or allocated elsewhere meanwhile. The updated claim is then
  assumed in the store until the watch brings it back.

- **PostFilter** (:mod:`~custom_scheduler.plugins.dra_postfilter`): deallocates one allocated
  claim, reserved for nobody, that Filter found unavailable (``deallocation of ResourceClaim
  completed``), so the next attempt may allocate it where the pod fits.
- **Binding conditions** (:mod:`~custom_scheduler.plugins.dra_binding`): PreBind stamps
  ``allocationTimestamp`` and, for devices with ``bindingConditions``, waits (a Future, no thread)
  until the driver reports them; an allocated claim whose binding failed or timed out is
  unavailable on every node in Filter. ``devices.config`` comes from
  :mod:`~custom_scheduler.plugins.dra_config`, args from :mod:`~custom_scheduler.plugins.dra_args`.

Upstream's DynamicResources has no PreFilterExtensions: a preemption dry run never frees a
victim's devices, and "cannot allocate all claims" (UnschedulableAndUnresolvable) keeps a node out
of preemption's candidates. So it is here.

- **Extended resources backed by DRA** (:mod:`~custom_scheduler.plugins.dra_extended_claim`): a
  pod's ``example.com/gpu`` that a DeviceClass backs is allocated, on nodes without it in their
  allocatable, through a claim PreBind creates for the pod (NodeResourcesFit leaves such a
  resource to this plugin).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, ClassVar

from custom_scheduler.api import dra
from custom_scheduler.api.model import Pod
from custom_scheduler.framework import registry
from custom_scheduler.framework.cluster_events import ClusterEventWithHint
from custom_scheduler.framework.dra_store import DRAStore
from custom_scheduler.framework.interface import Handle, PostFilterResult
from custom_scheduler.framework.types import (
    MAX_NODE_SCORE,
    SKIP,
    SUCCESS,
    CycleState,
    NodeInfo,
    NodeScore,
    StateKey,
    Status,
)
from custom_scheduler.plugins import (
    dra_allocator,
    dra_args,
    dra_binding,
    dra_claim_writes,
    dra_config,
    dra_extended_claim,
    dra_hints,
    dra_postfilter,
    helpers,
)

NAME = "DynamicResources"

REASON_CANNOT_ALLOCATE = "cannot allocate all claims"
REASON_NOT_AVAILABLE = "resourceclaim not available on the node"
REASON_IN_USE = "resourceclaim in use"
#: Filter's ERROR when the allocator's search passed ``filterTimeout`` (upstream's text).
TIMEOUT_FORMAT = "node {node}: timed out trying to allocate devices"
#: What upstream's Filter answers on the nodes still running when another node's ERROR cancelled
#: the cycle's context ("some other Filter operation failed" is the cause findNodesThatPassFilters
#: gives that cancellation).
REASON_CANCELLED = "asked by caller to stop allocating devices: some other Filter operation failed"

_CANNOT_ALLOCATE = Status.unresolvable(REASON_CANNOT_ALLOCATE)
"""Filter's answer on most nodes of a DRA burst (a Status is immutable; made once)."""

#: PreBind's attempts at one claim's update when the API answers 409 Conflict (client-go's DefaultRetry).
CONFLICT_RETRIES = dra_claim_writes.CONFLICT_RETRIES


@dataclass(slots=True)
class _State:
    claims: list[dra.ResourceClaim] = field(default_factory=list)
    to_allocate: list[int] = field(default_factory=list)
    """Indices in ``claims`` of the claims this pod's scheduling must allocate."""
    allocating: list[dra.ResourceClaim] = field(default_factory=list)
    """Those claims themselves (built once in PreFilter, not once per node in Filter)."""
    in_use: frozenset[dra.DeviceID] = frozenset()
    prepared: dra_allocator.Prepared | None = None
    """The allocator's per-pod work for ``allocating``, done once in PreFilter (None with the
    extended-resource claim, whose requests each node decides)."""
    allocated: list[int] = field(default_factory=list)
    """Indices in ``claims`` of the claims already allocated (Filter checks where they are available)."""
    by_node: dict[str, list[dra.Allocation]] = field(default_factory=dict)
    """Each node's allocations, written out from ``chosen`` when first asked (:meth:`allocations`)."""
    chosen: dict[str, dra_allocator.Chosen] = field(default_factory=dict)
    """The devices Filter picked on each feasible node (most nodes never need more)."""
    pending: list[str] = field(default_factory=list)
    """UIDs of claims whose allocation Reserve signalled."""
    reserved: list[dra.ResourceClaim] = field(default_factory=list)
    """Claims PreBind added the pod to (Unreserve takes it out again)."""
    timed_out: str = ""
    """The node whose search passed ``filterTimeout`` in this cycle: its ERROR ends the attempt,
    so no node is searched again in this cycle (that node answers the same ERROR again)."""
    unavailable: set[int] = field(default_factory=set)
    """Indices in ``claims`` of allocated claims Filter found unavailable on some node (PostFilter
    may deallocate one of them)."""
    binding: Future[Status] | None = None
    """PreBind's wait for the devices' binding conditions (None: nothing to wait for)."""
    ext_index: int = -1
    """Index in ``claims`` of the claim for DRA-backed extended resources (-1: none)."""
    ext_wanted: dict[str, int] = field(default_factory=dict)
    """The pod's extended resource requests (that claim's source)."""
    ext_by_node: dict[str, dra_extended_claim.NodeClaim | None] = field(default_factory=dict)
    """That claim with each node's requests (None: the node needs no devices for it)."""
    ext_created: dra.ResourceClaim | None = None
    """The claim PreBind created for them (Unreserve deletes it)."""

    def allocations(self, node: str) -> list[dra.Allocation] | None:
        """The allocations Filter found on ``node`` (None: it found none there)."""
        got = self.by_node.get(node)
        if got is None:
            chosen = self.chosen.get(node)
            if chosen is None:
                return None
            self.by_node[node] = got = chosen.allocations()
        return got


STATE_KEY: StateKey[_State] = StateKey(NAME)


class ClaimMissing(Exception):
    """A claim of the pod does not exist (yet), is being deleted, or is not this pod's."""


def pod_claims(pod: Pod, store: DRAStore) -> list[dra.ResourceClaim]:
    """``foreachPodResourceClaim``: the pod's claims (as the store has them). Raises ClaimMissing
    with upstream's message when one is not created yet, missing, deleting or not the pod's."""
    out = []
    for rc in pod.resource_claims:
        if not rc.resolved:
            if rc.template:
                raise ClaimMissing(f'pod "{pod.namespace}/{pod.name}": ResourceClaim not created yet')
            raise ClaimMissing(
                f'pod "{pod.namespace}/{pod.name}", spec.resourceClaim "{rc.name}": '
                "none of the supported fields are set"
            )
        if not rc.claim:
            continue  # the controller decided no claim is needed
        claim = store.get_claim(pod.namespace, rc.claim)
        if claim is None:
            raise ClaimMissing(f'resourceclaim.resource.k8s.io "{rc.claim}" not found')
        if claim.deleting:
            raise ClaimMissing(f'resourceclaim "{claim.name}" is being deleted')
        if rc.template and claim.owner_uid != pod.uid:
            raise ClaimMissing(
                f"ResourceClaim {claim.namespace}/{claim.name} was not created for Pod "
                f"{pod.namespace}/{pod.name} (Pod is not owner)"
            )
        out.append(claim)
    return out


def compile_errors(claim: dra.ResourceClaim, store: DRAStore, cels: dra_allocator.CELCache) -> str:
    """The first selector of the claim (or of a class it uses) that does not compile, in
    upstream's words, or ""."""
    for dr in claim.requests:
        for req in dr.alternatives:
            cls = store.device_class(req.device_class)
            for i, expr in enumerate(cls.selectors if cls is not None else ()):
                c = cels.get(expr)
                if c.program is None:
                    return f"class {cls.name if cls else ''}: selector #{i}: CEL {c.cause}"
            for i, expr in enumerate(req.selectors):
                c = cels.get(expr)
                if c.program is None:
                    return f"claim {claim.key}: selector #{i}: CEL {c.cause}"
    return ""


def score_allocations(
    claims: Sequence[dra.ResourceClaim], to_allocate: Sequence[int], allocs: Sequence[dra.Allocation]
) -> int:
    """``computeScore``: ``FIRST_AVAILABLE_MAX - i`` for each firstAvailable subrequest ``i`` used."""
    score = 0
    by_claim = dict(zip(to_allocate, allocs, strict=False))
    for ci, claim in enumerate(claims):
        alloc = claim.allocation or by_claim.get(ci)
        if alloc is None:
            continue
        used = {r.request for r in alloc.results if "/" in r.request}
        for dr in claim.requests:
            if not dr.first_available:
                continue
            for i, sub in enumerate(dr.alternatives):
                if sub.name in used:
                    score += dra.FIRST_AVAILABLE_MAX - i
    return score


def chosen_devices(state: CycleState, node_name: str) -> list[str]:
    """What Filter allocated on ``node_name`` in this cycle, one line per claim (``explain``)."""
    s = state.get(STATE_KEY)
    if s is None:
        return []
    allocs = s.allocations(node_name) or []
    out = []
    for i, alloc in zip(s.to_allocate, allocs, strict=False):
        devs = ", ".join(f"{r.request}={r.driver}/{r.pool}/{r.device}" for r in alloc.results)
        out.append(f"claim {s.claims[i].key}: {devs}")
    for claim in s.claims:
        if claim.allocation is not None:
            devs = ", ".join(f"{r.request}={r.driver}/{r.pool}/{r.device}" for r in claim.allocation.results)
            out.append(f"claim {claim.key} (already allocated): {devs}")
    return out


# -- args (dra_args; re-exported: configs and tests name them here) ---------------------------------

DEFAULT_FILTER_TIMEOUT = dra_args.DEFAULT_FILTER_TIMEOUT
DEFAULT_BINDING_TIMEOUT = dra_args.DEFAULT_BINDING_TIMEOUT
MIN_BINDING_TIMEOUT = dra_args.MIN_BINDING_TIMEOUT
ARGS_KIND = dra_args.ARGS_KIND
DynamicResourcesArgs = dra_args.DynamicResourcesArgs
parse_args = dra_args.parse_args


claim_path = dra_claim_writes.claim_path


class DynamicResources:
    #: Its ``sign_pod`` refuses some pods: the Signer asks it first.
    may_refuse_signing = True

    name: ClassVar[str] = NAME

    def __init__(self, args: DynamicResourcesArgs | None, handle: Handle) -> None:
        if args is None:
            args = DynamicResourcesArgs()
        elif not isinstance(args, DynamicResourcesArgs):
            raise TypeError(f"got args of type {type(args).__name__}, want DynamicResourcesArgs")
        self.args = args
        self.handle = handle
        self.cels = _CELS

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """The DRA changes that may help (see :mod:`.dra_hints`)."""
        return dra_hints.registrations()

    def sign_pod(self, pod: Pod) -> list[tuple[str, object]] | None:
        """A pod with resource claims is not signable (each claim is its own)."""
        return None if pod.resource_claims else []

    @property
    def store(self) -> DRAStore:
        return self.handle.dra

    # -- queue ------------------------------------------------------------------------------------
    def pre_enqueue(self, pod: Pod) -> Status:
        if not pod.resource_claims:
            return SUCCESS
        try:
            pod_claims(pod, self.store)
        except ClaimMissing as e:
            return Status.unresolvable(str(e))
        return SUCCESS

    # -- scheduling cycle -------------------------------------------------------------------------
    def pre_filter(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        # Written first, for every pod, as upstream: PostFilter tells "PreFilter never ran" (an
        # earlier PreFilter plugin rejected the pod) from "no claims" by it.
        s = _State()
        state.write(STATE_KEY, s)
        store = self.store
        wanted = dra_extended_claim.backed_resources(pod, store)
        if not pod.resource_claims and not wanted:
            return SKIP
        try:
            claims = pod_claims(pod, store)
        except ClaimMissing as e:
            return Status.unresolvable(str(e))
        if wanted:
            s.ext_wanted, s.ext_index = wanted, len(claims)
            found = store.extended_claim_for(pod.namespace, pod.name, pod.uid)
            claims.append(found or dra_extended_claim.special_claim(pod))
        if not claims:
            return SKIP
        s.claims = claims
        for i, claim in enumerate(claims):
            rejected = self._check_claim(claim, pod, i == s.ext_index)
            if rejected is not None:
                return rejected
            if claim.allocation is None:
                s.to_allocate.append(i)
        s.allocating = [claims[i] for i in s.to_allocate]
        s.allocated = [i for i, c in enumerate(claims) if c.allocation is not None]
        if s.to_allocate:
            s.in_use = store.allocated_devices()
            if s.ext_index < 0:
                s.prepared = dra_allocator.Prepared(s.allocating, store.device_class)
        return SUCCESS

    def _check_claim(self, claim: dra.ResourceClaim, pod: Pod, extended: bool) -> Status | None:
        """PreFilter's verdict on one claim (None: it passes; it is to be allocated unless it is
        allocated already). The extended-resource claim's requests come per node (Filter)."""
        store = self.store
        if claim.allocation is not None:
            if not claim.can_be_reserved and not claim.reserved_for_pod(pod.uid):
                return Status.unresolvable(REASON_IN_USE)
            return None
        if store.pending_allocation(claim.uid) is not None:
            return Status.unresolvable(f"resource claim {claim.key} is in the process of being allocated")
        if extended:
            return None
        for dr in claim.requests:
            for req in dr.alternatives:
                if store.device_class(req.device_class) is None:
                    return Status.unresolvable(f"request {req.name}: device class {req.device_class} does not exist")
        err = compile_errors(claim, store, self.cels)
        return Status.as_error(err) if err else None

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        s = state.read(STATE_KEY)
        node = node_info.node
        if node is None:
            return Status.as_error("node not found")
        if not s.claims:
            return SUCCESS
        allocating = s.allocating
        if s.ext_index >= 0:
            rejected, allocating = self._extended_on(s, pod, node_info)
            if rejected is not None:
                return rejected
            if len(s.claims) == 1 and s.ext_by_node.get(node.name) is None:
                return SUCCESS  # only extended resources, all offered by the node itself
        if s.allocated:
            unavailable = [i for i in s.allocated if self._unavailable(s.claims[i], node.name, node.labels)]
            if unavailable:
                s.unavailable.update(unavailable)
                return Status.unresolvable(REASON_NOT_AVAILABLE)
        if not s.to_allocate:
            return SUCCESS
        return self._allocate_on(s, node.name, node.labels, allocating)

    def _allocate_on(
        self, s: _State, node: str, labels: dict[str, str], allocating: Sequence[dra.ResourceClaim]
    ) -> Status:
        """Filter's allocation of the pod's unallocated claims from the devices the node reaches."""
        if s.timed_out:
            # That node again (the framework re-runs the filters for every node's reason when none
            # fit): the same ERROR. Any other node: what upstream's cancelled filters answer.
            if s.timed_out == node:
                return Status.as_error(TIMEOUT_FORMAT.format(node=node))
            return Status.unresolvable(REASON_CANCELLED)
        store = self.store
        cands = store.candidates(node, labels)
        timeout = self.args.filter_timeout
        deadline = time.monotonic() + timeout if timeout > 0 else None
        try:
            if s.prepared is not None:
                chosen = s.prepared.choose(cands, s.in_use, self.cels, node, deadline=deadline)
                allocs = None
                if chosen is None:
                    return _CANNOT_ALLOCATE
            else:
                chosen = None
                allocs = dra_allocator.allocate(
                    allocating, cands, s.in_use, store.device_class, self.cels, node, deadline=deadline
                )
        except dra_allocator.AllocationError as e:
            return Status.as_error(str(e))
        except dra_allocator.NodeUnschedulable as e:  # upstream's ErrFailedAllocationOnNode
            return Status.unresolvable(str(e))
        except dra_allocator.AllocationTimeout:
            s.timed_out = node
            return Status.as_error(TIMEOUT_FORMAT.format(node=node))
        if chosen is not None:
            s.chosen[node] = chosen
            s.by_node.pop(node, None)  # a filter run again on the node: the new answer stands
            return SUCCESS
        if allocs is None:
            return _CANNOT_ALLOCATE
        s.by_node[node] = allocs
        return SUCCESS

    def _extended_on(self, s: _State, pod: Pod, node_info: NodeInfo) -> tuple[Status | None, list[dra.ResourceClaim]]:
        """The extended-resource claim on this node: a rejection, or the claims to allocate with
        it holding this node's requests (none when the node offers the resources itself)."""
        name = node_info.name
        got = dra_extended_claim.for_node(
            s.claims[s.ext_index], s.ext_wanted, node_info.allocatable.scalar, self._class_name, pod
        )
        rejected, node_claim = got
        if rejected is not None:
            return rejected, []
        s.ext_by_node[name] = node_claim
        if s.ext_index not in s.to_allocate:
            return None, s.allocating
        pos = s.to_allocate.index(s.ext_index)
        ext = s.claims[s.ext_index]
        replacement = node_claim.claim if node_claim is not None else dra_extended_claim.without_requests(ext)
        return None, [*s.allocating[:pos], replacement, *s.allocating[pos + 1 :]]

    def _class_name(self, resource: str) -> str | None:
        cls = self.store.extended_resource_class(resource)
        return cls.name if cls is not None else None

    def _unavailable(self, claim: dra.ResourceClaim, node: str, labels: dict[str, str]) -> bool:
        """An allocated claim the pod cannot use on this node: its allocation's node selector does
        not match, or its devices' binding failed or timed out (then no node can use it)."""
        alloc = claim.allocation
        if alloc is None:
            return False
        return not alloc.available_on(node, labels) or dra_binding.unavailable(claim, self.args.binding_timeout)

    def post_filter(self, state: CycleState, pod: Pod, statuses: Any) -> PostFilterResult:
        """Deallocate a claim that is unavailable on the nodes (see :mod:`dra_postfilter`)."""
        s = state.get(STATE_KEY)
        if s is None:  # PreFilter never ran: upstream's failed read of its state
            return dra_postfilter.error(dra_postfilter.STATE_NOT_FOUND)
        if not s.claims:
            return dra_postfilter.unschedulable()
        return dra_postfilter.deallocate_one(
            s.claims, s.unavailable, pod, self.handle.client, self.store, state.rng, extended=s.ext_index
        )

    def pre_score(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        s = state.get(STATE_KEY)
        if s is None or not any(dr.first_available for c in s.claims for dr in c.requests):
            return SKIP
        return SUCCESS

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> int:
        s = state.read(STATE_KEY)
        allocs = s.allocations(node_info.name)
        if allocs is None and s.to_allocate:
            return 0
        return score_allocations(s.claims, s.to_allocate, allocs or [])

    def normalize_score(self, state: CycleState, pod: Pod, scores: list[NodeScore]) -> Status:
        helpers.default_normalize_score(scores, reverse=False, max_priority=MAX_NODE_SCORE)
        return SUCCESS

    def reserve(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        s = state.get(STATE_KEY)
        if s is None or not s.to_allocate:
            return SUCCESS
        allocs = s.allocations(node_name)
        if allocs is None and s.to_allocate == [s.ext_index] and s.ext_by_node.get(node_name) is None:
            return SUCCESS  # only the extended resources, which the node offers itself
        if allocs is None or len(allocs) != len(s.to_allocate):
            return Status.as_error("claim allocation not found for node")
        configured = [
            dra_config.with_config(self._claim_on(s, i, node_name), a, self.store.device_class)
            for i, a in zip(s.to_allocate, allocs, strict=True)
        ]
        s.by_node[node_name] = allocs = configured
        for i, alloc in zip(s.to_allocate, allocs, strict=True):
            claim = s.claims[i]
            if i == s.ext_index and s.ext_by_node.get(node_name) is None:
                continue  # nothing to allocate for it on this node
            if not self.store.signal_pending(claim, alloc):
                self._drop_pending(s)
                return Status.unresolvable(f"resource claim {claim.key} is in the process of being allocated")
            s.pending.append(claim.uid)
        return SUCCESS

    @staticmethod
    def _claim_on(s: _State, i: int, node_name: str) -> dra.ResourceClaim:
        """Claim ``i`` as allocated on the node (the extended-resource claim with its requests)."""
        node_claim = s.ext_by_node.get(node_name) if i == s.ext_index else None
        return node_claim.claim if node_claim is not None else s.claims[i]

    def _drop_pending(self, s: _State) -> None:
        for uid in s.pending:
            self.store.remove_pending(uid)
        s.pending.clear()

    def unreserve(self, state: CycleState, pod: Pod, node_name: str) -> None:
        s = state.get(STATE_KEY)
        if s is None:
            return
        self._drop_pending(s)
        client = self.handle.client
        created = s.ext_created
        for claim in s.reserved:
            if client is None:
                break
            if created is not None and claim.uid == created.uid:
                continue  # deleted below
            try:
                dra_claim_writes.update_status(
                    client, self.store, claim, lambda c: dra_claim_writes.without_pod(c, pod.uid)
                )
            except Exception:
                pass  # best effort, as upstream's patch: the resourceclaim controller also cleans up
        s.reserved.clear()
        if created is not None and client is not None:
            s.ext_created = None
            try:
                dra_extended_claim.delete(
                    client, self.store.get_claim(created.namespace, created.name) or created, self.store
                )
            except Exception:
                pass  # best effort, as upstream (it logs): the garbage collector deletes it with the pod

    # -- binding cycle ----------------------------------------------------------------------------
    def pre_bind_pre_flight(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        """Upstream's: PreBind has work whenever the pod has claims (reserve, maybe allocate)."""
        s = state.get(STATE_KEY)
        return SUCCESS if s is not None and s.claims else SKIP

    def pre_bind(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        s = state.get(STATE_KEY)
        if s is None or not s.claims:
            return SUCCESS
        client = self.handle.client
        if client is None:
            return Status.as_error("no API client to reserve resource claims")
        allocs = dict(zip(s.to_allocate, s.allocations(node_name) or [], strict=False))
        consumer = dra.Consumer("pods", pod.name, pod.uid)
        for i, claim in enumerate(s.claims):
            alloc = allocs.get(i)
            node_claim = s.ext_by_node.get(node_name) if i == s.ext_index else None
            if i == s.ext_index and node_claim is None and claim.allocation is None:
                continue  # the node offers the extended resources itself: no claim
            try:
                target = claim
                if node_claim is not None and dra_extended_claim.is_special(claim):
                    s.ext_created = target = dra_extended_claim.create(client, node_claim)
                    self.store.assume_claim(target)
                updated = dra_claim_writes.bind_claim(client, target, alloc, consumer)
                if node_claim is not None:
                    dra_extended_claim.patch_pod_status(client, pod, updated.name, node_claim)
            except Exception as e:
                return Status.as_error(str(e))
            s.reserved.append(updated)
            self.store.assume_claim(updated)
            if alloc is not None:
                uid = s.claims[i].uid  # the special claim's pending allocation has its in-memory UID
                self.store.remove_pending(uid)
                if uid in s.pending:
                    s.pending.remove(uid)
        if dra_binding.has_binding_conditions(s.reserved):
            self.handle.record_event(
                pod,
                type_="Normal",
                reason=dra_binding.EVENT_REASON,
                action="Scheduling",
                note=dra_binding.EVENT_NOTE.format(node=node_name),
            )
            s.binding = dra_binding.waiter_for(self.store).wait(s.reserved, self.args.binding_timeout)
        return SUCCESS

    def pre_bind_pending(self, state: CycleState, pod: Pod, node_name: str) -> Future[Status] | None:
        s = state.get(STATE_KEY)
        return s.binding if s is not None else None


_CELS = dra_allocator.CELCache()

SPEC = registry.PluginSpec(NAME, factory=DynamicResources, parse_args=parse_args)
