"""The structured device allocator: upstream's ``k8s.io/dynamic-resource-allocation/structured``
kept beside the DynamicResources plugin that drives it, apart from the API projections in
:mod:`custom_scheduler.api.dra` (as upstream keeps the allocator apart from the API types).

:func:`allocate` is the pure part of upstream's structured allocator, the ``incubating`` variant
that 1.37 selects with its default gates (consumable capacity and binding conditions are beta and
on, which the ``stable`` variant does not support): given the claims to allocate, the devices a
node reaches (pool by pool, see :mod:`custom_scheduler.api.dra_pools`) and the allocated state, it
finds one device per requested slot (``exactly`` with ``count`` or ``allocationMode: All``,
``firstAvailable`` subrequests in order) with the class's and the request's CEL selectors, and
backtracks (:mod:`custom_scheduler.plugins.dra_search`) over what depends on earlier picks:

- a device is taken once, except with ``adminAccess`` (not consumed: it may be allocated while
  in use, only not twice to the same claim) or ``allowMultipleAllocations`` (shared while its
  capacity lasts; each share gets a ``shareID`` and its ``consumedCapacity``);
- a device that consumes counters fits only while its pool's counter sets, minus what every
  allocated, assumed, pending and just-picked device consumes, stay non-negative;
- a device tainted NoSchedule/NoExecute is skipped unless the request tolerates the taint;
- ``matchAttribute`` and ``distinctAttribute`` constraints.

Error messages are upstream's (``claim ns/name: selector #0: CEL compile error: ...``), so a user
reads the same reason as from kube-scheduler. CEL lives in :mod:`custom_scheduler.plugins.dra_cel`.

The search can be exponential, so, as upstream bounds it with ``DynamicResourcesArgs.filterTimeout``
through its context, :func:`allocate` takes a ``deadline`` (a :func:`time.monotonic` instant) and
raises :class:`AllocationTimeout` once it passed (checked every :data:`DEADLINE_CHECK_STEPS` picks
and after each request's selectors).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from custom_scheduler.api import dra_devices as ddev
from custom_scheduler.api.dra import (
    ALL,
    Allocation,
    Candidate,
    DeviceClass,
    DeviceID,
    DeviceResult,
    Request,
    ResourceClaim,
    device_id_str,
)
from custom_scheduler.api.dra_pools import AllocatedState
from custom_scheduler.plugins.dra_cel import DEVICE_MEMO_MAX, CELCache, CELError
from custom_scheduler.plugins.dra_search import (
    ALLOCATION_RESULTS_MAX_SIZE,
    DEADLINE_CHECK_STEPS,
    AllocationError,
    AllocationTimeout,
    Options,
    Pick,
    Search,
    check_deadline,
    claim_ref,
)

__all__ = [
    "ALLOCATION_RESULTS_MAX",
    "DEADLINE_CHECK_STEPS",
    "DEVICE_MEMO_MAX",
    "AllocationError",
    "AllocationTimeout",
    "CELCache",
    "CELError",
    "NodeUnschedulable",
    "allocate",
]

#: ``ErrFailedAllocationOnNode`` text when nothing fits and a pool reaching the node is invalid.
REASON_INVALID_POOLS = "invalid resource pools were encountered"

#: ``resourceapi.AllocationResultsMaxSize``: at most this many results in one claim's allocation
#: (API validation refuses a bigger ``status.allocation``, so the allocator never builds one).
ALLOCATION_RESULTS_MAX = ALLOCATION_RESULTS_MAX_SIZE

InUse = Mapping[DeviceID, Any] | frozenset[DeviceID] | set[DeviceID]


class NodeUnschedulable(Exception):
    """Upstream's ``ErrFailedAllocationOnNode``: this node cannot serve the claims, for the reason in
    the message (Unschedulable, not an error: other nodes may)."""


def _matching(
    claim: ResourceClaim,
    req: Request,
    classes: Callable[[str], DeviceClass | None],
    candidates: Sequence[Candidate],
    cels: CELCache,
) -> list[Candidate]:
    """The candidates that pass the request's class selectors, then its own, in order."""
    cls = classes(req.device_class)
    if cls is None:
        raise AllocationError(
            f"claim {claim_ref(claim)}, request {req.name}: could not retrieve device class {req.device_class}: "
            f'deviceclass.resource.k8s.io "{req.device_class}" not found'
        )
    of_class, of_claim = f"class {cls.name}", f"claim {claim_ref(claim)}"
    return [
        c
        for c in candidates
        if _selected(cls.selectors, c, cels, of_class) and _selected(req.selectors, c, cels, of_claim)
    ]


def _selected(selectors: Sequence[str], c: Candidate, cels: CELCache, owner: str) -> bool:
    """Whether every one of ``owner``'s selectors accepts the device; a CEL error is an
    AllocationError with upstream's message (``class gpu: selector #0 on device ...: CEL ...``)."""
    for i, expr in enumerate(selectors):
        try:
            if not cels.matches(expr, c.device):
                return False
        except CELError as e:
            expression_level = str(e).startswith(("compile error", "cost error"))
            where = "" if expression_level else f" on device {device_id_str(c.id)}"
            raise AllocationError(f"{owner}: selector #{i}{where}: CEL {e}") from None
    return True


def _capacity_fits(claim: ResourceClaim, req: Request, c: Candidate, allocated: Mapping[str, Decimal] | None) -> bool:
    """``CmpRequestOverCapacity`` on what other claims hold; a device with nothing to check (no
    capacity request, no policy, not shared) fits without computing."""
    if req.capacity is None and c.device.simple:
        return True
    try:
        return ddev.fits(req.capacity, c.device.capacity, allocated, None)
    except ddev.CapacityError as e:
        raise AllocationError(
            f"claim {claim_ref(claim)}, request {req.name}: checking capacity for device {device_id_str(c.id)}: {e}"
        ) from None


def _usable(claim: ResourceClaim, req: Request, c: Candidate, in_use: InUse, shared: Mapping[DeviceID, Any]) -> bool:
    """What does not depend on the other picks: free (unless admin access), no untolerated taint,
    capacity left after other claims."""
    if not req.admin_access and c.id in in_use:
        return False
    if c.device.taints and ddev.taint_blocks(c.device.taints, req.tolerations):
        return False
    return _capacity_fits(claim, req, c, shared.get(c.id))


def _all_devices(
    claim: ResourceClaim, req: Request, matching: list[Candidate], in_use: InUse, bad_pools: Sequence[ddev.Pool]
) -> tuple[list[Candidate], int]:
    """``allocationMode: All``: every matching device whose static capacity admits the request,
    or nothing when one of them cannot be had, and how many "all" is (what counts against
    :data:`ALLOCATION_RESULTS_MAX`); an error when a pool is incomplete or invalid."""
    for p in bad_pools:
        state = "being updated" if p.incomplete else "invalid"
        raise AllocationError(
            f"claim {claim_ref(claim)}, request {req.name}: asks for all devices, "
            f"but resource pool {p.id} is currently {state}"
        )
    every = [c for c in matching if _capacity_fits(claim, req, c, None)]
    if any(not _usable(claim, req, c, in_use, {}) for c in every):
        return [], len(every)  # All means all: one device taken, tainted or full and it cannot fit
    return every, len(every)


def check_claim_limit(claim: ResourceClaim, request: str, need: int, counted: int) -> int:
    """Upstream's check while gathering a claim's requests: ``need`` more devices (the fewest any
    alternative of ``request`` takes) on top of ``counted`` must stay within
    :data:`ALLOCATION_RESULTS_MAX`, or the claim can never be allocated (an error on any node).
    Returns the new count."""
    if need > ALLOCATION_RESULTS_MAX - counted:
        raise AllocationError(
            f"claim {claim_ref(claim)}, request {request}: adding {need} devices exceeds the claim limit "
            f"of {ALLOCATION_RESULTS_MAX}, with {counted} already accounted for"
        )
    return counted + need


def _options(
    claims: Sequence[ResourceClaim],
    candidates: Sequence[Candidate],
    in_use: InUse,
    classes: Callable[[str], DeviceClass | None],
    cels: CELCache,
    deadline: float | None = None,
) -> Options:
    """What each alternative of each request may take (selectors and the static checks once).
    Raises AllocationTimeout when ``deadline`` passed (checked after each request)."""
    shared = in_use.shared if isinstance(in_use, AllocatedState) else {}
    bad_pools = getattr(candidates, "bad_pools", ())
    options: Options = []
    for claim in claims:
        per_req = []
        counted = 0
        for dr in claim.requests:
            per_alt = []
            fewest = None
            for alt in dr.alternatives:
                matching = _matching(claim, alt, classes, candidates, cels)
                if alt.mode == ALL:
                    devices, n = _all_devices(claim, alt, matching, in_use, bad_pools)
                    per_alt.append(devices)
                else:
                    per_alt.append([c for c in matching if _usable(claim, alt, c, in_use, shared)])
                    n = alt.count
                fewest = n if fewest is None else min(fewest, n)
            counted = check_claim_limit(claim, dr.name, fewest or 0, counted)
            per_req.append(per_alt)
            check_deadline(deadline)
        options.append(per_req)
    return options


def _check_constraints(claims: Sequence[ResourceClaim]) -> None:
    for claim in claims:
        for i, con in enumerate(claim.constraints):
            if not con.match_attribute and not con.distinct_attribute:
                raise AllocationError(
                    f"claim {claim_ref(claim)}, constraint #{i}: empty constraint (unsupported constraint type?)"
                )


def allocate(
    claims: Sequence[ResourceClaim],
    candidates: Sequence[Candidate],
    in_use: InUse,
    classes: Callable[[str], DeviceClass | None],
    cels: CELCache,
    node_name: str,
    *,
    deadline: float | None = None,
) -> list[Allocation] | None:
    """Allocate every claim of ``claims`` from ``candidates`` (a node's devices; a
    :class:`~custom_scheduler.api.dra_pools.NodeDevices` also names its unusable pools), or None
    when they do not fit. ``in_use`` is the allocated state (an
    :class:`~custom_scheduler.api.dra_pools.AllocatedState` also knows the shared devices; a plain
    set: devices held exclusively). Raises AllocationError for what no node can fix (CEL errors,
    missing classes), NodeUnschedulable when invalid pools may be why nothing fits, and
    AllocationTimeout when ``deadline`` (a :func:`time.monotonic` instant) passes first."""
    _check_constraints(claims)
    bad_pools: Sequence[ddev.Pool] = getattr(candidates, "bad_pools", ())
    if not candidates and not bad_pools and any(c.requests for c in claims):
        # A node without devices (half the nodes of a typical DRA cluster): nothing can fit, but a
        # missing class is still the same error as with devices, in the same order.
        for claim in claims:
            counted = 0
            for dr in claim.requests:
                for alt in dr.alternatives:
                    _matching(claim, alt, classes, (), cels)
                fewest = min(0 if alt.mode == ALL else alt.count for alt in dr.alternatives)
                counted = check_claim_limit(claim, dr.name, fewest, counted)
        return None
    options = _options(claims, candidates, in_use, classes, cels, deadline)
    chosen = _take_first(claims, options)
    if chosen is None:
        shared = in_use.shared if isinstance(in_use, AllocatedState) else {}
        chosen = Search(claims, options, in_use, shared, deadline).run()
    if chosen is None:
        if any(p.invalid for p in bad_pools):
            raise NodeUnschedulable(REASON_INVALID_POOLS)
        return None
    return [_allocation(claim, picks, node_name) for claim, picks in zip(claims, chosen, strict=True)]


def _take_first(claims: Sequence[ResourceClaim], options: Options) -> list[list[Pick]] | None:
    """The common shape (one claim, one request with one alternative, no constraints, plain
    devices): the search would take the first ``need`` matching devices in order, one step each,
    with nothing to backtrack over; take them directly. None: let the search decide."""
    if len(claims) != 1 or len(claims[0].requests) != 1 or claims[0].constraints:
        return None
    only = claims[0].requests[0]
    if len(only.alternatives) != 1:
        return None
    alt, opts = only.alternatives[0], options[0][0][0]
    need = len(opts) if alt.mode == ALL else alt.count
    if need == 0 or len(opts) < need or not all(c.device.simple for c in opts[:need]):
        return None
    return [[Pick(alt, c) for c in opts[:need]]]


def _result(p: Pick) -> DeviceResult:
    shared = p.cand.device.allow_multiple
    return DeviceResult(
        p.alt.name,
        *p.cand.id,
        admin_access=p.alt.admin_access,
        tolerations=p.alt.tolerations_raw,
        share_id=str(uuid.uuid4()) if shared else "",
        consumed=tuple((k, q.text) for k, q in (p.consumed or {}).items()) if shared else (),
        binding_conditions=p.cand.device.binding_conditions,
        binding_failure_conditions=p.cand.device.binding_failure_conditions,
    )


def _allocation(claim: ResourceClaim, picks: Sequence[Pick], node_name: str) -> Allocation:
    return Allocation(tuple(_result(p) for p in picks), _node_selector(claim, picks, node_name))


def _node_selector(claim: ResourceClaim, picks: Sequence[Pick], node_name: str) -> dict[str, Any] | None:
    """``createNodeSelector``: this node (``metadata.name``) when a device is local to one node;
    else the one-term node selectors of the devices' slices (or of the devices, with per-device node
    selection) merged into one term; None (everywhere) when no device restricts it."""
    fields: list[dict[str, Any]] = []
    exprs: list[dict[str, Any]] = []
    for p in picks:
        s, d = p.cand.slice, p.cand.device
        name, raw = (d.node_name, d.node_selector_raw) if s.per_device else (s.node_name, s.node_selector_raw)
        if name or d.binds_to_node:  # local to one node, or binds to the node it is allocated for
            return {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
                ]
            }
        terms = (raw or {}).get("nodeSelectorTerms") or []
        if len(terms) > 1:
            raise AllocationError(
                f"create NodeSelector for claim {claim.name}: "
                f"unsupported ResourceSlice.NodeSelector with {len(terms)} terms"
            )
        if terms:
            _merge(terms[0].get("matchFields") or [], fields)
            _merge(terms[0].get("matchExpressions") or [], exprs)
    if not fields and not exprs:
        return None
    term: dict[str, Any] = {}
    if exprs:
        term["matchExpressions"] = exprs
    if fields:
        term["matchFields"] = fields
    return {"nodeSelectorTerms": [term]}


def _merge(src: Sequence[Mapping[str, Any]], into: list[dict[str, Any]]) -> None:
    """``addNewNodeSelectorRequirements``: add each requirement not already there (same key,
    operator and set of values)."""
    for r in src:
        values = set(r.get("values") or ())
        if not any(
            x.get("key") == r.get("key")
            and x.get("operator") == r.get("operator")
            and set(x.get("values") or ()) == values
            for x in into
        ):
            into.append(dict(r))
